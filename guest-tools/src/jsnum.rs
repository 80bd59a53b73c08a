//! Numbers printed the way JavaScript prints them.
//!
//! The original tools are TypeScript, so every number that reaches the model (`got -5`,
//! `[timed out after 100ms]`, `120000 ms`) must read exactly like `String(x)` or
//! `JSON.stringify(x)`: integers without `.0`, `-0` as `0`, and JavaScript's exponent forms
//! (`1e+21`, `1e-7`).

/// `Number.prototype.toString()` (radix 10) of `x`.
pub fn to_js_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x == 0.0 {
        // Covers -0 too, which JavaScript prints as "0".
        return "0".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // Rust's `{:e}` yields the shortest digits that round-trip, as ECMAScript requires;
    // only the layout around them differs.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    // ECMAScript's `n`: the decimal point sits after `n` digits.
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        // Here `exponent` is ECMAScript's `n - 1`.
        let exp_sign = if exponent >= 0 { "+" } else { "-" };
        format!("{first}{point}e{exp_sign}{}", exponent.abs())
    };
    format!("{sign}{body}")
}

/// `JSON.stringify(x)`: like `toString`, but `null` for NaN and the infinities.
pub fn to_js_json(x: f64) -> String {
    if x.is_finite() {
        to_js_string(x)
    } else {
        "null".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_have_no_fraction() {
        assert_eq!(to_js_string(0.0), "0");
        assert_eq!(to_js_string(1.0), "1");
        assert_eq!(to_js_string(100.0), "100");
        assert_eq!(to_js_string(120000.0), "120000");
        assert_eq!(to_js_string(-5.0), "-5");
        assert_eq!(to_js_string(9007199254740992.0), "9007199254740992");
    }

    #[test]
    fn negative_zero_is_zero() {
        assert_eq!(to_js_string(-0.0), "0");
        assert_eq!(to_js_json(-0.0), "0");
    }

    #[test]
    fn fractions() {
        assert_eq!(to_js_string(1.5), "1.5");
        assert_eq!(to_js_string(-2.25), "-2.25");
        assert_eq!(to_js_string(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(to_js_string(0.5), "0.5");
        assert_eq!(to_js_string(123.456), "123.456");
    }

    #[test]
    fn small_numbers_switch_to_exponent_below_1e_6() {
        assert_eq!(to_js_string(0.000001), "0.000001");
        assert_eq!(to_js_string(0.0000015), "0.0000015");
        assert_eq!(to_js_string(1e-7), "1e-7");
        assert_eq!(to_js_string(-1.5e-7), "-1.5e-7");
        assert_eq!(to_js_string(5e-324), "5e-324");
    }

    #[test]
    fn large_numbers_switch_to_exponent_from_1e21() {
        assert_eq!(to_js_string(1e20), "100000000000000000000");
        assert_eq!(
            to_js_string(123456789012345680000.0),
            "123456789012345680000"
        );
        assert_eq!(to_js_string(1e21), "1e+21");
        assert_eq!(to_js_string(1.23e22), "1.23e+22");
        assert_eq!(to_js_string(-1e21), "-1e+21");
        assert_eq!(to_js_string(f64::MAX), "1.7976931348623157e+308");
    }

    #[test]
    fn non_finite() {
        assert_eq!(to_js_string(f64::NAN), "NaN");
        assert_eq!(to_js_string(f64::INFINITY), "Infinity");
        assert_eq!(to_js_string(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(to_js_json(f64::NAN), "null");
        assert_eq!(to_js_json(f64::INFINITY), "null");
        assert_eq!(to_js_json(-1e-7), "-1e-7");
    }
}
