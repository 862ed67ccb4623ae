//! [`RequestId`] and [`ProgressToken`]: a string or an integer, never null;
//! `"1"` and `1` are different values.

use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

macro_rules! string_or_integer {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            /// An integer value.
            Number(i64),
            /// A string value. `"1"` is a different value from the integer `1`.
            String(Arc<str>),
        }

        impl From<i64> for $name {
            fn from(n: i64) -> Self {
                Self::Number(n)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::String(s.into())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self::String(s.into())
            }
        }

        /// Formats the value as JSON: strings quoted, integers bare, so that
        /// `"1"` and `1` stay distinguishable in logs. A string goes through
        /// the crate's sanitizer like any text from the wire: bounded (a longer one is cut, marked with `…`)
        /// and without control characters, so a value from the wire can
        /// neither break nor flood a log line.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    Self::Number(n) => write!(f, "{n}"),
                    Self::String(s) => {
                        // Only what can be shown is encoded.
                        let shown = match s.char_indices().nth(crate::sanitize::MAX_CHARS) {
                            Some((end, _)) => &s[..end],
                            None => s,
                        };
                        let json = serde_json::Value::from(shown).to_string();
                        f.write_str(&crate::sanitize::for_log(&json))
                    }
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    Self::Number(n) => s.serialize_i64(*n),
                    Self::String(v) => s.serialize_str(v),
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                        Ok($name::Number(v))
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                        i64::try_from(v)
                            .map($name::Number)
                            .map_err(|_| E::custom(concat!($what, " out of range")))
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                        // `42.0` is an integer written as a float; anything fractional is not.
                        if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
                            Ok($name::Number(v as i64))
                        } else {
                            Err(E::custom(concat!($what, " must be a string or an integer")))
                        }
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                        Ok($name::String(v.into()))
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

string_or_integer!(
    /// A JSON-RPC request id: a string or an integer, never null.
    ///
    /// `"1"` and `1` are different ids: they compare and hash differently.
    /// `0` is an ordinary id.
    RequestId,
    "a request id (string or integer)"
);

string_or_integer!(
    /// A progress token (`params._meta.progressToken`): a string or an integer.
    ProgressToken,
    "a progress token (string or integer)"
);
