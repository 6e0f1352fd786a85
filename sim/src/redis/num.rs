//! Numbers as Redis reads and writes them.

/// Parses an integer the way Redis's `string2ll` does: optional `-`, no `+`, no spaces, no
/// leading zeros, no overflow.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') || s == "-0" {
        return None;
    }
    s.parse().ok()
}

/// Parses a score the way Redis's `strtod`-based parsing does (`inf`, `-inf`, `+inf`, no
/// spaces, no NaN).
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => s.parse::<f64>().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// Formats a double as C's `%.17g`, which Redis 7.0 uses for scores and for numbers a script
/// passes to `redis.call`.
pub fn fmt_g17(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // 17 significant digits: one before the point, 16 after, in scientific form first.
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("the exponent is a number");
    if !(-4..17).contains(&exp) {
        let m = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (16 - exp).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

/// Drops trailing zeros after a decimal point, and the point if nothing follows it.
fn trim_zeros(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_i64(b"12"), Some(12));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        for bad in [
            &b"+1"[..],
            b" 1",
            b"01",
            b"-0",
            b"",
            b"-",
            b"1.0",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn doubles_format_like_printf_g17() {
        assert_eq!(fmt_g17(1.5), "1.5");
        assert_eq!(fmt_g17(3.0), "3");
        assert_eq!(fmt_g17(0.1), "0.10000000000000001");
        assert_eq!(fmt_g17(-2.25), "-2.25");
        assert_eq!(fmt_g17(1e20), "1e+20");
        assert_eq!(fmt_g17(1e-5), "1.0000000000000001e-05");
        assert_eq!(fmt_g17(123456.0), "123456");
        assert_eq!(fmt_g17(f64::NEG_INFINITY), "-inf");
    }
}
