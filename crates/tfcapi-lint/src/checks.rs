//! Every check tfcapi-lint runs, with its stable ID, severity, roles, an example that triggers it
//! and the fix (spec: tfcapi-lint, Image Contract "Checklist for tfcapi-lint image", and the rules
//! of Module Contract, Common and the three role chapters that a static reading can check).
//!
//! This table is the one source for the SARIF rules and the CLI reference page
//! (`docs/src/reference/tfcapi-lint-cli.md`, kept equal to [`markdown_table`] by a test).

use crate::report::Severity;
use crate::role::Role;
use std::fmt::Write as _;

/// Whether a check reads module source or an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `tfcapi-lint module` (and the module inside `tfcapi-lint image`).
    Module,
    /// `tfcapi-lint image` only.
    Image,
}

/// One check.
#[derive(Debug, Clone, Copy)]
pub struct Check {
    /// The stable ID.
    pub id: &'static str,
    /// The severities it reports at (one, or error and warning for a two-level check).
    pub severities: &'static [Severity],
    /// The roles it applies to.
    pub roles: &'static [Role],
    /// Module or image.
    pub scope: Scope,
    /// A finding of this check means the input could not be read (exit code 2).
    pub unreadable: bool,
    /// What the check enforces, in one sentence.
    pub summary: &'static str,
    /// A minimal example that triggers it.
    pub example: &'static str,
    /// What to write instead.
    pub fix: &'static str,
}

const ALL_ROLES: &[Role] = &Role::ALL;
const CLUSTER: &[Role] = &[Role::Cluster];
const MACHINE: &[Role] = &[Role::Machine];
const POOL: &[Role] = &[Role::Machinepool];
const NODES: &[Role] = &[Role::Machine, Role::Machinepool];
const ERROR: &[Severity] = &[Severity::Error];
const WARNING: &[Severity] = &[Severity::Warning];
const BOTH: &[Severity] = &[Severity::Error, Severity::Warning];

const fn module(
    id: &'static str,
    severities: &'static [Severity],
    roles: &'static [Role],
    summary: &'static str,
    example: &'static str,
    fix: &'static str,
) -> Check {
    Check {
        id,
        severities,
        roles,
        scope: Scope::Module,
        unreadable: false,
        summary,
        example,
        fix,
    }
}

const fn image(
    id: &'static str,
    severities: &'static [Severity],
    roles: &'static [Role],
    summary: &'static str,
    example: &'static str,
    fix: &'static str,
) -> Check {
    Check {
        id,
        severities,
        roles,
        scope: Scope::Image,
        unreadable: false,
        summary,
        example,
        fix,
    }
}

const fn unreadable(check: Check) -> Check {
    Check {
        unreadable: true,
        ..check
    }
}

/// `module/parse`
pub const MODULE_PARSE: &str = "module/parse";
/// `module/one-line-block`
pub const MODULE_ONE_LINE_BLOCK: &str = "module/one-line-block";
/// `module/no-configuration`
pub const MODULE_NO_CONFIGURATION: &str = "module/no-configuration";
/// `module/ignore`
pub const MODULE_IGNORE: &str = "module/ignore";
/// `module/tofu-shadow`
pub const MODULE_TOFU_SHADOW: &str = "module/tofu-shadow";
/// `module/duplicate`
pub const MODULE_DUPLICATE: &str = "module/duplicate";
/// `module/backend`
pub const MODULE_BACKEND: &str = "module/backend";
/// `input/missing`
pub const INPUT_MISSING: &str = "input/missing";
/// `input/type`
pub const INPUT_TYPE: &str = "input/type";
/// `input/default`
pub const INPUT_DEFAULT: &str = "input/default";
/// `input/nullable`
pub const INPUT_NULLABLE: &str = "input/nullable";
/// `input/cluster-outputs-default`
pub const INPUT_CLUSTER_OUTPUTS_DEFAULT: &str = "input/cluster-outputs-default";
/// `input/bootstrap-data-sensitive`
pub const INPUT_BOOTSTRAP_DATA_SENSITIVE: &str = "input/bootstrap-data-sensitive";
/// `input/reserved-name`
pub const INPUT_RESERVED_NAME: &str = "input/reserved-name";
/// `input/user-variable-default`
pub const INPUT_USER_VARIABLE_DEFAULT: &str = "input/user-variable-default";
/// `input/tags-unused`
pub const INPUT_TAGS_UNUSED: &str = "input/tags-unused";
/// `naming/reserved-prefix`
pub const NAMING_RESERVED_PREFIX: &str = "naming/reserved-prefix";
/// `output/missing`
pub const OUTPUT_MISSING: &str = "output/missing";
/// `output/sensitive-reference`
pub const OUTPUT_SENSITIVE_REFERENCE: &str = "output/sensitive-reference";
/// `output/health-shape`
pub const OUTPUT_HEALTH_SHAPE: &str = "output/health-shape";
/// `output/endpoint-never-set`
pub const OUTPUT_ENDPOINT_NEVER_SET: &str = "output/endpoint-never-set";
/// `output/endpoint-shape`
pub const OUTPUT_ENDPOINT_SHAPE: &str = "output/endpoint-shape";
/// `output/exports-number`
pub const OUTPUT_EXPORTS_NUMBER: &str = "output/exports-number";
/// `output/addresses-shape`
pub const OUTPUT_ADDRESSES_SHAPE: &str = "output/addresses-shape";
/// `output/provider-id-list-shape`
pub const OUTPUT_PROVIDER_ID_LIST_SHAPE: &str = "output/provider-id-list-shape";
/// `image/pull`
pub const IMAGE_PULL: &str = "image/pull";
/// `image/platform`
pub const IMAGE_PLATFORM: &str = "image/platform";
/// `image/module`
pub const IMAGE_MODULE: &str = "image/module";
/// `image/runtime`
pub const IMAGE_RUNTIME: &str = "image/runtime";
/// `image/providers-layout`
pub const IMAGE_PROVIDERS_LAYOUT: &str = "image/providers-layout";
/// `image/providers-missing`
pub const IMAGE_PROVIDERS_MISSING: &str = "image/providers-missing";
/// `image/label-role`
pub const IMAGE_LABEL_ROLE: &str = "image/label-role";
/// `image/label-contract`
pub const IMAGE_LABEL_CONTRACT: &str = "image/label-contract";
/// `image/label-runtime`
pub const IMAGE_LABEL_RUNTIME: &str = "image/label-runtime";
/// `image/capacity-label`
pub const IMAGE_CAPACITY_LABEL: &str = "image/capacity-label";
/// `image/capacity-label-pair`
pub const IMAGE_CAPACITY_LABEL_PAIR: &str = "image/capacity-label-pair";
/// `image/reserved-path`
pub const IMAGE_RESERVED_PATH: &str = "image/reserved-path";
/// `image/mounted-path`
pub const IMAGE_MOUNTED_PATH: &str = "image/mounted-path";
/// `image/root-user`
pub const IMAGE_ROOT_USER: &str = "image/root-user";
/// `image/permissions`
pub const IMAGE_PERMISSIONS: &str = "image/permissions";

/// Every check, module checks first, in the order the reference page lists them.
pub const CHECKS: &[Check] = &[
    unreadable(module(
        MODULE_PARSE,
        ERROR,
        ALL_ROLES,
        "Every `.tf`, `.tf.json`, `.tofu` and `.tofu.json` file at the top level parses, and holds only blocks Terraform knows at that level.",
        "variable \"x\" {\n  type = string",
        "Fix the syntax at the reported line; `tofu validate` reports the same place.",
    )),
    unreadable(module(
        MODULE_ONE_LINE_BLOCK,
        ERROR,
        ALL_ROLES,
        "A block written on one line holds at most one argument and no nested block (OpenTofu: \"Invalid single-argument block definition\").",
        "variable \"captf_cluster_outputs\" { type = any default = null }",
        "Write the block over several lines, one argument per line.",
    )),
    unreadable(module(
        MODULE_NO_CONFIGURATION,
        ERROR,
        ALL_ROLES,
        "The directory holds at least one configuration file at its top level.",
        "tfcapi-lint module --role machine ./empty-dir",
        "Point the command at the module's root directory (the one with its `.tf` files).",
    )),
    module(
        MODULE_IGNORE,
        ERROR,
        ALL_ROLES,
        "Every `# tfcapi-lint-ignore:` comment names module check IDs that can be ignored (not `module/parse`, `module/one-line-block`, `module/no-configuration` or `module/ignore`) and gives a reason after `--`.",
        "# tfcapi-lint-ignore: input/type",
        "Write `# tfcapi-lint-ignore: input/type -- <why the check does not apply here>` on the line the finding names, or on the line above it.",
    ),
    module(
        MODULE_TOFU_SHADOW,
        WARNING,
        ALL_ROLES,
        "No `x.tofu` (or `x.tofu.json`) sits beside an `x.tf` (or `x.tf.json`): OpenTofu reads the `.tofu` file instead, Terraform ignores `.tofu` files, so the two runtimes would run different code. The module is linted for its runtime (`--runtime`, or the image's `io.captf.runtime` label), and the side that runtime never reads is not checked.",
        "main.tf and main.tofu in the same directory",
        "Keep one of the two files, or lint the module for each runtime it supports.",
    ),
    module(
        MODULE_DUPLICATE,
        ERROR,
        ALL_ROLES,
        "A variable, output or local is declared once (override files excepted).",
        "output \"health\" { value = local.health }   # in main.tf and again in outputs.tf",
        "Delete one of the declarations.",
    ),
    module(
        MODULE_BACKEND,
        ERROR,
        ALL_ROLES,
        "A module is a child module: it declares no `backend` and no `cloud` block; the controller generates the root and its kubernetes backend.",
        "terraform {\n  backend \"s3\" {}\n}",
        "Remove the `backend` (or `cloud`) block.",
    ),
    module(
        INPUT_MISSING,
        ERROR,
        ALL_ROLES,
        "Every contract input of the role is declared as a variable (the generated root passes all of them).",
        "# a machine module without variable \"bootstrap_format\"",
        "Declare the input as the role's minimal skeleton does, for example `variable \"bootstrap_format\" { type = string }`.",
    ),
    module(
        INPUT_TYPE,
        ERROR,
        ALL_ROLES,
        "Every variable's `type` is a valid type constraint, and a contract input's type is one the contract's value converts to (attributes the contract does not pass must be `optional(...)`).",
        "variable \"replicas\" { type = string }",
        "Use the contract's type (`number` here), `any`, or an object type whose extra attributes are `optional(...)`.",
    ),
    module(
        INPUT_DEFAULT,
        WARNING,
        ALL_ROLES,
        "A contract input the controller always sets carries no default, and one that may be null carries at most `default = null`: a default is never used and hides a missing input.",
        "variable \"failure_domains\" {\n  type    = list(string)\n  default = []\n}",
        "Remove the default (or write `default = null` for an input the contract lets be null).",
    ),
    module(
        INPUT_NULLABLE,
        ERROR,
        ALL_ROLES,
        "A contract input the controller may pass as null is not declared `nullable = false`.",
        "variable \"failure_domain\" {\n  type     = string\n  nullable = false\n}",
        "Remove `nullable = false` and handle null in the module.",
    ),
    module(
        INPUT_CLUSTER_OUTPUTS_DEFAULT,
        ERROR,
        CLUSTER,
        "A cluster module that declares `captf_cluster_outputs` gives it a default: the cluster role is never passed it, and a declaration without a default fails validate.",
        "variable \"captf_cluster_outputs\" { type = any }",
        "Add `default = null` (multi-line block), or remove the variable.",
    ),
    module(
        INPUT_BOOTSTRAP_DATA_SENSITIVE,
        WARNING,
        NODES,
        "`bootstrap_data` is declared `sensitive = true`, as the role skeletons do.",
        "variable \"bootstrap_data\" { type = string }",
        "Add `sensitive = true` (multi-line block).",
    ),
    module(
        INPUT_RESERVED_NAME,
        ERROR,
        ALL_ROLES,
        "No variable is named after a module meta-argument (`source`, `version`, `providers`, `count`, `for_each`, `depends_on`, `lifecycle`, `locals`).",
        "variable \"count\" { type = number }",
        "Rename the variable, for example `instance_count`.",
    ),
    module(
        INPUT_USER_VARIABLE_DEFAULT,
        WARNING,
        ALL_ROLES,
        "A user (non-contract) variable has a default, so the module plans when an object sets no user variables; `default = null` with a `validation` that rejects null (evaluated with the variable null, its condition is false or fails) is required in effect and warned about the same way.",
        "variable \"instance_type\" { type = string }",
        "Add a default, or allow the warning (`--allow-warning input/user-variable-default`) when every object must set it.",
    ),
    module(
        INPUT_TAGS_UNUSED,
        WARNING,
        ALL_ROLES,
        "`var.captf_tags` is referenced somewhere: every cloud resource the module creates must carry these tags.",
        "resource \"aws_instance\" \"node\" { ami = var.ami }   # and no var.captf_tags anywhere",
        "Apply `var.captf_tags` to every resource that takes tags or labels (for example `tags = var.captf_tags`).",
    ),
    module(
        NAMING_RESERVED_PREFIX,
        ERROR,
        ALL_ROLES,
        "No variable or output starts with `captf_` unless the contract defines it for the role.",
        "output \"captf_debug\" { value = var.captf_object }",
        "Rename it without the `captf_` prefix.",
    ),
    module(
        OUTPUT_MISSING,
        ERROR,
        ALL_ROLES,
        "Every required output of the role is declared (its value may be null until known); the root re-exports all of them.",
        "# a machine module without output \"interruptible\"",
        "Declare the output, for example `output \"interruptible\" { value = false }`.",
    ),
    module(
        OUTPUT_SENSITIVE_REFERENCE,
        ERROR,
        ALL_ROLES,
        "An output whose value reads a sensitive variable (directly or through locals) is declared `sensitive = true`, or plan fails with \"Output refers to sensitive values\".",
        "output \"user_data\" { value = var.bootstrap_data }",
        "Add `sensitive = true` to the output, or stop exposing the value.",
    ),
    module(
        OUTPUT_HEALTH_SHAPE,
        ERROR,
        ALL_ROLES,
        "A literal `health` object has `state` and `healthy`, `state` is one of pending, running, degraded, stopped, terminated, unknown, and `healthy` is a bool.",
        "output \"health\" { value = { state = \"ok\", healthy = true } }",
        "Use a state of the closed enum and a bool `healthy`.",
    ),
    module(
        OUTPUT_ENDPOINT_NEVER_SET,
        WARNING,
        CLUSTER,
        "`control_plane_endpoint` is not a literal null with no conditional path to a value: with KubeadmControlPlane and no user endpoint the cluster would stall.",
        "output \"control_plane_endpoint\" { value = null }",
        "Return the load balancer's endpoint, for example `var.control_plane_endpoint != null ? var.control_plane_endpoint : { host = aws_lb.cp.dns_name, port = 6443 }`.",
    ),
    module(
        OUTPUT_ENDPOINT_SHAPE,
        ERROR,
        CLUSTER,
        "A literal `control_plane_endpoint` object sets both `host` (non-empty) and `port` (1-65535); a half-set endpoint is OutputsInvalid.",
        "output \"control_plane_endpoint\" { value = { host = aws_lb.cp.dns_name } }",
        "Set both `host` and `port`.",
    ),
    module(
        OUTPUT_EXPORTS_NUMBER,
        ERROR,
        CLUSTER,
        "Literal numbers in `exports` are integers: exports become every machine's hashed input, and the inputs hash accepts only integers.",
        "output \"exports\" { value = { ratio = 0.5 } }",
        "Export the number as an integer or a string (`ratio = \"0.5\"`).",
    ),
    module(
        OUTPUT_ADDRESSES_SHAPE,
        ERROR,
        MACHINE,
        "Literal `addresses` entries have a `type` of Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS and an `address`.",
        "output \"addresses\" { value = [{ type = \"Private\", address = \"10.0.0.1\" }] }",
        "Use a Cluster API MachineAddressType for `type`.",
    ),
    module(
        OUTPUT_PROVIDER_ID_LIST_SHAPE,
        BOTH,
        POOL,
        "Error: `provider_id_list` is missing or not a list. Warning: its own value expression is not wrapped in `sort()` or `distinct()` (HCL only; a constant list passes).",
        "output \"provider_id_list\" { value = local.raw_ids }",
        "Wrap the output's own expression: `value = sort(local.raw_ids)` (a local that is itself sorted does not count).",
    ),
    unreadable(image(
        IMAGE_PULL,
        ERROR,
        ALL_ROLES,
        "The image can be read: the registry answers with the manifest and blobs, or the OCI layout is complete and every blob matches its digest and size.",
        "tfcapi-lint image --role machine oci:/tmp/truncated-layout",
        "Check the reference, your registry login (`docker login`/`podman login`), `--insecure` for a plain-HTTP registry, or re-save the layout.",
    )),
    image(
        IMAGE_PLATFORM,
        ERROR,
        ALL_ROLES,
        "The image publishes the platform being checked (linux/amd64 unless `--platform` says otherwise).",
        "tfcapi-lint image --role machine --platform linux/s390x \"$IMAGE\"",
        "Publish the platform (a multi-arch index), or check the platform the image ships.",
    ),
    image(
        IMAGE_MODULE,
        ERROR,
        ALL_ROLES,
        "`/captf/module` is a directory holding the module's configuration files (its findings are reported under their own IDs).",
        "COPY . /src   # instead of COPY . /captf/module",
        "`COPY . /captf/module` in the final stage.",
    ),
    image(
        IMAGE_RUNTIME,
        ERROR,
        ALL_ROLES,
        "`/captf/runtime` exists (symlinks followed inside the image), is a regular file, and the image user can execute it.",
        "RUN ln -s /bin/terraform /captf/tofu   # no /captf/runtime",
        "`ln -s /bin/terraform /captf/runtime` or `COPY --from=tofu /usr/local/bin/tofu /captf/runtime`, mode 0755.",
    ),
    image(
        IMAGE_PROVIDERS_LAYOUT,
        ERROR,
        ALL_ROLES,
        "`/captf/providers`, when present, follows a filesystem mirror layout: HOST/NAMESPACE/TYPE/ holding `terraform-provider-TYPE_VERSION_OS_ARCH.zip` and `.json` index files, or VERSION/OS_ARCH/ directories.",
        "/captf/providers/aws/terraform-provider-aws_5.0.0_linux_amd64.zip",
        "Build it with `tofu providers mirror` (or `terraform providers mirror`) into `/captf/providers`.",
    ),
    image(
        IMAGE_PROVIDERS_MISSING,
        ERROR,
        ALL_ROLES,
        "When `/captf/providers` is present it has a package of every `required_providers` entry (of the module and its local submodules) for the platform being checked: the runner installs from the mirror only.",
        "providers mirror -platform=linux_amd64 ...   # image also published for linux/arm64",
        "Mirror every platform the image publishes (`-platform=linux_amd64 -platform=linux_arm64`).",
    ),
    image(
        IMAGE_LABEL_ROLE,
        ERROR,
        ALL_ROLES,
        "The `io.captf.role` label, when present, equals `--role`.",
        "LABEL io.captf.role=\"cluster\"   # linted with --role machine",
        "Build with `--build-arg ROLE=<role>`, or lint with the right `--role`.",
    ),
    image(
        IMAGE_LABEL_CONTRACT,
        ERROR,
        ALL_ROLES,
        "The `io.captf.contract` label, when present, equals `--contract`.",
        "LABEL io.captf.contract=\"v1beta1\"",
        "Set the label to the contract version the module implements (`v1alpha1`).",
    ),
    image(
        IMAGE_LABEL_RUNTIME,
        WARNING,
        ALL_ROLES,
        "The `io.captf.runtime` label, when present, is `tofu` or `terraform`, and `io.captf.runtime.version` is a version number.",
        "LABEL io.captf.runtime=\"opentofu\"",
        "Use `tofu` or `terraform`, and the runtime's version (for example `1.12.6`).",
    ),
    image(
        IMAGE_CAPACITY_LABEL,
        ERROR,
        MACHINE,
        "`io.captf.capacity` is a JSON object of resource name to Kubernetes quantity, and `io.captf.node-info` a JSON object with string `architecture` and `operatingSystem`.",
        "LABEL io.captf.capacity='{\"cpu\": 4}'",
        "Quote quantities: `{\"cpu\":\"4\",\"memory\":\"16Gi\"}`; `{\"architecture\":\"amd64\",\"operatingSystem\":\"linux\"}`.",
    ),
    image(
        IMAGE_CAPACITY_LABEL_PAIR,
        WARNING,
        MACHINE,
        "The two capacity labels come together, with the same values on every platform of an index.",
        "LABEL io.captf.capacity='{\"cpu\":\"4\"}'   # without io.captf.node-info",
        "Set both labels, identically on every platform.",
    ),
    image(
        IMAGE_RESERVED_PATH,
        ERROR,
        ALL_ROLES,
        "Nothing is shipped under `/captf/bin` (the injected runner) or `/captf/config` (the per-run Secret): both are mount points.",
        "COPY runner /captf/bin/runner",
        "Remove the files; the controller mounts these paths.",
    ),
    image(
        IMAGE_MOUNTED_PATH,
        WARNING,
        ALL_ROLES,
        "Nothing is shipped under `/captf/work` or `/var/run/captf/credentials`: the Job mounts volumes there, hiding it.",
        "RUN mkdir -p /captf/work/cache && touch /captf/work/cache/x",
        "Put the files elsewhere (for example under `/captf/module`).",
    ),
    image(
        IMAGE_ROOT_USER,
        WARNING,
        ALL_ROLES,
        "The image's `config.User` is not root, so the Job can run under the restricted Pod Security profile.",
        "# no USER instruction",
        "`USER 65532` in the final stage.",
    ),
    image(
        IMAGE_PERMISSIONS,
        WARNING,
        ALL_ROLES,
        "Files under `/captf/module` and `/captf/providers` are readable, and directories traversable, by the image user (owner, fsGroup 65532, or other bits).",
        "COPY --chmod=0600 main.tf /captf/module/   # with USER 65532 and root-owned files",
        "`chown -R 65532:65532 /captf` or make the files world-readable.",
    ),
];

/// The check with this ID.
pub fn get(id: &str) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.id == id)
}

/// Whether `id` names a check.
pub fn is_known(id: &str) -> bool {
    get(id).is_some()
}

fn severities_cell(check: &Check) -> String {
    check
        .severities
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" / ")
}

fn roles_cell(check: &Check) -> String {
    if check.roles.len() == Role::ALL.len() {
        "all".to_owned()
    } else {
        check
            .roles
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', "<br>")
}

/// The check table of the CLI reference page, generated from [`CHECKS`].
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| ID | Severity | Roles | Checks | Example that triggers it | Fix |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for c in CHECKS {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | <code>{}</code> | {} |",
            c.id,
            severities_cell(c),
            roles_cell(c),
            cell(c.summary),
            cell(&c.example.replace('<', "&lt;").replace('>', "&gt;")),
            cell(c.fix),
        );
    }
    out
}
