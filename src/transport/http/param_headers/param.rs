//! [`ParamHeader`]: one `x-mcp-header` annotation — the header it
//! designates, where its value sits in the arguments, its type — and the
//! server's check of that header against the body.

use http::{HeaderMap, HeaderName};
use serde_json::Value;

use super::value::header_matches;
use crate::sanitize::for_log;
use crate::transport::http::headers::{decode_header_value, MCP_PARAM_HEADER_PREFIX};

/// The primitive type of a mirrored parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamKind {
    /// `"type": "string"`.
    String,
    /// `"type": "integer"`: compared numerically by the server.
    Integer,
    /// `"type": "boolean"`.
    Boolean,
}

/// One `x-mcp-header` annotation of a tool's `inputSchema`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamHeader {
    pub(super) name: String,
    pub(super) header: HeaderName,
    pub(super) path: Vec<String>,
    pub(super) kind: ParamKind,
}

impl ParamHeader {
    /// The annotation's value as written (`Region`).
    #[cfg(test)]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The header it designates (`mcp-param-region`; header names are
    /// case-insensitive).
    pub(crate) fn header_name(&self) -> &HeaderName {
        &self.header
    }

    /// The chain of `properties` keys from the schema root to the property.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &[String] {
        &self.path
    }

    /// `Mcp-Param-Region`, for messages.
    pub(super) fn display_header(&self) -> String {
        format!("{MCP_PARAM_HEADER_PREFIX}{}", self.name)
    }

    /// `arguments.a.b`, for messages.
    pub(super) fn display_path(&self) -> String {
        let mut s = String::from("arguments");
        for p in &self.path {
            s.push('.');
            s.push_str(p);
        }
        for_log(&s)
    }

    /// The value at the path in `arguments`, when present.
    pub(super) fn value_in<'a>(&self, arguments: Option<&'a Value>) -> Option<&'a Value> {
        let mut cur = arguments?;
        for key in &self.path {
            cur = cur.as_object()?.get(key)?;
        }
        Some(cur)
    }
    /// Checks this parameter's header against the body: `Err` is the
    /// `HeaderMismatch` message.
    pub(super) fn check(
        &self,
        headers: &HeaderMap,
        arguments: Option<&Value>,
    ) -> Result<(), String> {
        let name = self.display_header();
        let mut values = headers.get_all(&self.header).iter();
        let raw = values.next();
        if values.next().is_some() {
            return Err(format!(
                "Header mismatch: the {name} header appears more than once"
            ));
        }
        let body = self.value_in(arguments).filter(|v| !v.is_null());
        let (raw, body) = match (raw, body) {
            (None, None) => return Ok(()),
            (None, Some(_)) => {
                return Err(format!(
                    "Header mismatch: the {name} header is missing but {} has a value in the body",
                    self.display_path()
                ))
            }
            (Some(_), None) => {
                return Err(format!(
                    "Header mismatch: the {name} header is present but {} has no value in the body",
                    self.display_path()
                ))
            }
            (Some(raw), Some(body)) => (raw, body),
        };
        let Ok(raw) = raw.to_str() else {
            return Err(format!(
                "Header mismatch: the {name} header contains invalid characters"
            ));
        };
        let Some(decoded) = decode_header_value(raw) else {
            return Err(format!(
                "Header mismatch: the {name} header has a malformed Base64 value"
            ));
        };
        match header_matches(&decoded, body) {
            Ok(true) => Ok(()),
            Ok(false) => {
                let shown = match body {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Err(format!(
                    "Header mismatch: {name} header value '{}' does not match body value '{}'",
                    for_log(&decoded),
                    for_log(&shown)
                ))
            }
            Err(why) => Err(format!(
                "Header mismatch: {} cannot be mirrored into {name}: {why}",
                self.display_path()
            )),
        }
    }
}
