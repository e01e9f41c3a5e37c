//! Durations as Kubernetes users write them (`30s`, `5m`, `1h30m`, `250ms`) and as the
//! Go ecosystem prints them (`5m0s`), so messages read like the rest of the stack.

use std::time::Duration;

/// Parses a Go-style duration: one or more `<number><unit>` parts, units `ns`, `us`/`µs`,
/// `ms`, `s`, `m`, `h`; a bare `0` is zero.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; expected e.g. 30s, 5m, 1h30m".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| {
                format!("invalid duration {input:?}: missing unit (ns, us, ms, s, m, h)")
            })?;
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {input:?}: expected e.g. 30s, 5m, 1h30m"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "invalid duration {input:?}: unknown unit {unit:?} (use ns, us, ms, s, m, h)"
                ));
            }
        };
        total += number * seconds_per_unit;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total)
        .map_err(|_| format!("invalid duration {input:?}: out of range"))
}

/// Parses a duration that may be switched off with `off` (or `0`); off is zero.
pub fn parse_off(input: &str) -> Result<Duration, String> {
    match input.trim() {
        "off" | "none" => Ok(Duration::ZERO),
        _ => parse(input),
    }
}

/// Formats like Go's `time.Duration.String()`: `5m0s`, `1h0m0s`, `30s`, `1.5s`, `250ms`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (value, unit) = if nanos < 1_000 {
            return format!("{nanos}ns");
        } else if nanos < 1_000_000 {
            (nanos as f64 / 1e3, "µs")
        } else {
            (nanos as f64 / 1e6, "ms")
        };
        return format!("{}{unit}", trim_float(value));
    }
    let total_secs = d.as_secs();
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = (total_secs % 60) as f64 + f64::from(d.subsec_nanos()) / 1e9;
    let secs = trim_float(secs);
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_style_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        for bad in ["banana", "5", "5x", "", "m5"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn optional_durations_switch_off() {
        assert_eq!(parse_off("off"), Ok(Duration::ZERO));
        assert_eq!(parse_off("0"), Ok(Duration::ZERO));
        assert_eq!(parse_off("2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::from_secs(300)), "5m0s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format(Duration::from_secs(30)), "30s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_secs(3725)), "1h2m5s");
    }
}
