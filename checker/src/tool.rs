//! The operations the user names: `"<tool> [key=value…]"`, as `mcp_call`
//! takes them (a value that parses as JSON is JSON, else a string).

use serde_json::{Map, Value};

/// A tool and its arguments.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolSpec {
    /// The tool's name.
    pub(crate) name: String,
    /// Its arguments.
    pub(crate) arguments: Map<String, Value>,
}

impl ToolSpec {
    /// Parses `"<tool> [key=value…]"` (words split on whitespace).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut words = text.split_whitespace();
        let name = match words.next() {
            Some(n) if !n.contains('=') => n.to_owned(),
            Some(n) => return Err(format!("{text:?}: the tool name comes first, not {n:?}")),
            None => return Err("empty tool: expected \"<tool> [key=value…]\"".into()),
        };
        let mut arguments = Map::new();
        for pair in words {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(format!("{text:?}: expected key=value, found {pair:?}"));
            };
            if k.is_empty() {
                return Err(format!("{text:?}: empty key in {pair:?}"));
            }
            let v = serde_json::from_str(v).unwrap_or_else(|_| Value::from(v));
            arguments.insert(k.to_owned(), v);
        }
        Ok(Self { name, arguments })
    }

    /// The `tools/call` params (without `_meta`).
    pub(crate) fn params(&self) -> Value {
        serde_json::json!({ "name": self.name, "arguments": self.arguments })
    }
}

impl std::fmt::Display for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        for (k, v) in &self.arguments {
            match v {
                Value::String(s) => write!(f, " {k}={s}")?,
                v => write!(f, " {k}={v}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_and_typed_arguments() {
        let t = ToolSpec::parse("slow seconds=1.5 interval_ms=50 text=hi flag=true").unwrap();
        assert_eq!(t.name, "slow");
        assert_eq!(
            Value::Object(t.arguments.clone()),
            json!({"seconds": 1.5, "interval_ms": 50, "text": "hi", "flag": true})
        );
        // Displayed in the same form (key order is serde_json's map order).
        assert_eq!(ToolSpec::parse(&t.to_string()).unwrap(), t);
    }

    #[test]
    fn bare_name() {
        let t = ToolSpec::parse("  spin ").unwrap();
        assert_eq!(t.name, "spin");
        assert!(t.arguments.is_empty());
    }

    #[test]
    fn bad_forms_are_errors() {
        assert!(ToolSpec::parse("").is_err());
        assert!(ToolSpec::parse("seconds=3").is_err());
        assert!(ToolSpec::parse("slow seconds").is_err());
        assert!(ToolSpec::parse("slow =3").is_err());
    }
}
