//! The generated root module and its values: `main.tf.json` and `terraform.tfvars.json` (spec:
//! Module Contract "Injection mechanics", Job Inputs §2–§4 and §9).
//!
//! `main.tf.json` holds a partial `kubernetes` backend (the runner completes it with
//! `-backend-config` flags), one variable per contract input of the role and per user variable,
//! a `module "role"` call on `../../module` forwarding every variable by name, and a
//! `sensitive = true` re-export of every contract output of the role. `terraform.tfvars.json`
//! holds the values. Together they may not exceed [`MAX_RENDERED_BYTES`].

use crate::hash::{HashError, inputs_hash};
use crate::inputs::{
    ClusterInputsSource, InputsError, MachineInputsSource, MachinePoolInputsSource, RoleInputs,
    cluster_inputs, contract_inputs, machine_inputs, machinepool_inputs,
};
use crate::names::ObjectKind;
use crate::outputs::{CLUSTER_OUTPUTS, MACHINE_OUTPUTS, MACHINEPOOL_OUTPUTS};
use crate::variables::{NameError, UserVariables, check_variable_name};
use serde_json::{Map, Value, json};
use std::fmt;

/// The most bytes `main.tf.json` and `terraform.tfvars.json` may hold together.
pub const MAX_RENDERED_BYTES: usize = 1_000_000;
/// The generated root's file of declarations.
pub const MAIN_TF_JSON: &str = "main.tf.json";
/// The generated root's file of values (auto-loaded by Terraform/OpenTofu).
pub const TFVARS_JSON: &str = "terraform.tfvars.json";
/// The name of the module call in the generated root.
pub const MODULE_NAME: &str = "role";
/// Where the root (at `/captf/work/root`) finds the module (`/captf/module`).
pub const MODULE_SOURCE: &str = "../../module";
/// The state backend the root declares.
pub const BACKEND: &str = "kubernetes";

/// Why a role's root could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The inputs could not be built (see [`InputsError`]).
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// A user variable's name is not valid for the role (variables merged for another role).
    #[error("user variable {name:?} {reason}")]
    InvalidVariable {
        /// The variable name.
        name: String,
        /// What is wrong with it.
        reason: NameError,
    },
    /// The inputs cannot be hashed.
    #[error(transparent)]
    Hash(#[from] HashError),
    /// `main.tf.json` and `terraform.tfvars.json` together exceed [`MAX_RENDERED_BYTES`]:
    /// `ApplyJobSucceeded=False/InputsTooLarge`, and no Job starts.
    #[error("the rendered inputs are {size} bytes; at most {MAX_RENDERED_BYTES} are allowed")]
    InputsTooLarge {
        /// The combined size, for the `captf_inputs_bytes` gauge.
        size: usize,
    },
}

/// A rendered root, ready for the durable and per-run inputs Secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderedInputs {
    /// The kind the root was rendered for.
    pub kind: ObjectKind,
    /// The `main.tf.json` file.
    pub main_tf_json: String,
    /// The `terraform.tfvars.json` file (holds `bootstrap_data` and sensitive variables).
    pub tfvars_json: String,
    /// The `captf.io/inputs-hash` of these inputs.
    pub inputs_hash: String,
}

impl RenderedInputs {
    /// The combined size of both files, as capped and as reported on `captf_inputs_bytes`.
    pub fn total_bytes(&self) -> usize {
        self.main_tf_json.len() + self.tfvars_json.len()
    }
}

impl fmt::Debug for RenderedInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderedInputs")
            .field("kind", &self.kind)
            .field("main_tf_json", &self.main_tf_json)
            .field(
                "tfvars_json",
                &format_args!("<{} bytes redacted>", self.tfvars_json.len()),
            )
            .field("inputs_hash", &self.inputs_hash)
            .finish()
    }
}

/// The contract outputs a role's root re-exports.
pub fn contract_outputs(kind: ObjectKind) -> &'static [&'static str] {
    match kind {
        ObjectKind::Cluster => CLUSTER_OUTPUTS,
        ObjectKind::Machine => MACHINE_OUTPUTS,
        ObjectKind::MachinePool => MACHINEPOOL_OUTPUTS,
    }
}

/// Builds and renders a TerraformCluster's root.
pub fn render_cluster(
    source: &ClusterInputsSource,
    variables: &UserVariables,
    image: &str,
) -> Result<RenderedInputs, RenderError> {
    render(&cluster_inputs(source).into(), variables, image)
}

/// Builds and renders a TerraformMachine's root.
pub fn render_machine(
    source: &MachineInputsSource,
    variables: &UserVariables,
    image: &str,
) -> Result<RenderedInputs, RenderError> {
    render(&machine_inputs(source)?.into(), variables, image)
}

/// Builds and renders a TerraformMachinePool's root.
pub fn render_machinepool(
    source: &MachinePoolInputsSource,
    variables: &UserVariables,
    image: &str,
) -> Result<RenderedInputs, RenderError> {
    render(&machinepool_inputs(source)?.into(), variables, image)
}

/// Renders a role's root from its inputs and user variables, and hashes them for `image`
/// (`spec.source.image` as written).
pub fn render(
    inputs: &RoleInputs,
    variables: &UserVariables,
    image: &str,
) -> Result<RenderedInputs, RenderError> {
    let kind = inputs.kind();
    for (name, _) in variables.iter() {
        check_variable_name(kind, name).map_err(|reason| RenderError::InvalidVariable {
            name: name.to_owned(),
            reason,
        })?;
    }
    let main_tf_json = main_tf_json(kind, variables);
    let tfvars_json = tfvars_json(inputs, variables);
    let size = main_tf_json.len() + tfvars_json.len();
    if size > MAX_RENDERED_BYTES {
        return Err(RenderError::InputsTooLarge { size });
    }
    Ok(RenderedInputs {
        kind,
        inputs_hash: inputs_hash(inputs, image, variables)?,
        main_tf_json,
        tfvars_json,
    })
}

/// The root's `main.tf.json` for a role and its user variables.
pub fn main_tf_json(kind: ObjectKind, variables: &UserVariables) -> String {
    let mut declared = Map::new();
    let mut module = Map::new();
    module.insert("source".into(), MODULE_SOURCE.into());
    for input in contract_inputs(kind) {
        let mut decl = Map::new();
        decl.insert("type".into(), input.type_expr.into());
        if input.nullable {
            decl.insert("default".into(), Value::Null);
        }
        if input.sensitive {
            decl.insert("sensitive".into(), true.into());
        }
        declared.insert(input.name.into(), Value::Object(decl));
        module.insert(input.name.into(), forward(input.name));
    }
    for (name, variable) in variables.iter() {
        // No type: the module's own declaration converts the value.
        let decl = if variable.sensitive {
            json!({ "sensitive": true })
        } else {
            json!({})
        };
        declared.insert(name.into(), decl);
        module.insert(name.into(), forward(name));
    }
    let outputs: Map<String, Value> = contract_outputs(kind)
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                json!({ "value": format!("${{module.{MODULE_NAME}.{name}}}"), "sensitive": true }),
            )
        })
        .collect();
    let mut root = backend_only();
    root.insert("variable".into(), Value::Object(declared));
    root.insert(
        "module".into(),
        json!({ MODULE_NAME: Value::Object(module) }),
    );
    root.insert("output".into(), Value::Object(outputs));
    pretty(&Value::Object(root))
}

/// The restore root's `main.tf.json`: the backend block alone.
pub fn restore_main_tf_json() -> String {
    pretty(&Value::Object(backend_only()))
}

/// The root's `terraform.tfvars.json`: the contract inputs in declaration order, then the user
/// variables sorted by name. The machinepool role writes `<`, `>` and `&` inside strings as
/// `\u003c`, `\u003e` and `\u0026` (Job Inputs §4); the other roles write them as themselves.
pub fn tfvars_json(inputs: &RoleInputs, variables: &UserVariables) -> String {
    let mut values = inputs.to_map();
    for (name, variable) in variables.iter() {
        values.insert(name.to_owned(), variable.value.clone());
    }
    let text = pretty(&Value::Object(values));
    match inputs.kind() {
        ObjectKind::MachinePool => escape_html(&text),
        ObjectKind::Cluster | ObjectKind::Machine => text,
    }
}

/// Replaces `<`, `>` and `&` with their `\u00XX` escapes. Applied to serialised JSON, where those
/// three characters can only occur inside strings, it escapes them in every string (keys
/// included) and changes no decoded value.
pub fn escape_html(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

fn forward(name: &str) -> Value {
    Value::String(format!("${{var.{name}}}"))
}

fn backend_only() -> Map<String, Value> {
    let mut root = Map::new();
    root.insert("terraform".into(), json!({ "backend": { BACKEND: {} } }));
    root
}

fn pretty(value: &Value) -> String {
    // A `Value` always serialises (its map keys are strings).
    serde_json::to_string_pretty(value).unwrap_or_default()
}
