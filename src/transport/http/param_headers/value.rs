//! Argument values as header values: by their JSON type, integers within
//! ±(2<sup>53</sup>−1), compared numerically.

use serde_json::Value;

use crate::transport::http::headers::encode_header_value;

/// The largest integer a mirrored parameter may carry (2<sup>53</sup>−1);
/// the smallest is its negation.
pub(crate) const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A value's header form, by its JSON type; `Ok(None)` for `null`.
pub(super) fn header_string(value: &Value) -> Result<Option<String>, &'static str> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(encode_header_value(s))),
        Value::Bool(b) => Ok(Some(if *b { "true" } else { "false" }.to_owned())),
        Value::Number(n) => safe_integer(n).map(|i| Some(i.to_string())),
        Value::Array(_) | Value::Object(_) => Err("arrays and objects cannot be mirrored"),
    }
}

fn safe_integer(n: &serde_json::Number) -> Result<i64, &'static str> {
    const OUT: &str = "integers must be within ±(2^53−1)";
    if let Some(i) = n.as_i64() {
        return if i.abs() <= MAX_SAFE_INTEGER {
            Ok(i)
        } else {
            Err(OUT)
        };
    }
    if n.as_u64().is_some() {
        return Err(OUT);
    }
    match n.as_f64() {
        Some(f) if f.is_finite() && f.fract() == 0.0 => {
            if f.abs() <= MAX_SAFE_INTEGER as f64 {
                Ok(f as i64)
            } else {
                Err(OUT)
            }
        }
        _ => Err("a number with a fraction is not an integer"),
    }
}

/// Whether a decoded header value equals the integer `body` numerically
/// (`42`, `42.0`, `4.2e1` all equal 42).
fn header_equals_integer(header: &str, body: i64) -> bool {
    let h = header.trim();
    if let Ok(i) = h.parse::<i64>() {
        return i == body;
    }
    match h.parse::<f64>() {
        // Within ±2^53 every integer is exact in f64.
        Ok(f) if f.is_finite() => f == body as f64,
        _ => false,
    }
}

/// Whether a decoded header value equals the body value, by the body
/// value's JSON type; `Err` says why the body value cannot be mirrored.
pub(super) fn header_matches(decoded: &str, body: &Value) -> Result<bool, &'static str> {
    match body {
        Value::String(s) => Ok(s == decoded),
        Value::Bool(b) => Ok(decoded == if *b { "true" } else { "false" }),
        Value::Number(n) => safe_integer(n).map(|i| header_equals_integer(decoded, i)),
        _ => Err("arrays and objects cannot be mirrored"),
    }
}
