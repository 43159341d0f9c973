//! HCL string literals, as the generated backend configuration and the CLI configuration need
//! them (spec: Runtime Environment "Provider mirror", Job environment `--backend-config=labels=`).

use std::fmt::Write as _;

/// A quoted HCL string literal: backslashes, quotes and control characters escaped, and `${`
/// and `%{` doubled so the value is never read as a template.
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
    fn escapes_and_never_templates() {
        assert_eq!(hcl_string(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
        assert_eq!(hcl_string("/p/${x}/%{y}$z%"), r#""/p/$${x}/%%{y}$z%""#);
        assert_eq!(hcl_string("a\nb\tc\r"), r#""a\nb\tc\r""#);
        assert_eq!(hcl_string(""), r#""""#);
        assert_eq!(hcl_string("\u{1}"), r#""\u0001""#);
    }
}
