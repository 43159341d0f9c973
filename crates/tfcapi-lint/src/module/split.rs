//! Splits a large native-syntax file into runs of whole top-level blocks, so the loader parses
//! and walks one run at a time instead of holding the syntax tree of the whole file (spec:
//! tfcapi-lint "Lint a module": a module is read, never run, and a generated module may be
//! large). The tree `hcl::edit` builds is many times the size of its text; parsed a run at a time,
//! peak memory stays near the text's own size and time stays linear in it.
//!
//! The scanner only has to find where a top-level block ends: it follows braces outside strings,
//! template interpolations (`${ ... }`, `%{ ... }`, which may hold strings and braces of their
//! own), heredocs and comments. A file it cannot follow (an unterminated string, unbalanced
//! braces, nesting deeper than [`MAX_NESTING`]) is not split: the caller parses it whole, and the
//! parser reports the error as before.

/// Files shorter than this are parsed whole (splitting would change nothing measurable).
pub const SPLIT_MIN_BYTES: usize = 1 << 20;
/// The least text one run holds: runs gather consecutive blocks up to about this size.
pub const RUN_BYTES: usize = 256 << 10;
/// The deepest nesting of strings and interpolations followed before giving up on splitting.
pub const MAX_NESTING: usize = 64;

/// A run of whole top-level structures: `text[start..end]`, starting on line `first_line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Byte offset of the first character.
    pub start: usize,
    /// Byte offset just past the last character.
    pub end: usize,
    /// The 1-based line `start` is on.
    pub first_line: u32,
}

/// The runs of `text`, each ending just after the newline that follows a top-level block's
/// closing brace and holding at least [`RUN_BYTES`] (except the last); `None` when the text
/// cannot be followed and must be parsed whole. The runs cover the text exactly, in order.
pub fn runs(text: &str) -> Option<Vec<Run>> {
    Some(gather(text, &block_ends(text)?))
}

/// The offsets just past the newline that follows each top-level block's closing brace; `None`
/// when the text cannot be followed.
fn block_ends(text: &str) -> Option<Vec<usize>> {
    let b = text.as_bytes();
    let mut cuts = Vec::new();
    let mut depth = 0usize;
    let mut closed = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                i += 1;
            }
            b'}' => {
                depth = depth.checked_sub(1)?;
                closed |= depth == 0;
                i += 1;
            }
            b'\n' => {
                if depth == 0 && closed {
                    cuts.push(i + 1);
                    closed = false;
                }
                i += 1;
            }
            _ => i = skip_token(b, i, 0)?,
        }
    }
    (depth == 0).then_some(cuts)
}

/// Groups the block ends into runs of at least [`RUN_BYTES`], with their first lines.
fn gather(text: &str, cuts: &[usize]) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut line = 1u32;
    for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
        if cut - start < RUN_BYTES && cut != text.len() {
            continue;
        }
        if cut > start {
            runs.push(Run {
                start,
                end: cut,
                first_line: line,
            });
            let newlines = text[start..cut].matches('\n').count();
            line = line.saturating_add(u32::try_from(newlines).unwrap_or(u32::MAX));
            start = cut;
        }
    }
    runs
}

/// Skips whatever starts at `i` in code that is not a brace or a newline: a comment, a string,
/// a heredoc or a plain byte. Returns the index after it.
fn skip_token(b: &[u8], i: usize, nesting: usize) -> Option<usize> {
    match (b[i], b.get(i + 1).copied()) {
        (b'#', _) | (b'/', Some(b'/')) => Some(line_end(b, i)),
        (b'/', Some(b'*')) => find(b, i + 2, b"*/").map(|j| j + 2),
        (b'"', _) => skip_string(b, i + 1, nesting + 1),
        (b'<', Some(b'<')) => match heredoc(b, i) {
            Heredoc::NotOne => Some(i + 2),
            Heredoc::Unterminated => None,
            Heredoc::EndsAt(end) => Some(end),
        },
        _ => Some(i + 1),
    }
}

/// The index of the newline ending the line at `i` (or the text's end); the newline itself is
/// left for the caller.
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(b.len(), |p| i + p)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    b.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// Skips a quoted template whose opening quote was just before `i`; returns the index after the
/// closing quote.
fn skip_string(b: &[u8], mut i: usize, nesting: usize) -> Option<usize> {
    if nesting > MAX_NESTING {
        return None;
    }
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            b'\n' => return None,
            b'$' | b'%' if b.get(i + 1) == Some(&b[i]) && b.get(i + 2) == Some(&b'{') => i += 3,
            b'$' | b'%' if b.get(i + 1) == Some(&b'{') => {
                i = skip_interpolation(b, i + 2, nesting + 1)?;
            }
            _ => i += 1,
        }
    }
    None
}

/// Skips the code of an interpolation opened just before `i`; returns the index after its
/// closing brace.
fn skip_interpolation(b: &[u8], mut i: usize, nesting: usize) -> Option<usize> {
    if nesting > MAX_NESTING {
        return None;
    }
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i + 1),
            b'}' => {
                depth -= 1;
                i += 1;
            }
            _ => i = skip_token(b, i, nesting)?,
        }
    }
    None
}

/// What `<<` at some index opens.
enum Heredoc {
    /// Not a heredoc (no marker and newline after it).
    NotOne,
    /// A heredoc whose closing marker never comes.
    Unterminated,
    /// A heredoc; the index of the newline ending its closing marker line (or the text's end).
    EndsAt(usize),
}

/// Reads a heredoc (`<<EOT` or `<<-EOT`, then a newline) starting at `i`, through the line whose
/// trimmed text is the marker.
fn heredoc(b: &[u8], i: usize) -> Heredoc {
    let mut j = i + 2;
    if b.get(j) == Some(&b'-') {
        j += 1;
    }
    let marker_start = j;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'-') {
        j += 1;
    }
    let marker = &b[marker_start..j];
    if marker.is_empty() || !(b[marker_start].is_ascii_alphabetic() || b[marker_start] == b'_') {
        return Heredoc::NotOne;
    }
    let mut line_start = match b.get(j) {
        Some(b'\n') => j + 1,
        Some(b'\r') if b.get(j + 1) == Some(&b'\n') => j + 2,
        _ => return Heredoc::NotOne,
    };
    while line_start < b.len() {
        let end = line_end(b, line_start);
        if b[line_start..end].trim_ascii() == marker {
            return Heredoc::EndsAt(end);
        }
        line_start = end + 1;
    }
    Heredoc::Unterminated
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_end_after_their_closing_brace_line() {
        let text = "variable \"a\" {\n  default = \"}\"\n}\n\n# } not code\nlocals {\n  x = \"${ {a = \"}\"} }\"\n  h = <<-EOT\n    } { not code\n  EOT\n  /* } */\n}\noutput \"o\" { value = 1 }\n";
        let cuts = block_ends(text).expect("followed");
        let ends: Vec<&str> = cuts
            .iter()
            .map(|c| text[..*c].lines().last().unwrap_or(""))
            .collect();
        assert_eq!(ends, ["}", "}", "output \"o\" { value = 1 }"]);
    }

    #[test]
    fn unbalanced_or_unterminated_text_is_not_split() {
        assert_eq!(runs("variable \"a\" {\n"), None);
        assert_eq!(runs("}\n"), None);
        assert_eq!(runs("x = \"open\n"), None);
        assert_eq!(runs("x = <<EOT\nnever closed\n"), None);
        let deep = format!("x = \"{}\"\n", "${\"".repeat(MAX_NESTING + 2));
        assert_eq!(runs(&deep), None);
    }

    #[test]
    fn runs_cover_the_text_and_know_their_first_line() {
        let block = "resource \"a\" \"b\" {\n  x = 1\n}\n";
        let text = block.repeat(RUN_BYTES / block.len() * 3);
        let runs = runs(&text).expect("followed");
        assert!(runs.len() >= 2, "{}", runs.len());
        assert_eq!(runs[0].start, 0);
        assert_eq!(runs.last().map(|r| r.end), Some(text.len()));
        for pair in runs.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
            let lines_before = text[..pair[1].start].matches('\n').count();
            assert_eq!(pair[1].first_line as usize, lines_before + 1);
            assert!(text[pair[1].start..].starts_with("resource"));
        }
    }
}
