//! The generated modules the tfcapi-lint benches lint (shared by `lint_module`,
//! `lint_large_file` and `against_tflint`): a 200-file machine module and a machine module with
//! one large file, both built on the no-op machine module.
#![allow(dead_code)] // each bench uses part of it

use std::path::{Path, PathBuf};
use tfcapi_lint::module::SourceFile;

/// The number of files of the generated many-file module.
pub const FILES: usize = 200;

/// The no-op machine module of this repository.
pub fn noop_machine() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../modules/noop/machine")
}

/// One generated file of the many-file module: user variables, locals, a resource, an output.
pub fn generated_file(i: usize) -> String {
    format!(
        r#"# Generated file {i}.
variable "size_{i}" {{
  type    = number
  default = {i}
}}

variable "settings_{i}" {{
  type = object({{
    name    = string
    enabled = optional(bool, true)
    zones   = optional(list(string), [])
  }})
  default = {{ name = "s{i}" }}
}}

locals {{
  name_{i}  = "${{var.captf_object.name}}-{i}"
  zones_{i} = [for z in var.settings_{i}.zones : upper(z) if z != ""]
}}

{}"#,
        resource_and_output(i)
    )
}

/// The resource and output every generated file and block ends with.
fn resource_and_output(i: usize) -> String {
    format!(
        r#"resource "terraform_data" "part_{i}" {{
  input = {{
    tags = merge(var.captf_tags, {{ part = "{i}" }})
    size = var.size_{i} * 2
    name = local.name_{i}
  }}
}}

output "part_{i}" {{
  value = terraform_data.part_{i}.output
}}
"#
    )
}

/// Writes the many-file module into `dir`: the no-op machine module's files plus generated
/// files up to `FILES` in all.
pub fn write_many_file_module(dir: &Path) {
    let mut written = 0;
    for entry in std::fs::read_dir(noop_machine()).expect("the no-op machine module") {
        let entry = entry.expect("a directory entry");
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
        written += 1;
    }
    for i in written..FILES {
        std::fs::write(dir.join(format!("part_{i:03}.tf")), generated_file(i)).expect("write");
    }
}

/// One block group of the large file.
pub fn block(i: usize) -> String {
    format!(
        r#"variable "size_{i}" {{
  type    = number
  default = {i}
}}

locals {{
  name_{i}  = "${{var.captf_object.name}}-{i}"
  zones_{i} = [for z in ["a", "b"] : upper(z) if z != ""]
}}

{}
"#,
        resource_and_output(i)
    )
}

/// The no-op machine module's files plus `big.tf` of about `mb` megabytes.
pub fn large_file_module(mb: usize) -> Vec<SourceFile> {
    let mut files: Vec<SourceFile> = std::fs::read_dir(noop_machine())
        .expect("the no-op machine module")
        .map(|e| {
            let e = e.expect("an entry");
            let name = e.file_name().into_string().expect("a UTF-8 name");
            SourceFile {
                display: name.clone(),
                text: std::fs::read_to_string(e.path()).expect("readable"),
                name,
            }
        })
        .collect();
    let mut big = String::with_capacity(mb << 20);
    let mut i = 0;
    while big.len() < mb << 20 {
        big.push_str(&block(i));
        i += 1;
    }
    files.push(SourceFile {
        name: "big.tf".into(),
        display: "big.tf".into(),
        text: big,
    });
    files
}

/// Writes the large-file module of about `mb` megabytes into `dir`.
pub fn write_large_file_module(dir: &Path, mb: usize) {
    for file in large_file_module(mb) {
        std::fs::write(dir.join(&file.name), file.text).expect("write");
    }
}
