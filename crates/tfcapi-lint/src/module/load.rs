//! Reads a module's top-level configuration files into one [`Module`] (spec: tfcapi-lint "Lint a
//! module"): `.tf` and `.tofu` files through `hcl::edit` (spans give lines), `.tf.json` and
//! `.tofu.json` through the line-keeping JSON reader. Which files count depends on the runtime
//! ([`files_for_runtime`]): under OpenTofu a `.tofu` file replaces the `.tf` file of the same
//! name, Terraform ignores `.tofu` files; `override.tf` and `*_override.tf` files merge into the
//! declarations they name. Nothing is evaluated and no runtime is run.

use super::expr::{LineIndex, Lower, Node, Refs, lower_json};
use super::json::{self, JsonNode, JsonValue};
use super::split;
use super::types::{Ty, parse_type, parse_type_str};
use crate::checks;
use crate::report::Finding;
use hcl::edit::Span;
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::visit::Visit;
use std::collections::{BTreeMap, BTreeSet};

/// One configuration file handed to the loader.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The file name inside the module directory (`main.tf`).
    pub name: String,
    /// How findings name it (`./machine/main.tf`, `/captf/module/main.tf`).
    pub display: String,
    /// Its contents.
    pub text: String,
}

/// A declared type constraint.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeDecl {
    /// The parsed type, or why it is not one.
    pub ty: Result<Ty, String>,
    /// Line of the `type` argument.
    pub line: u32,
}

/// A `variable` block.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// Its name.
    pub name: String,
    /// File (display form).
    pub file: String,
    /// Line of the block.
    pub line: u32,
    /// The `type` argument.
    pub ty: Option<TypeDecl>,
    /// The `default` argument.
    pub default: Option<Node>,
    /// The `nullable` argument, when a bool literal.
    pub nullable: Option<bool>,
    /// The `sensitive` argument, when a bool literal.
    pub sensitive: Option<bool>,
    /// The `condition` of each `validation` block: the expression as written (in JSON syntax,
    /// the inner expression of a condition that is one interpolation).
    pub validations: Vec<String>,
}

impl Variable {
    /// Whether the default is a literal `null`.
    pub fn defaults_to_null(&self) -> bool {
        self.default
            .as_ref()
            .is_some_and(|d| d.kind == super::expr::Kind::Null)
    }

    /// The condition of the first `validation` block that surely rejects null under `runtime`:
    /// evaluated with the variable `null`, it is false or fails ([`super::null_check`]). A condition this check
    /// cannot evaluate is not reported.
    pub fn validation_rejecting_null(&self, runtime: Runtime) -> Option<&str> {
        self.validations
            .iter()
            .find(|c| {
                super::null_check::condition_with_null(c, &self.name, runtime)
                    == super::null_check::NullVerdict::Rejects
            })
            .map(String::as_str)
    }
}

/// An `output` block.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Its name.
    pub name: String,
    /// File (display form).
    pub file: String,
    /// Line of the block.
    pub line: u32,
    /// The `value` argument.
    pub value: Option<Node>,
    /// References in `value`, outside `nonsensitive(...)`.
    pub sensitive_refs: BTreeSet<String>,
    /// `sensitive = true`.
    pub sensitive: bool,
    /// Declared in JSON syntax.
    pub json: bool,
}

/// A local value.
#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    /// Its name.
    pub name: String,
    /// References in its expression, outside `nonsensitive(...)`.
    pub sensitive_refs: BTreeSet<String>,
}

/// A `required_providers` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequirement {
    /// The local name (`aws`).
    pub local_name: String,
    /// The `source` address, when given.
    pub source: Option<String>,
}

/// Where something was declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File (display form).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// What it is (`backend "s3"`).
    pub what: String,
}

/// Everything the checks need from a module's files.
#[derive(Debug, Clone, Default)]
pub struct Module {
    /// Variables, by declaration order.
    pub variables: Vec<Variable>,
    /// Outputs, by declaration order.
    pub outputs: Vec<Output>,
    /// Locals.
    pub locals: Vec<Local>,
    /// `backend` and `cloud` blocks.
    pub backends: Vec<Location>,
    /// `required_providers` entries.
    pub required_providers: Vec<ProviderRequirement>,
    /// `source` of every `module` call.
    pub module_sources: Vec<String>,
    /// Every `var.X`/`local.X` referenced outside variable blocks.
    pub refs: BTreeSet<String>,
    /// How many configuration files were read.
    pub files: usize,
}

impl Module {
    /// The variable named `name`.
    pub fn variable(&self, name: &str) -> Option<&Variable> {
        self.variables.iter().find(|v| v.name == name)
    }

    /// The output named `name`.
    pub fn output(&self, name: &str) -> Option<&Output> {
        self.outputs.iter().find(|o| o.name == name)
    }
}

/// Whether a file name is a configuration file tfcapi-lint reads.
pub fn is_config_file(name: &str) -> bool {
    [".tf", ".tf.json", ".tofu", ".tofu.json"]
        .iter()
        .any(|ext| name.ends_with(ext) && name.len() > ext.len())
        && !name.starts_with('.')
}

/// The runtime a module is linted for: which of its files it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// OpenTofu: reads `.tf`, `.tf.json`, `.tofu` and `.tofu.json`; `x.tofu` replaces `x.tf`.
    #[default]
    Tofu,
    /// Terraform: reads `.tf` and `.tf.json` only; `.tofu` files are ignored.
    Terraform,
}

impl Runtime {
    /// `tofu` or `terraform`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tofu => "tofu",
            Self::Terraform => "terraform",
        }
    }
}

/// The `.tf` file a `.tofu` file shadows (`x.tofu` → `x.tf`, `x.tofu.json` → `x.tf.json`).
fn shadowed_name(name: &str) -> Option<String> {
    if let Some(stem) = name.strip_suffix(".tofu.json") {
        Some(format!("{stem}.tf.json"))
    } else {
        name.strip_suffix(".tofu").map(|stem| format!("{stem}.tf"))
    }
}

/// The files `runtime` reads, and a `module/tofu-shadow` warning for each `.tf`/`.tofu` pair:
/// OpenTofu reads `x.tofu` instead of `x.tf`, Terraform ignores every `.tofu` file, so the pair
/// means the two runtimes run different code. The side the runtime never reads is not linted.
pub fn files_for_runtime(
    files: Vec<SourceFile>,
    runtime: Runtime,
) -> (Vec<SourceFile>, Vec<Finding>) {
    let names: BTreeSet<String> = files.iter().map(|f| f.name.clone()).collect();
    let mut findings = Vec::new();
    for f in &files {
        let Some(tf) = shadowed_name(&f.name).filter(|tf| names.contains(tf)) else {
            continue;
        };
        let tf_display = files
            .iter()
            .find(|o| o.name == tf)
            .map_or(tf.clone(), |o| o.display.clone());
        let (file, message) = match runtime {
            Runtime::Tofu => (
                tf_display,
                format!(
                    "{tf} is shadowed by {}: OpenTofu reads {} instead, while Terraform would read {tf} and ignore {}; linted for tofu, so {tf} is not checked (merge the two, or lint with --runtime terraform too)",
                    f.name, f.name, f.name
                ),
            ),
            Runtime::Terraform => (
                f.display.clone(),
                format!(
                    "{} would shadow {tf} under OpenTofu, but Terraform ignores .tofu files and reads {tf}; linted for terraform, so {} is not checked (merge the two, or lint with --runtime tofu too)",
                    f.name, f.name
                ),
            ),
        };
        findings.push(Finding::warning(
            checks::MODULE_TOFU_SHADOW,
            &file,
            Some(1),
            message,
        ));
    }
    let kept = match runtime {
        Runtime::Tofu => apply_tofu_precedence(files),
        Runtime::Terraform => files
            .into_iter()
            .filter(|f| shadowed_name(&f.name).is_none())
            .collect(),
    };
    (kept, findings)
}

/// Drops `x.tf` when `x.tofu` exists (and `x.tf.json` when `x.tofu.json` exists).
pub fn apply_tofu_precedence(files: Vec<SourceFile>) -> Vec<SourceFile> {
    let names: BTreeSet<String> = files.iter().map(|f| f.name.clone()).collect();
    files
        .into_iter()
        .filter(|f| {
            let shadow = if let Some(stem) = f.name.strip_suffix(".tf.json") {
                format!("{stem}.tofu.json")
            } else if let Some(stem) = f.name.strip_suffix(".tf") {
                format!("{stem}.tofu")
            } else {
                return true;
            };
            !names.contains(&shadow)
        })
        .collect()
}

fn is_override(name: &str) -> bool {
    let stem = [".tofu.json", ".tf.json", ".tofu", ".tf"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(name);
    stem == "override" || stem.ends_with("_override")
}

/// The loader's state while reading files.
struct Loader {
    module: Module,
    findings: Vec<Finding>,
    declared: BTreeMap<(&'static str, String), (String, u32)>,
}

/// Reads the files into a module; parse problems come back as findings.
pub fn load(files: Vec<SourceFile>) -> (Module, Vec<Finding>) {
    let files = apply_tofu_precedence(files);
    let (overrides, primary): (Vec<_>, Vec<_>) =
        files.into_iter().partition(|f| is_override(&f.name));
    let mut loader = Loader {
        module: Module::default(),
        findings: Vec::new(),
        declared: BTreeMap::new(),
    };
    for (file, is_override) in primary
        .iter()
        .map(|f| (f, false))
        .chain(overrides.iter().map(|f| (f, true)))
    {
        loader.module.files += 1;
        if std::path::Path::new(&file.name)
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            loader.json_file(file, is_override);
        } else {
            loader.hcl_file(file, is_override);
        }
    }
    (loader.module, loader.findings)
}

/// The `condition` strings of a JSON variable's `validation` (one object or a list of them).
fn json_validations(body: &JsonNode) -> Vec<String> {
    let Some(v) = body.get("validation") else {
        return Vec::new();
    };
    let blocks: Vec<&JsonNode> = match &v.value {
        JsonValue::Array(items) => items.iter().collect(),
        _ => vec![v],
    };
    blocks
        .into_iter()
        .filter_map(|b| b.get("condition")?.as_str())
        .map(super::null_check::json_condition)
        .collect()
}

fn parse_error(file: &SourceFile, line: u32, message: String) -> Finding {
    Finding::error(checks::MODULE_PARSE, &file.display, Some(line), message)
}

/// Whether the line a parse error points at opens a block and writes more after the brace on
/// the same line: the one-line block rule (`Invalid single-argument block definition`).
fn one_line_block(line_text: &str) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line_text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '#' | '=' => return false,
            '/' if line_text[i..].starts_with("//") => return false,
            '{' => {
                let rest = line_text[i + 1..].trim();
                return !rest.is_empty()
                    && !rest.starts_with('}')
                    && !rest.starts_with('#')
                    && !rest.starts_with("//");
            }
            _ => {}
        }
    }
    false
}

fn bool_literal(expr: &Expression) -> Option<bool> {
    match expr {
        Expression::Bool(b) => Some(*b.value()),
        Expression::Parenthesis(p) => bool_literal(p.inner()),
        _ => None,
    }
}

fn string_literal(expr: &Expression) -> Option<String> {
    match expr {
        Expression::String(s) => Some(s.value().clone()),
        Expression::StringTemplate(t) => {
            let mut out = String::new();
            for e in &**t {
                out.push_str(e.as_literal()?.value());
            }
            Some(out)
        }
        _ => None,
    }
}

impl Loader {
    fn declare(
        &mut self,
        kind: &'static str,
        name: &str,
        file: &str,
        line: u32,
        is_override: bool,
    ) -> bool {
        let key = (kind, name.to_owned());
        if let Some((first_file, first_line)) = self.declared.get(&key) {
            if !is_override {
                self.findings.push(Finding::error(
                    checks::MODULE_DUPLICATE,
                    file,
                    Some(line),
                    format!(
                        "{kind} `{name}` is declared again (first at {first_file}:{first_line}); delete one declaration"
                    ),
                ));
            }
            return false;
        }
        self.declared.insert(key, (file.to_owned(), line));
        true
    }

    // ---- HCL ----

    fn hcl_file(&mut self, file: &SourceFile, is_override: bool) {
        // A large file is parsed a run of whole blocks at a time: the syntax tree of one run is
        // dropped before the next is built (see `split`).
        let runs = if file.text.len() >= split::SPLIT_MIN_BYTES {
            split::runs(&file.text)
        } else {
            None
        };
        match runs {
            Some(runs) => {
                for run in runs {
                    if !self.hcl_text(
                        file,
                        &file.text[run.start..run.end],
                        run.first_line,
                        is_override,
                    ) {
                        return;
                    }
                }
            }
            None => {
                self.hcl_text(file, &file.text, 1, is_override);
            }
        }
    }

    /// Parses and loads `text`, a part of `file` starting on line `first_line`; returns whether
    /// it parsed.
    fn hcl_text(
        &mut self,
        file: &SourceFile,
        text: &str,
        first_line: u32,
        is_override: bool,
    ) -> bool {
        let shift = |line: usize| {
            u32::try_from(line)
                .unwrap_or(u32::MAX)
                .saturating_add(first_line - 1)
        };
        let body = match std::panic::catch_unwind(|| hcl::edit::parser::parse_body(text)) {
            Ok(Ok(body)) => body,
            Ok(Err(err)) => {
                let line = shift(err.location().line());
                if one_line_block(err.line()) {
                    self.findings.push(Finding::error(
                        checks::MODULE_ONE_LINE_BLOCK,
                        &file.display,
                        Some(line),
                        "Invalid single-argument block definition: a block written on one line may hold one argument and no nested block; write it over several lines",
                    ));
                } else {
                    self.findings.push(parse_error(
                        file,
                        line,
                        format!("cannot parse: {}", err.message()),
                    ));
                }
                return false;
            }
            Err(_) => {
                self.findings.push(parse_error(
                    file,
                    first_line,
                    "cannot parse: the parser failed".to_owned(),
                ));
                return false;
            }
        };
        let lines = LineIndex::starting_at(text, first_line);
        self.hcl_body(file, &body, &lines, is_override);
        true
    }

    fn hcl_body(&mut self, file: &SourceFile, body: &Body, lines: &LineIndex, is_override: bool) {
        for structure in body {
            let line = structure.span().map_or(1, |s| lines.line(s.start));
            let block = match structure {
                Structure::Attribute(attr) => {
                    self.findings.push(parse_error(
                        file,
                        line,
                        format!(
                            "an argument named `{}` is not expected at the top level of a module",
                            attr.key.as_str()
                        ),
                    ));
                    continue;
                }
                Structure::Block(block) => block,
            };
            let labels: Vec<&str> = block
                .labels
                .iter()
                .map(hcl::edit::structure::BlockLabel::as_str)
                .collect();
            match block.ident.as_str() {
                "variable" | "output" => {
                    let [name] = labels.as_slice() else {
                        self.findings.push(parse_error(
                            file,
                            line,
                            format!(
                                "a {} block takes exactly one label, its name",
                                block.ident.as_str()
                            ),
                        ));
                        continue;
                    };
                    if block.ident.as_str() == "variable" {
                        self.hcl_variable(file, block, name, line, lines, is_override);
                    } else {
                        self.hcl_output(file, block, name, line, lines, is_override);
                        self.collect_refs_block(block);
                    }
                }
                "locals" => {
                    for attr in block.body.attributes() {
                        let attr_line = attr.span().map_or(line, |s| lines.line(s.start));
                        let name = attr.key.as_str().to_owned();
                        if !self.declare("local", &name, &file.display, attr_line, is_override)
                            && is_override
                        {
                            self.module.locals.retain(|l| l.name != name);
                        }
                        let mut refs = Refs::sensitive();
                        refs.visit_expr(&attr.value);
                        self.module.locals.push(Local {
                            name,
                            sensitive_refs: refs.found,
                        });
                    }
                    self.collect_refs_block(block);
                }
                "terraform" => {
                    self.hcl_terraform(file, block, lines);
                }
                "module" => {
                    if let Some(source) = block
                        .body
                        .get_attribute("source")
                        .and_then(|a| string_literal(&a.value))
                    {
                        self.module.module_sources.push(source);
                    }
                    self.collect_refs_block(block);
                }
                _ => self.collect_refs_block(block),
            }
        }
    }

    fn collect_refs_block(&mut self, block: &Block) {
        let mut refs = Refs::all();
        refs.visit_block(block);
        self.module.refs.extend(refs.found);
    }

    fn hcl_variable(
        &mut self,
        file: &SourceFile,
        block: &Block,
        name: &str,
        line: u32,
        lines: &LineIndex,
        is_override: bool,
    ) {
        let lower = Lower::new(lines);
        let attr_line = |key: &str| {
            block
                .body
                .get_attribute(key)
                .and_then(Span::span)
                .map_or(line, |s| lines.line(s.start))
        };
        let ty = block.body.get_attribute("type").map(|a| TypeDecl {
            ty: parse_type(&a.value),
            line: attr_line("type"),
        });
        let default = block
            .body
            .get_attribute("default")
            .map(|a| lower.expr(&a.value, attr_line("default")));
        let nullable = block
            .body
            .get_attribute("nullable")
            .and_then(|a| bool_literal(&a.value));
        let sensitive = block
            .body
            .get_attribute("sensitive")
            .and_then(|a| bool_literal(&a.value));
        let validations = block
            .body
            .get_blocks("validation")
            .filter_map(|v| v.body.get_attribute("condition"))
            .map(|a| a.value.to_string().trim().to_owned())
            .collect();
        let variable = Variable {
            name: name.to_owned(),
            file: file.display.clone(),
            line,
            ty,
            default,
            nullable,
            sensitive,
            validations,
        };
        self.add_variable(variable, is_override);
    }

    fn add_variable(&mut self, variable: Variable, is_override: bool) {
        if self.declare(
            "variable",
            &variable.name,
            &variable.file,
            variable.line,
            is_override,
        ) {
            self.module.variables.push(variable);
        } else if is_override
            && let Some(existing) = self
                .module
                .variables
                .iter_mut()
                .find(|v| v.name == variable.name)
        {
            if variable.ty.is_some() {
                existing.ty = variable.ty;
            }
            if variable.default.is_some() {
                existing.default = variable.default;
            }
            if variable.nullable.is_some() {
                existing.nullable = variable.nullable;
            }
            if variable.sensitive.is_some() {
                existing.sensitive = variable.sensitive;
            }
            if !variable.validations.is_empty() {
                existing.validations = variable.validations;
            }
        }
    }

    fn hcl_output(
        &mut self,
        file: &SourceFile,
        block: &Block,
        name: &str,
        line: u32,
        lines: &LineIndex,
        is_override: bool,
    ) {
        let lower = Lower::new(lines);
        let value_attr = block.body.get_attribute("value");
        let value = value_attr.map(|a| {
            let l = a.span().map_or(line, |s| lines.line(s.start));
            lower.expr(&a.value, l)
        });
        let mut refs = Refs::sensitive();
        if let Some(a) = value_attr {
            refs.visit_expr(&a.value);
        }
        let sensitive = block
            .body
            .get_attribute("sensitive")
            .and_then(|a| bool_literal(&a.value));
        let output = Output {
            name: name.to_owned(),
            file: file.display.clone(),
            line,
            value,
            sensitive_refs: refs.found,
            sensitive: sensitive.unwrap_or(false),
            json: false,
        };
        self.add_output(
            output,
            value_attr.is_some(),
            sensitive.is_some(),
            is_override,
        );
    }

    fn add_output(
        &mut self,
        output: Output,
        has_value: bool,
        has_sensitive: bool,
        is_override: bool,
    ) {
        if self.declare(
            "output",
            &output.name,
            &output.file,
            output.line,
            is_override,
        ) {
            self.module.outputs.push(output);
        } else if is_override
            && let Some(existing) = self
                .module
                .outputs
                .iter_mut()
                .find(|o| o.name == output.name)
        {
            if has_value {
                existing.value = output.value;
                existing.sensitive_refs = output.sensitive_refs;
                existing.json = output.json;
            }
            if has_sensitive {
                existing.sensitive = output.sensitive;
            }
        }
    }

    fn hcl_terraform(&mut self, file: &SourceFile, block: &Block, lines: &LineIndex) {
        for inner in block.body.blocks() {
            let line = inner.span().map_or(1, |s| lines.line(s.start));
            match inner.ident.as_str() {
                "backend" => {
                    let kind = inner.labels.first().map_or("", |l| l.as_str());
                    self.module.backends.push(Location {
                        file: file.display.clone(),
                        line,
                        what: format!("backend \"{kind}\""),
                    });
                }
                "cloud" => self.module.backends.push(Location {
                    file: file.display.clone(),
                    line,
                    what: "cloud".to_owned(),
                }),
                "required_providers" => {
                    for attr in inner.body.attributes() {
                        let source = match &attr.value {
                            Expression::Object(obj) => obj.iter().find_map(|(k, v)| {
                                let key = match k {
                                    hcl::edit::expr::ObjectKey::Ident(id) => id.as_str().to_owned(),
                                    hcl::edit::expr::ObjectKey::Expression(e) => string_literal(e)?,
                                };
                                if key == "source" {
                                    string_literal(v.expr())
                                } else {
                                    None
                                }
                            }),
                            _ => None,
                        };
                        self.module.required_providers.push(ProviderRequirement {
                            local_name: attr.key.as_str().to_owned(),
                            source,
                        });
                    }
                }
                _ => {}
            }
        }
    }

    // ---- JSON ----

    fn json_file(&mut self, file: &SourceFile, is_override: bool) {
        let doc = match json::parse(&file.text) {
            Ok(doc) => doc,
            Err(err) => {
                self.findings.push(parse_error(
                    file,
                    err.line,
                    format!("cannot parse JSON: {}", err.message),
                ));
                return;
            }
        };
        let JsonValue::Object(members) = &doc.value else {
            self.findings.push(parse_error(
                file,
                doc.line,
                "a JSON configuration file must hold an object".to_owned(),
            ));
            return;
        };
        for (key, value) in members {
            match key.as_str() {
                "//" => {}
                "variable" => {
                    for (name, body) in labeled(value) {
                        self.json_variable(file, name, body, is_override);
                    }
                }
                "output" => {
                    for (name, body) in labeled(value) {
                        self.json_output(file, name, body, is_override);
                    }
                }
                "locals" => {
                    for body in bodies(value) {
                        for (name, expr) in body.members() {
                            if name == "//" {
                                continue;
                            }
                            if !self.declare("local", name, &file.display, expr.line, is_override)
                                && is_override
                            {
                                self.module.locals.retain(|l| &l.name != name);
                            }
                            let mut refs = Refs::sensitive();
                            refs.json(expr);
                            self.module.locals.push(Local {
                                name: name.clone(),
                                sensitive_refs: refs.found,
                            });
                        }
                    }
                    self.collect_refs_json(value);
                }
                "terraform" => {
                    for body in bodies(value) {
                        self.json_terraform(file, body);
                    }
                }
                "module" => {
                    for (_, body) in labeled(value) {
                        if let Some(source) = body.get("source").and_then(JsonNode::as_str) {
                            self.module.module_sources.push(source.to_owned());
                        }
                    }
                    self.collect_refs_json(value);
                }
                _ => self.collect_refs_json(value),
            }
        }
    }

    fn collect_refs_json(&mut self, node: &JsonNode) {
        let mut refs = Refs::all();
        refs.json(node);
        self.module.refs.extend(refs.found);
    }

    fn json_variable(&mut self, file: &SourceFile, name: &str, body: &JsonNode, is_override: bool) {
        let ty = body.get("type").map(|t| TypeDecl {
            ty: t.as_str().map_or_else(
                || Err("a JSON type must be a string".to_owned()),
                parse_type_str,
            ),
            line: t.line,
        });
        let variable = Variable {
            name: name.to_owned(),
            file: file.display.clone(),
            line: body.line,
            ty,
            default: body.get("default").map(|d| lower_json(d, false)),
            nullable: body.get("nullable").and_then(JsonNode::as_bool),
            sensitive: body.get("sensitive").and_then(JsonNode::as_bool),
            validations: json_validations(body),
        };
        self.add_variable(variable, is_override);
    }

    fn json_output(&mut self, file: &SourceFile, name: &str, body: &JsonNode, is_override: bool) {
        let value = body.get("value");
        let mut refs = Refs::sensitive();
        if let Some(v) = value {
            refs.json(v);
        }
        self.collect_refs_json(body);
        let sensitive = body.get("sensitive").and_then(JsonNode::as_bool);
        let output = Output {
            name: name.to_owned(),
            file: file.display.clone(),
            line: body.line,
            value: value.map(|v| lower_json(v, true)),
            sensitive_refs: refs.found,
            sensitive: sensitive.unwrap_or(false),
            json: true,
        };
        self.add_output(output, value.is_some(), sensitive.is_some(), is_override);
    }

    fn json_terraform(&mut self, file: &SourceFile, body: &JsonNode) {
        for (key, value) in body.members() {
            match key.as_str() {
                "backend" => {
                    for (kind, inner) in labeled(value) {
                        self.module.backends.push(Location {
                            file: file.display.clone(),
                            line: inner.line,
                            what: format!("backend \"{kind}\""),
                        });
                    }
                }
                "cloud" => self.module.backends.push(Location {
                    file: file.display.clone(),
                    line: value.line,
                    what: "cloud".to_owned(),
                }),
                "required_providers" => {
                    for providers in bodies(value) {
                        for (local_name, req) in providers.members() {
                            self.module.required_providers.push(ProviderRequirement {
                                local_name: local_name.clone(),
                                source: req
                                    .get("source")
                                    .and_then(JsonNode::as_str)
                                    .map(str::to_owned),
                            });
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// The bodies of a JSON block value: an object, or an array of objects.
fn bodies(node: &JsonNode) -> Vec<&JsonNode> {
    match &node.value {
        JsonValue::Object(_) => vec![node],
        JsonValue::Array(items) => items
            .iter()
            .filter(|n| matches!(n.value, JsonValue::Object(_)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The `(label, body)` pairs of a labeled JSON block (`{"name": {...}}`, or arrays of those).
fn labeled(node: &JsonNode) -> Vec<(&str, &JsonNode)> {
    let mut out = Vec::new();
    for body in bodies(node) {
        for (name, inner) in body.members() {
            if name == "//" {
                continue;
            }
            for b in bodies(inner) {
                out.push((name.as_str(), b));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_one_line_blocks() {
        assert!(one_line_block(
            "variable \"x\" { type = any default = null }"
        ));
        assert!(one_line_block(
            "variable \"x\" { type = any, default = null }"
        ));
        assert!(!one_line_block("variable \"x\" {"));
        assert!(!one_line_block("  type = { a = 1 b = 2 }"));
        assert!(!one_line_block("variable \"x\" { # comment"));
        assert!(!one_line_block("resource \"a\" \"b\" {}"));
    }

    #[test]
    fn tofu_shadowing_follows_the_runtime_and_warns_either_way() {
        let f = |n: &str| SourceFile {
            name: n.into(),
            display: format!("m/{n}"),
            text: String::new(),
        };
        let all = || {
            vec![
                f("main.tf"),
                f("main.tofu"),
                f("only.tofu"),
                f("x.tf.json"),
                f("x.tofu.json"),
                f("y.tf"),
            ]
        };
        let names = |files: &[SourceFile]| files.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let (tofu, warnings) = files_for_runtime(all(), Runtime::Tofu);
        assert_eq!(
            names(&tofu),
            ["main.tofu", "only.tofu", "x.tofu.json", "y.tf"]
        );
        assert_eq!(warnings.len(), 2);
        assert!(warnings.iter().all(|w| w.id == checks::MODULE_TOFU_SHADOW));
        assert_eq!(warnings[0].file, "m/main.tf");
        assert!(
            warnings[0]
                .message
                .starts_with("main.tf is shadowed by main.tofu")
        );
        let (terraform, warnings) = files_for_runtime(all(), Runtime::Terraform);
        assert_eq!(names(&terraform), ["main.tf", "x.tf.json", "y.tf"]);
        assert_eq!(warnings.len(), 2);
        assert_eq!(warnings[0].file, "m/main.tofu");
    }

    #[test]
    fn tofu_files_shadow_tf_files() {
        let f = |n: &str| SourceFile {
            name: n.into(),
            display: n.into(),
            text: String::new(),
        };
        let kept = apply_tofu_precedence(vec![
            f("main.tf"),
            f("main.tofu"),
            f("x.tf.json"),
            f("y.tf"),
        ]);
        let names: Vec<_> = kept.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main.tofu", "x.tf.json", "y.tf"]);
        assert!(is_override("override.tf") && is_override("a_override.tofu.json"));
        assert!(!is_override("overrides.tf"));
        assert!(
            is_config_file("a.tofu.json") && !is_config_file(".tf") && !is_config_file("a.tfvars")
        );
    }
}
