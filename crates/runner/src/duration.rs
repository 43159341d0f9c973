//! Durations written the way the Job writes them (`300s`, `5m0s`, `1h30m`, `1.5s`): Go's
//! duration syntax, which the documented defaults of `--lock-timeout` and `--stop-timeout` use
//! (Runner CLI reference).

use std::time::Duration;

/// Parses a Go-style duration: an optional `+`, then one or more `<number><unit>` pairs with unit
/// `ns`, `us`, `µs`, `ms`, `s`, `m` or `h`; a bare `0` is zero. Negative durations are refused.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.strip_prefix('+').unwrap_or(text);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(format!("invalid duration {text:?}"));
    }
    if s.starts_with('-') {
        return Err(format!("invalid duration {text:?}: negative"));
    }
    let mut total_nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(format!("invalid duration {text:?}"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("invalid duration {text:?}: missing unit")),
            other => return Err(format!("invalid duration {text:?}: unknown unit {other:?}")),
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| format!("invalid duration {text:?}"))?
        };
        let mut nanos = whole
            .checked_mul(unit_nanos)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        // Fractional part: digit by digit, as precise as the unit allows.
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        rest = next;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| format!("invalid duration {text:?}: too large"))?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Whole seconds for a runtime's `-lock-timeout=<n>s`, rounding a fraction up so a short but
/// non-zero timeout never becomes "do not wait".
pub fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_defaults_and_job_values() {
        assert_eq!(parse("5m0s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1m0s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("570s"), Ok(Duration::from_secs(570)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("+2s"), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn refuses_what_go_refuses() {
        for bad in ["", "5", "s", "-1s", "1x", "1..2s", ".s", "1s2"] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn whole_seconds_rounds_up() {
        assert_eq!(whole_seconds(Duration::from_secs(300)), 300);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::ZERO), 0);
    }
}
