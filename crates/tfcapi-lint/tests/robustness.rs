//! No input makes tfcapi-lint panic: arbitrary text as `.tf`/`.tf.json` files, arbitrary JSON-ish
//! text, mutated real modules, and arbitrary bytes as image layers.

#![allow(clippy::unwrap_used)] // Test helpers: a failed setup step should fail the test.

use proptest::prelude::*;
use tfcapi_lint::image::fs::Fs;
use tfcapi_lint::module::{SourceFile, json, lint_sources};
use tfcapi_lint::role::Role;

fn source(name: &str, text: String) -> SourceFile {
    SourceFile {
        name: name.to_owned(),
        display: name.to_owned(),
        text,
    }
}

const NOOP_POOL_OUTPUTS: &str = include_str!("../../../modules/noop/machinepool/outputs.tf");
const NOOP_CLUSTER_VARIABLES: &str = include_str!("../../../modules/noop/cluster/variables.tf");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_text_as_hcl_or_json(text in any::<String>(), role in 0usize..3) {
        let role = Role::ALL[role];
        let _ = lint_sources(vec![source("a.tf", text.clone())], role, "m");
        let _ = lint_sources(vec![source("a.tf.json", text)], role, "m");
    }

    #[test]
    fn hcl_like_text(text in "[a-z_\"{}()\\[\\]=?:,.$ \n0-9#/*-]{0,200}", role in 0usize..3) {
        let _ = lint_sources(vec![source("a.tf", text)], Role::ALL[role], "m");
    }

    #[test]
    fn json_like_text(text in "[\\[\\]{}\":,0-9a-z.eE+ \n\\\\-]{0,200}") {
        let _ = json::parse(&text);
        let _ = lint_sources(vec![source("a.tf.json", text)], Role::Cluster, "m");
    }

    #[test]
    fn truncated_real_modules(cut in 0usize..2000, role in 0usize..3) {
        for text in [NOOP_POOL_OUTPUTS, NOOP_CLUSTER_VARIABLES] {
            let end = text.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(text.len());
            let _ = lint_sources(vec![source("a.tf", text[..end].to_owned())], Role::ALL[role], "m");
        }
    }

    #[test]
    fn any_bytes_as_a_layer(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut fs = Fs::new();
        let _ = fs.apply_layer(&bytes[..], &|_| true);
        let _ = fs.resolve("captf/runtime");
    }
}
