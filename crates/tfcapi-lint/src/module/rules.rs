//! The module checks: one function per contract rule a static reading can check (spec: Module
//! Contract "Naming rules" and "Null semantics", Common "Inputs", "captf_cluster_outputs",
//! "captf_tags", "User variables" and "Outputs", and the role chapters' inputs and outputs).

use super::expr::{Kind, Node};
use super::load::{Module, Output, Runtime, Variable};
use super::types::{compatible, parse_type_str};
use crate::checks;
use crate::report::Finding;
use crate::role::{
    ADDRESS_TYPES, ADDRESSES_OUTPUT, CAPTF_CLUSTER_OUTPUTS, CAPTF_TAGS,
    CONTROL_PLANE_ENDPOINT_OUTPUT, EXPORTS_OUTPUT, HEALTH_OUTPUT, META_ARGUMENTS,
    PROVIDER_ID_LIST_OUTPUT, RESERVED_PREFIX, Role, health_states,
};
use std::collections::{BTreeMap, BTreeSet};

/// Runs every module check for `role` under `runtime`; `dir` names the module in findings
/// without a file.
pub fn check(module: &Module, role: Role, dir: &str, runtime: Runtime) -> Vec<Finding> {
    let mut out = Vec::new();
    backend(module, &mut out);
    contract_inputs(module, role, dir, &mut out);
    cluster_outputs_default(module, role, &mut out);
    user_variables(module, role, runtime, &mut out);
    tags_unused(module, &mut out);
    required_outputs(module, role, dir, &mut out);
    output_names(module, &mut out);
    sensitive_references(module, role, &mut out);
    if let Some(o) = module.output(HEALTH_OUTPUT) {
        health_shape(o, &mut out);
    }
    match role {
        Role::Cluster => {
            if let Some(o) = module.output(CONTROL_PLANE_ENDPOINT_OUTPUT) {
                endpoint(o, &mut out);
            }
            if let Some(o) = module.output(EXPORTS_OUTPUT) {
                exports_numbers(o, &mut out);
            }
        }
        Role::Machine => {
            if let Some(o) = module.output(ADDRESSES_OUTPUT) {
                addresses(o, &mut out);
            }
        }
        Role::Machinepool => {
            if let Some(o) = module.output(PROVIDER_ID_LIST_OUTPUT) {
                provider_id_list(o, &mut out);
            }
        }
    }
    out
}

fn backend(module: &Module, out: &mut Vec<Finding>) {
    for b in &module.backends {
        out.push(Finding::error(
            checks::MODULE_BACKEND,
            &b.file,
            Some(b.line),
            format!(
                "the module declares a {} block; a CAPTF module is a child module (the controller generates the root and its kubernetes backend): remove it",
                b.what
            ),
        ));
    }
}

fn skeleton(name: &str, type_expr: &str, nullable: bool, sensitive: bool) -> String {
    if nullable {
        format!("variable \"{name}\" {{ type = {type_expr}, default = null }} (over several lines)")
    } else if sensitive {
        format!(
            "variable \"{name}\" {{ type = {type_expr}, sensitive = true }} (over several lines)"
        )
    } else {
        format!("variable \"{name}\" {{ type = {type_expr} }}")
    }
}

fn contract_inputs(module: &Module, role: Role, dir: &str, out: &mut Vec<Finding>) {
    for decl in role.inputs() {
        let Some(var) = module.variable(decl.name) else {
            out.push(Finding::error(
                checks::INPUT_MISSING,
                dir,
                None,
                format!(
                    "contract input `{}` of the {role} role is not declared; add {}",
                    decl.name,
                    skeleton(decl.name, decl.type_expr, decl.nullable, decl.sensitive)
                ),
            ));
            continue;
        };
        input_type(var, decl.type_expr, out);
        input_default(var, decl.nullable, out);
        if decl.nullable && var.nullable == Some(false) {
            out.push(Finding::error(
                checks::INPUT_NULLABLE,
                &var.file,
                Some(var.line),
                format!(
                    "contract input `{}` may be null, but is declared nullable = false: the run fails when the controller passes null; remove nullable = false",
                    var.name
                ),
            ));
        }
        if decl.sensitive && var.sensitive != Some(true) {
            out.push(Finding::warning(
                checks::INPUT_BOOTSTRAP_DATA_SENSITIVE,
                &var.file,
                Some(var.line),
                format!(
                    "`{}` carries bootstrap secrets; declare it sensitive = true",
                    var.name
                ),
            ));
        }
    }
}

fn input_type(var: &Variable, contract_type: &str, out: &mut Vec<Finding>) {
    let Some(decl) = &var.ty else {
        return;
    };
    let Ok(given) = parse_type_str(contract_type) else {
        return;
    };
    match &decl.ty {
        Err(why) => out.push(Finding::error(
            checks::INPUT_TYPE,
            &var.file,
            Some(decl.line),
            format!("the type of contract input `{}` is not a valid type constraint ({why}); the contract's type is {given}", var.name),
        )),
        Ok(declared) => {
            if let Err(why) = compatible(&given, declared) {
                out.push(Finding::error(
                    checks::INPUT_TYPE,
                    &var.file,
                    Some(decl.line),
                    format!(
                        "contract input `{}` is declared {declared}, but the contract passes {given} ({why}); declare type = {given}",
                        var.name
                    ),
                ));
            }
        }
    }
}

fn input_default(var: &Variable, nullable: bool, out: &mut Vec<Finding>) {
    let Some(default) = &var.default else {
        return;
    };
    let message = if !nullable {
        format!(
            "contract input `{}` is always set by the controller: its default is never used and would hide a missing input; remove it",
            var.name
        )
    } else if default.kind != Kind::Null {
        format!(
            "contract input `{}` is always passed by the controller (null when unset): a non-null default is never used; write default = null or remove it",
            var.name
        )
    } else {
        return;
    };
    out.push(Finding::warning(
        checks::INPUT_DEFAULT,
        &var.file,
        Some(default.line),
        message,
    ));
}

fn cluster_outputs_default(module: &Module, role: Role, out: &mut Vec<Finding>) {
    if role != Role::Cluster {
        return;
    }
    if let Some(var) = module.variable(CAPTF_CLUSTER_OUTPUTS)
        && var.default.is_none()
    {
        out.push(Finding::error(
            checks::INPUT_CLUSTER_OUTPUTS_DEFAULT,
            &var.file,
            Some(var.line),
            "the cluster role is never passed captf_cluster_outputs, and a declaration without a default fails validate: add default = null (over several lines) or remove the variable",
        ));
    }
}

fn user_variables(module: &Module, role: Role, runtime: Runtime, out: &mut Vec<Finding>) {
    for var in &module.variables {
        if role.input(&var.name).is_some() {
            continue;
        }
        if let Some(decl) = &var.ty
            && let Err(why) = &decl.ty
        {
            out.push(Finding::error(
                checks::INPUT_TYPE,
                &var.file,
                Some(decl.line),
                format!(
                    "the type of variable `{}` is not a valid type constraint ({why})",
                    var.name
                ),
            ));
        }
        if var.name.starts_with(RESERVED_PREFIX) {
            if role == Role::Cluster && var.name == CAPTF_CLUSTER_OUTPUTS {
                continue;
            }
            out.push(Finding::error(
                checks::NAMING_RESERVED_PREFIX,
                &var.file,
                Some(var.line),
                format!(
                    "variable `{}` uses the reserved prefix captf_ but is not a contract input of the {role} role; rename it",
                    var.name
                ),
            ));
        } else if META_ARGUMENTS.contains(&var.name.as_str()) {
            out.push(Finding::error(
                checks::INPUT_RESERVED_NAME,
                &var.file,
                Some(var.line),
                format!(
                    "variable `{}` is named after a module meta-argument, which Terraform and OpenTofu reserve; rename it",
                    var.name
                ),
            ));
        } else if var.default.is_none() {
            out.push(Finding::warning(
                checks::INPUT_USER_VARIABLE_DEFAULT,
                &var.file,
                Some(var.line),
                format!(
                    "user variable `{}` has no default: every object that does not set it in spec.variables fails plan; add a default",
                    var.name
                ),
            ));
        } else if var.defaults_to_null()
            && let Some(condition) = var.validation_rejecting_null(runtime)
        {
            out.push(Finding::warning(
                checks::INPUT_USER_VARIABLE_DEFAULT,
                &var.file,
                Some(var.line),
                format!(
                    "user variable `{}` defaults to null but a validation rejects null (with the variable null, `{}` is false or fails), so it is required in effect: every object that does not set it in spec.variables fails plan; give it a non-null default, or let the validation accept null",
                    var.name,
                    one_line(condition)
                ),
            ));
        }
    }
}

/// A condition on one line, its runs of whitespace made one space, cut at 200 characters.
fn one_line(condition: &str) -> String {
    let words: Vec<&str> = condition.split_whitespace().collect();
    let joined = words.join(" ");
    match joined.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

fn tags_unused(module: &Module, out: &mut Vec<Finding>) {
    if let Some(var) = module.variable(CAPTF_TAGS)
        && !module.refs.contains(&format!("var.{CAPTF_TAGS}"))
    {
        out.push(Finding::warning(
            checks::INPUT_TAGS_UNUSED,
            &var.file,
            Some(var.line),
            "captf_tags is never referenced: apply var.captf_tags to every cloud resource the module creates (for example tags = var.captf_tags)",
        ));
    }
}

fn required_outputs(module: &Module, role: Role, dir: &str, out: &mut Vec<Finding>) {
    for name in role.outputs() {
        if module.output(name).is_some() {
            continue;
        }
        if role == Role::Machinepool && *name == PROVIDER_ID_LIST_OUTPUT {
            out.push(Finding::error(
                checks::OUTPUT_PROVIDER_ID_LIST_SHAPE,
                dir,
                None,
                "output `provider_id_list` is missing: the machinepool role must list every member's provider ID; add output \"provider_id_list\" { value = sort(...) }",
            ));
        } else {
            out.push(Finding::error(
                checks::OUTPUT_MISSING,
                dir,
                None,
                format!(
                    "required output `{name}` of the {role} role is not declared (its value may be null until known); add output \"{name}\" {{ value = ... }}"
                ),
            ));
        }
    }
}

fn output_names(module: &Module, out: &mut Vec<Finding>) {
    for o in &module.outputs {
        if o.name.starts_with(RESERVED_PREFIX) {
            out.push(Finding::error(
                checks::NAMING_RESERVED_PREFIX,
                &o.file,
                Some(o.line),
                format!(
                    "output `{}` uses the reserved prefix captf_; rename it",
                    o.name
                ),
            ));
        }
    }
}

fn sensitive_references(module: &Module, role: Role, out: &mut Vec<Finding>) {
    let mut sensitive: BTreeSet<String> = module
        .variables
        .iter()
        .filter(|v| v.sensitive == Some(true) || role.input(&v.name).is_some_and(|d| d.sensitive))
        .map(|v| format!("var.{}", v.name))
        .collect();
    // Sensitivity flows from a reference to every local that reads it: a walk over the
    // "is read by" edges, linear in the references (a fixpoint over all locals would be
    // quadratic in a long chain of locals).
    let mut readers: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for local in &module.locals {
        for r in &local.sensitive_refs {
            readers
                .entry(r.as_str())
                .or_default()
                .push(format!("local.{}", local.name));
        }
    }
    let mut pending: Vec<String> = sensitive.iter().cloned().collect();
    while let Some(r) = pending.pop() {
        for reader in readers.get(r.as_str()).into_iter().flatten() {
            if sensitive.insert(reader.clone()) {
                pending.push(reader.clone());
            }
        }
    }
    for o in &module.outputs {
        if o.sensitive {
            continue;
        }
        if let Some(r) = o.sensitive_refs.iter().find(|r| sensitive.contains(*r)) {
            out.push(Finding::error(
                checks::OUTPUT_SENSITIVE_REFERENCE,
                &o.file,
                Some(o.line),
                format!(
                    "output `{}` reads the sensitive value {r}: plan fails with \"Output refers to sensitive values\"; add sensitive = true",
                    o.name
                ),
            ));
        }
    }
}

fn health_shape(o: &Output, out: &mut Vec<Finding>) {
    let Some(value) = &o.value else {
        return;
    };
    let states: Vec<&str> = health_states().collect();
    for result in value.results() {
        if !matches!(result.kind, Kind::Object(_)) {
            continue;
        }
        match result.field("state").map(|n| &n.kind) {
            None => out.push(Finding::error(
                checks::OUTPUT_HEALTH_SHAPE,
                &o.file,
                Some(result.line),
                format!("health has no `state`; set one of {}", states.join(", ")),
            )),
            Some(Kind::Str(s)) if !states.contains(&s.as_str()) => out.push(Finding::error(
                checks::OUTPUT_HEALTH_SHAPE,
                &o.file,
                result.field("state").map(|n| n.line),
                format!(
                    "health.state \"{s}\" is not in the closed enum ({}); the controller reports OutputsInvalid",
                    states.join(", ")
                ),
            )),
            Some(Kind::Null | Kind::Bool(_) | Kind::Number { .. } | Kind::Array(_) | Kind::Object(_)) => {
                out.push(Finding::error(
                    checks::OUTPUT_HEALTH_SHAPE,
                    &o.file,
                    result.field("state").map(|n| n.line),
                    format!("health.state must be a string, one of {}", states.join(", ")),
                ));
            }
            Some(_) => {}
        }
        match result.field("healthy").map(|n| &n.kind) {
            None => out.push(Finding::error(
                checks::OUTPUT_HEALTH_SHAPE,
                &o.file,
                Some(result.line),
                "health has no `healthy`; set healthy = true or false",
            )),
            Some(
                Kind::Null | Kind::Str(_) | Kind::Number { .. } | Kind::Array(_) | Kind::Object(_),
            ) => {
                out.push(Finding::error(
                    checks::OUTPUT_HEALTH_SHAPE,
                    &o.file,
                    result.field("healthy").map(|n| n.line),
                    "health.healthy must be a bool",
                ));
            }
            Some(_) => {}
        }
    }
}

fn endpoint(o: &Output, out: &mut Vec<Finding>) {
    let Some(value) = &o.value else {
        return;
    };
    let results = value.results();
    if results.iter().all(|r| r.kind == Kind::Null) {
        out.push(Finding::warning(
            checks::OUTPUT_ENDPOINT_NEVER_SET,
            &o.file,
            Some(value.line),
            "control_plane_endpoint is a literal null with no path to a value: with no user endpoint, KubeadmControlPlane waits for an endpoint forever; return the endpoint the module creates (var.control_plane_endpoint != null ? var.control_plane_endpoint : { host = ..., port = ... })",
        ));
        return;
    }
    for r in results {
        if !matches!(r.kind, Kind::Object(_)) {
            continue;
        }
        let host = r.field("host");
        let port = r.field("port");
        if host.is_none() || port.is_none() {
            let missing = if host.is_none() { "host" } else { "port" };
            out.push(Finding::error(
                checks::OUTPUT_ENDPOINT_SHAPE,
                &o.file,
                Some(r.line),
                format!(
                    "control_plane_endpoint has no `{missing}`: a half-set endpoint is OutputsInvalid; set both host and port"
                ),
            ));
            continue;
        }
        if let Some(Node {
            kind: Kind::Str(h),
            line,
        }) = host
            && h.is_empty()
        {
            out.push(Finding::error(
                checks::OUTPUT_ENDPOINT_SHAPE,
                &o.file,
                Some(*line),
                "control_plane_endpoint.host is empty; it must hold 1-512 characters",
            ));
        }
        if let Some(p) = port
            && !port_ok(p)
        {
            out.push(Finding::error(
                checks::OUTPUT_ENDPOINT_SHAPE,
                &o.file,
                Some(p.line),
                "control_plane_endpoint.port must be a whole number from 1 to 65535",
            ));
        }
    }
}

fn port_ok(node: &Node) -> bool {
    match &node.kind {
        Kind::Number { integer } => *integer,
        Kind::Str(s) => s.parse::<u32>().is_ok_and(|p| (1..=65_535).contains(&p)),
        Kind::Null | Kind::Bool(_) | Kind::Array(_) | Kind::Object(_) => false,
        _ => true,
    }
}

fn exports_numbers(o: &Output, out: &mut Vec<Finding>) {
    let Some(value) = &o.value else {
        return;
    };
    let mut nodes = Vec::new();
    value.walk(&mut nodes);
    for n in nodes {
        if n.kind == (Kind::Number { integer: false }) {
            out.push(Finding::error(
                checks::OUTPUT_EXPORTS_NUMBER,
                &o.file,
                Some(n.line),
                "exports holds a fractional or exponent number: exports becomes every machine's hashed captf_cluster_outputs, and the inputs hash accepts integers only; export it as an integer or a string",
            ));
        }
    }
}

fn addresses(o: &Output, out: &mut Vec<Finding>) {
    let Some(value) = &o.value else {
        return;
    };
    for r in value.results() {
        let Kind::Array(items) = &r.kind else {
            continue;
        };
        for item in items {
            if !matches!(item.kind, Kind::Object(_)) {
                continue;
            }
            match item.field("type") {
                None => out.push(Finding::error(
                    checks::OUTPUT_ADDRESSES_SHAPE,
                    &o.file,
                    Some(item.line),
                    format!("an address has no `type`; use one of {}", ADDRESS_TYPES.join(", ")),
                )),
                Some(Node {
                    kind: Kind::Str(t),
                    line,
                }) if !ADDRESS_TYPES.contains(&t.as_str()) => out.push(Finding::error(
                    checks::OUTPUT_ADDRESSES_SHAPE,
                    &o.file,
                    Some(*line),
                    format!(
                        "address type \"{t}\" is not a Cluster API MachineAddressType ({}); the controller reports OutputsInvalid",
                        ADDRESS_TYPES.join(", ")
                    ),
                )),
                Some(_) => {}
            }
            if item.field("address").is_none() {
                out.push(Finding::error(
                    checks::OUTPUT_ADDRESSES_SHAPE,
                    &o.file,
                    Some(item.line),
                    "an address has no `address`",
                ));
            }
        }
    }
}

/// Functions whose result is never a list or set.
const NON_LIST_FUNCTIONS: &[&str] = &[
    "join",
    "format",
    "tostring",
    "tonumber",
    "tobool",
    "tomap",
    "length",
    "jsonencode",
    "yamlencode",
    "lower",
    "upper",
    "trimspace",
    "replace",
    "substr",
    "merge",
    "lookup",
    "base64encode",
    "base64decode",
    "sha256",
    "md5",
    "min",
    "max",
    "sum",
    "zipmap",
];

fn definitely_not_list(node: &Node) -> Option<&'static str> {
    match &node.kind {
        Kind::Null => Some("null"),
        Kind::Bool(_) => Some("a bool"),
        Kind::Number { .. } => Some("a number"),
        Kind::Str(_) | Kind::Template(None) => Some("a string"),
        Kind::Object(_) | Kind::For { object: true } => Some("an object"),
        Kind::Call(name, _) if NON_LIST_FUNCTIONS.contains(&name.as_str()) => Some("not a list"),
        _ => None,
    }
}

fn constant_list(node: &Node) -> bool {
    match &node.kind {
        Kind::Array(items) => items.iter().all(|i| matches!(i.kind, Kind::Str(_))),
        _ => false,
    }
}

fn provider_id_list(o: &Output, out: &mut Vec<Finding>) {
    let Some(value) = &o.value else {
        out.push(Finding::error(
            checks::OUTPUT_PROVIDER_ID_LIST_SHAPE,
            &o.file,
            Some(o.line),
            "output `provider_id_list` has no value; it must be a list of provider IDs",
        ));
        return;
    };
    let results = value.results();
    let top_level = results.len() == 1;
    for r in &results {
        if !top_level && r.kind == Kind::Null {
            continue;
        }
        if let Some(what) = definitely_not_list(r) {
            out.push(Finding::error(
                checks::OUTPUT_PROVIDER_ID_LIST_SHAPE,
                &o.file,
                Some(r.line),
                format!(
                    "provider_id_list is {what}: it must be a list of every non-terminated member's provider ID"
                ),
            ));
            return;
        }
    }
    if o.json {
        return;
    }
    let own = match &value.kind {
        Kind::Template(Some(inner)) => inner,
        _ => value,
    };
    let sorted = matches!(&own.kind, Kind::Call(name, _) if name == "sort" || name == "distinct");
    if !sorted && !constant_list(own) {
        out.push(Finding::warning(
            checks::OUTPUT_PROVIDER_ID_LIST_SHAPE,
            &o.file,
            Some(value.line),
            "provider_id_list is not wrapped in sort() or distinct(): an unsorted list reorders between refreshes, a plan diff; write value = sort(...) on the output itself",
        ));
    }
}
