//! Reading the `x-mcp-header` annotations out of a tool's `inputSchema`,
//! with every constraint of the spec: a token name, unique without regard
//! to case, on a property reachable through `properties` keys only, of a
//! primitive type.

use std::collections::HashMap;

use http::HeaderName;
use serde_json::Value;

use super::error::{InvalidParamHeader, InvalidReason};
use super::param::{ParamHeader, ParamKind};
use crate::sanitize::for_log;

/// The annotation keyword.
pub(crate) const X_MCP_HEADER: &str = "x-mcp-header";

/// The annotations of `schema`, in schema order, or the first invalid one.
pub(super) fn annotations(schema: &Value) -> Result<Vec<ParamHeader>, InvalidParamHeader> {
    let mut walk = Walk {
        params: Vec::new(),
        seen: HashMap::new(),
    };
    walk.schema(schema, "", Ok(&[]))?;
    Ok(walk.params)
}

/// Keywords whose values are data, not subschemas: an `x-mcp-header` key
/// inside them is not an annotation.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples", "example"];

fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

struct Walk {
    params: Vec<ParamHeader>,
    seen: HashMap<String, String>,
}

impl Walk {
    /// `reachable` is the property path when every step so far was a
    /// `properties` key, or the first other keyword on the way.
    fn schema(
        &mut self,
        node: &Value,
        pointer: &str,
        reachable: Result<&[String], &str>,
    ) -> Result<(), InvalidParamHeader> {
        let Value::Object(obj) = node else {
            if let Value::Array(items) = node {
                for (i, item) in items.iter().enumerate() {
                    self.schema(item, &format!("{pointer}/{i}"), reachable)?;
                }
            }
            return Ok(());
        };
        if let Some(annotation) = obj.get(X_MCP_HEADER) {
            let param = self
                .annotation(annotation, obj.get("type"), reachable)
                .map_err(|reason| InvalidParamHeader {
                    pointer: pointer.to_owned(),
                    reason,
                })?;
            self.params.push(param);
        }
        for (key, value) in obj {
            let here = format!("{pointer}/{}", pointer_escape(key));
            if key == X_MCP_HEADER || DATA_KEYWORDS.contains(&key.as_str()) {
                continue;
            }
            if key == "properties" {
                let Value::Object(props) = value else {
                    continue;
                };
                for (name, sub) in props {
                    let sub_pointer = format!("{here}/{}", pointer_escape(name));
                    match reachable {
                        Ok(path) => {
                            let mut path = path.to_vec();
                            path.push(name.clone());
                            self.schema(sub, &sub_pointer, Ok(&path))?;
                        }
                        Err(kw) => self.schema(sub, &sub_pointer, Err(kw))?,
                    }
                }
                continue;
            }
            // Any other keyword: whatever schemas it holds (a subschema, an
            // array of them, a name → subschema map) are off the chain.
            let keyword = match reachable {
                Ok(_) => key.as_str(),
                Err(kw) => kw,
            };
            if value.is_object() || value.is_array() {
                self.schema(value, &here, Err(keyword))?;
            }
        }
        Ok(())
    }

    /// One annotation, `value`, on a property of type `ty` at `reachable`.
    fn annotation(
        &mut self,
        value: &Value,
        ty: Option<&Value>,
        reachable: Result<&[String], &str>,
    ) -> Result<ParamHeader, InvalidReason> {
        let path = match reachable {
            Ok([]) => {
                return Err(InvalidReason::NotStaticallyReachable {
                    keyword: "<root>".into(),
                })
            }
            Ok(path) => path,
            Err(keyword) => {
                return Err(InvalidReason::NotStaticallyReachable {
                    keyword: keyword.to_owned(),
                })
            }
        };
        let name = value.as_str().ok_or(InvalidReason::NotAString)?;
        if name.is_empty() {
            return Err(InvalidReason::Empty);
        }
        if name.chars().any(char::is_control) {
            return Err(InvalidReason::ControlCharacter);
        }
        if let Some(c) = name.chars().find(|c| !is_tchar(*c)) {
            return Err(InvalidReason::NotAToken(c));
        }
        let kind = kind_of(ty)?;
        let lower = name.to_ascii_lowercase();
        if let Some(first) = self.seen.get(&lower) {
            return Err(InvalidReason::Duplicate {
                first: first.clone(),
                second: name.to_owned(),
            });
        }
        // Every tchar is a valid header-name byte.
        let header = HeaderName::from_bytes(format!("mcp-param-{lower}").as_bytes())
            .map_err(|_| InvalidReason::NotAToken('?'))?;
        self.seen.insert(lower, name.to_owned());
        Ok(ParamHeader {
            name: name.to_owned(),
            header,
            path: path.to_vec(),
            kind,
        })
    }
}

fn kind_of(ty: Option<&Value>) -> Result<ParamKind, InvalidReason> {
    let one = |t: &str| match t {
        "string" => Ok(ParamKind::String),
        "integer" => Ok(ParamKind::Integer),
        "boolean" => Ok(ParamKind::Boolean),
        "number" => Err(InvalidReason::NumberType),
        other => Err(InvalidReason::UnsupportedType(for_log(other))),
    };
    match ty {
        Some(Value::String(t)) => one(t),
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            let non_null: Vec<&str> = named.iter().copied().filter(|t| *t != "null").collect();
            if named.len() == types.len() && non_null.len() == 1 && named.len() <= 2 {
                one(non_null[0])
            } else if non_null.contains(&"number") {
                Err(InvalidReason::NumberType)
            } else {
                Err(InvalidReason::UnsupportedType(for_log(
                    &Value::Array(types.clone()).to_string(),
                )))
            }
        }
        Some(other) => Err(InvalidReason::UnsupportedType(for_log(&other.to_string()))),
        None => Err(InvalidReason::UnsupportedType("not declared".into())),
    }
}
