//! A JSON number from a server, read as the MCP schema types its field.
//!
//! The schema's `integer` is a value, not a spelling: JSON Schema counts
//! any number whose fractional part is zero as an integer, so `60000`,
//! `60000.0` (how Python's `json` writes a float) and `6e4` are the same
//! integer, and `60000.5` is none. Its `number` is any JSON number. Every
//! number the checker reads from a server goes through [`read`], so that
//! no check fails a server for how it spells a number, and every check
//! reports a fractional value where an integer is owed.

use std::fmt;

use serde_json::{Number, Value};

/// A schema type a JSON number is read as: `i64` for `integer`, `f64` for
/// `number`.
pub(crate) trait SchemaType: Sized {
    /// What a report says a value that is not one is not.
    const NAME: &'static str;

    /// `n` as this type, or why it is not one.
    fn of(n: &Number) -> Result<Self, Why>;
}

/// Why a JSON number is not of the type asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// Not a number at all, or not integral where an integer is owed.
    Not,
    /// Integral, but past what the checker holds (an `i64`).
    OutOfRange,
}

/// The schema's `integer`: any number whose value is integral.
impl SchemaType for i64 {
    const NAME: &'static str = "an integer";

    fn of(n: &Number) -> Result<Self, Why> {
        if let Some(i) = n.as_i64() {
            return Ok(i);
        }
        if n.is_u64() {
            return Err(Why::OutOfRange);
        }
        // 2^63: the first integral f64 outside i64.
        const LIMIT: f64 = 9_223_372_036_854_775_808.0;
        match n.as_f64() {
            Some(f) if f.fract() != 0.0 || !f.is_finite() => Err(Why::Not),
            Some(f) if (-LIMIT..LIMIT).contains(&f) => Ok(f as i64),
            Some(_) => Err(Why::OutOfRange),
            None => Err(Why::Not),
        }
    }
}

/// The schema's `number`: any JSON number.
impl SchemaType for f64 {
    const NAME: &'static str = "a number";

    fn of(n: &Number) -> Result<Self, Why> {
        n.as_f64().ok_or(Why::Not)
    }
}

/// A value that is not of its field's schema type: what it is, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The value, as the report shows it.
    found: String,
    /// The type's name (`SchemaType::NAME`).
    wanted: &'static str,
    /// Why it is not one.
    why: Why,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.why {
            Why::Not => write!(f, "{} is not {}", self.found, self.wanted),
            Why::OutOfRange => write!(
                f,
                "{} is {} past what the checker holds (64 bits)",
                self.found, self.wanted
            ),
        }
    }
}

/// `v` read as the schema type `T` (`i64` for the schema's `integer`,
/// `f64` for its `number`).
pub(crate) fn read<T: SchemaType>(v: &Value) -> Result<T, Mismatch> {
    let why = match v {
        Value::Number(n) => match T::of(n) {
            Ok(t) => return Ok(t),
            Err(why) => why,
        },
        _ => Why::Not,
    };
    Err(Mismatch {
        found: crate::report::short(v),
        wanted: T::NAME,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `text` parsed as JSON, so that each spelling is the wire's.
    fn wire(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn an_integer_is_any_integral_number_however_written() {
        for text in ["60000", "60000.0", "6e4", "6E+4", "600000e-1", "60000.000"] {
            assert_eq!(read::<i64>(&wire(text)), Ok(60_000), "{text}");
        }
        for text in ["-32602", "-32602.0", "-3.2602e4"] {
            assert_eq!(read::<i64>(&wire(text)), Ok(-32_602), "{text}");
        }
        assert_eq!(read::<i64>(&wire("0.0")), Ok(0));
        assert_eq!(read::<i64>(&wire("-0.0")), Ok(0));
        assert_eq!(read::<i64>(&json!(i64::MAX)), Ok(i64::MAX));
        assert_eq!(read::<i64>(&json!(i64::MIN)), Ok(i64::MIN));
    }

    #[test]
    fn a_fraction_or_a_non_number_is_no_integer() {
        for (v, says) in [
            (wire("60000.5"), "60000.5 is not an integer"),
            (wire("1e-3"), "0.001 is not an integer"),
            (json!("60000"), "\"60000\" is not an integer"),
            (json!(true), "true is not an integer"),
            (json!(null), "null is not an integer"),
            (json!([1]), "[1] is not an integer"),
        ] {
            assert_eq!(read::<i64>(&v).unwrap_err().to_string(), says);
        }
    }

    #[test]
    fn an_integer_past_64_bits_is_said_to_be_one() {
        for v in [
            json!(u64::MAX),
            wire("1e300"),
            wire("9223372036854775808.0"),
        ] {
            let e = read::<i64>(&v).unwrap_err();
            assert_eq!(e.why, Why::OutOfRange, "{v}");
            assert!(e.to_string().contains("is an integer past"), "{e}");
        }
    }

    #[test]
    fn a_number_is_any_json_number() {
        for (text, n) in [("2", 2.0), ("2.0", 2.0), ("2.5", 2.5), ("-1e2", -100.0)] {
            assert_eq!(read::<f64>(&wire(text)), Ok(n), "{text}");
        }
        assert_eq!(read::<f64>(&json!(u64::MAX)), Ok(u64::MAX as f64));
        let e = read::<f64>(&json!("2")).unwrap_err();
        assert_eq!(e.to_string(), "\"2\" is not a number");
    }
}
