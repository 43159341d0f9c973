//! Lints a generated 200-file machine module: the no-op module's three files plus 197 files of
//! user variables, locals, resources and outputs, read from disk on every iteration.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use tfcapi_lint::module::lint_dir;
use tfcapi_lint::role::Role;

const FILES: usize = 200;

fn generated_file(i: usize) -> String {
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

resource "terraform_data" "part_{i}" {{
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

fn module_dir(dir: &Path) {
    let noop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../modules/noop/machine");
    let mut written = 0;
    for entry in std::fs::read_dir(noop).expect("the no-op machine module") {
        let entry = entry.expect("a directory entry");
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
        written += 1;
    }
    for i in written..FILES {
        std::fs::write(dir.join(format!("part_{i:03}.tf")), generated_file(i)).expect("write");
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    module_dir(tmp.path());
    let findings = lint_dir(tmp.path(), "bench", Role::Machine);
    assert!(findings.is_empty(), "{findings:#?}");
    c.bench_function("lint_module_200_files", |b| {
        b.iter(|| black_box(lint_dir(black_box(tmp.path()), "bench", Role::Machine)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
