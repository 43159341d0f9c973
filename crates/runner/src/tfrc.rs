//! The CLI configuration the runner writes when the image ships a provider mirror (Runtime
//! Environment "Provider mirror and CLI configuration"): every provider comes from the
//! filesystem mirror, direct installation is excluded for all of them, so init never contacts a
//! registry and fails clearly when the mirror lacks a provider. No plugin cache is configured.

use std::path::Path;

/// The `cli.tfrc` text for a mirror at `providers`; `None` when the path is not UTF-8.
pub fn cli_tfrc(providers: &Path) -> Option<String> {
    let path = hcl_string(providers.to_str()?);
    Some(format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = {path}\n    include = [\"*/*/*\"]\n  }}\n  direct {{\n    exclude = [\"*/*/*\"]\n  }}\n}}\n"
    ))
}

use contract::hcl::hcl_string;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_mirror_is_written_exactly_as_the_book_shows() {
        let text = cli_tfrc(Path::new("/captf/providers")).expect("utf-8");
        assert_eq!(
            text,
            r#"provider_installation {
  filesystem_mirror {
    path    = "/captf/providers"
    include = ["*/*/*"]
  }
  direct {
    exclude = ["*/*/*"]
  }
}
"#
        );
        assert!(!text.contains("plugin_cache_dir"));
    }
}
