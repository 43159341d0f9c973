//! On-demand checks (`captf.io/requested-at`): any value asks for the object's check once, and
//! `status.lastHandledRequestedAt` records it, so a value must fit that field: at most 256
//! characters once trimmed.

use super::{Rule, Violation};

/// The longest value `status.lastHandledRequestedAt` holds (the manager's limit too).
pub const MAX: usize = 256;

/// Checks the `captf.io/requested-at` annotation's value, when it changed.
pub fn check_requested_at(new: Option<&str>, old: Option<&str>, out: &mut Vec<Violation>) {
    let Some(value) = new.filter(|_| new != old) else {
        return;
    };
    let length = value.trim().chars().count();
    if length > MAX {
        out.push(Violation::new(
            Rule::RequestedAt,
            format!(
                "metadata.annotations[{}]: the value holds {length} characters; at most {MAX} \
                 are allowed (status.lastHandledRequestedAt records it): use a timestamp or a \
                 counter",
                api::constants::annotations::REQUESTED_AT
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(new: Option<&str>, old: Option<&str>) -> Vec<String> {
        let mut out = Vec::new();
        check_requested_at(new, old, &mut out);
        out.into_iter().map(|v| v.message).collect()
    }

    #[test]
    fn a_requested_at_value_fits_the_status_field() {
        assert!(run(Some("2026-12-05T10:00:00Z"), None).is_empty());
        assert!(run(None, Some("1")).is_empty());
        let long = "x".repeat(MAX + 1);
        assert_eq!(
            run(Some(&long), None),
            [
                "metadata.annotations[captf.io/requested-at]: the value holds 257 characters; \
              at most 256 are allowed (status.lastHandledRequestedAt records it): use a \
              timestamp or a counter"
            ]
        );
        // Ratcheting: an object stored with a long value can still be edited otherwise.
        assert!(run(Some(&long), Some(&long)).is_empty());
        assert!(run(Some(&"y".repeat(MAX)), None).is_empty());
    }
}
