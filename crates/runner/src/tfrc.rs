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

/// A quoted HCL string literal: backslashes, quotes and control characters escaped, and `${`
/// and `%{` doubled so a path is never read as a template.
pub fn hcl_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

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

    #[test]
    fn odd_paths_are_quoted_not_interpreted() {
        assert_eq!(hcl_string(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
        assert_eq!(hcl_string("/p/${x}/%{y}"), r#""/p/$${x}/%%{y}""#);
        assert_eq!(hcl_string("/a\nb"), r#""/a\nb""#);
    }
}
