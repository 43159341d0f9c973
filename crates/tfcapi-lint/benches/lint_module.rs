//! Lints a generated 200-file machine module: the no-op module's three files plus 197 files of
//! user variables, locals, resources and outputs (`generated`), read from disk on every
//! iteration.

mod generated;

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tfcapi_lint::module::lint_dir;
use tfcapi_lint::role::Role;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    generated::write_many_file_module(tmp.path());
    let findings = lint_dir(tmp.path(), "bench", Role::Machine);
    assert!(findings.is_empty(), "{findings:#?}");
    c.bench_function("lint_module_200_files", |b| {
        b.iter(|| black_box(lint_dir(black_box(tmp.path()), "bench", Role::Machine)));
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
