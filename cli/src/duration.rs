//! Durations on the command line: `500ms`, `30s`, `10m`, `1h`, `1.5s`, `1h 30m`.
//!
//! The grammar is humantime's (`humantime::parse_duration`); a bare `0` also means zero. A
//! bare number other than 0 is refused rather than guessed: `--wait 10` could mean seconds or
//! milliseconds, and a lock held 1000 times too long is worse than a usage error.

use std::time::Duration;

/// Parses a duration: numbers with units (`ms`, `s`, `m`, `h`, and humantime's longer
/// spellings), several of them added up (`1h 30m`); `0` alone is zero.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{text:?} has no unit (use ms, s, m or h, e.g. 30s)"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration: {e} (e.g. 500ms, 30s, 10m, 1h)"))
}

/// A short human rendering: `850ms`, `27.3s`, `4m05s`, `2h10m`.
pub fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        // humantime's forms: longer unit names, sums, a space before the unit.
        assert_eq!(parse("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("30 s"), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "",
            "5",
            "5x",
            "s",
            "-1s",
            "1.2.3s",
            "ms5",
            "1e400h",
            "0.5",
            "99999999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        // The error names the input and shows what would work.
        let e = parse("5x").unwrap_err();
        assert!(
            e.contains("\"5x\" is not a duration") && e.contains("30s"),
            "{e}"
        );
        assert!(parse("10").unwrap_err().contains("has no unit"));
    }

    #[test]
    fn shows_briefly() {
        assert_eq!(show(Duration::from_millis(850)), "850ms");
        assert_eq!(show(Duration::from_millis(27_340)), "27.3s");
        assert_eq!(show(Duration::from_secs(245)), "4m05s");
        assert_eq!(show(Duration::from_secs(7800)), "2h10m");
    }
}
