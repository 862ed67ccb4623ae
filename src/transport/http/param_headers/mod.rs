//! `x-mcp-header`: tool parameters mirrored into `Mcp-Param-{Name}` headers.
//!
//! A server may annotate properties of a tool's `inputSchema` with
//! `"x-mcp-header": "Region"`; a Streamable HTTP client then sends the
//! argument's value in `Mcp-Param-Region` (with the Base64 sentinel encoding
//! when it is not plain ASCII), and the server checks the header against the
//! body. [`ParamHeaders`] is what one tool's schema declares, parsed and
//! validated against every constraint of the spec; [`ToolHeaderMap`] holds
//! them per tool name, for [`HttpClient`](super::HttpClient) (which learns
//! them from `tools/list`) and [`StreamableHttpService`](super::StreamableHttpService)
//! (which is told them).
//!
//! ```
//! use serde_json::json;
//! use tower_mcp_cancel::transport::http::param_headers::{InvalidReason, ParamHeaders};
//!
//! let schema = json!({
//!     "type": "object",
//!     "properties": {
//!         "region": {"type": "string", "x-mcp-header": "Region"},
//!         "query": {"type": "string"}
//!     }
//! });
//! let headers = ParamHeaders::from_input_schema(&schema).unwrap();
//! let out = headers.headers_for(Some(&json!({"region": "us-west1", "query": "SELECT 1"}))).unwrap();
//! assert_eq!(out[0].0.as_str(), "mcp-param-region");
//! assert_eq!(out[0].1, "us-west1");
//!
//! // An annotation under `items` (not statically reachable) invalidates the tool.
//! let bad = json!({"type": "object", "properties": {"list": {"type": "array",
//!     "items": {"type": "string", "x-mcp-header": "Item"}}}});
//! let err = ParamHeaders::from_input_schema(&bad).unwrap_err();
//! assert!(matches!(err.reason(), InvalidReason::NotStaticallyReachable { keyword } if keyword == "items"));
//! ```
//!
//! Choices where the spec leaves room, each on the strict side:
//! * `type` must be `"string"`, `"integer"` or `"boolean"`, or a list of one
//!   of those and `"null"` (a nullable parameter: `null` omits the header);
//!   a missing `type` is rejected like `"number"`.
//! * Values are converted by their JSON type (string as-is, integer in
//!   decimal, boolean `true`/`false`); a number with a fraction, an integer
//!   outside ±(2<sup>53</sup>−1), an object or an array cannot be mirrored:
//!   the client refuses to send it, the server answers `HeaderMismatch`.
//! * The server rejects a header that has no value in the body (absent or
//!   `null`) and a header sent more than once: both are a header that does
//!   not match the body.

//!
//! Inside: `schema` reads the annotations out of a schema, `value` turns
//! argument values into header values and back, `tools` keeps them per
//! tool, `error` holds the errors.

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::headers::{decode_header_value, MCP_PARAM_HEADER_PREFIX};
use crate::cancel::sanitize_reason;
use value::{header_matches, header_string};

mod error;
mod schema;
mod tools;
mod value;

pub use error::{InvalidParamHeader, InvalidReason, ParamHeaderMismatch, UnmirrorableValue};
pub use tools::{RejectedTool, ToolHeaderMap};

/// The annotation keyword.
pub const X_MCP_HEADER: &str = "x-mcp-header";

/// The largest integer a mirrored parameter may carry (2<sup>53</sup>−1);
/// the smallest is its negation.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The primitive type of a mirrored parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// `"type": "string"`.
    String,
    /// `"type": "integer"`: compared numerically by the server.
    Integer,
    /// `"type": "boolean"`.
    Boolean,
}

/// One `x-mcp-header` annotation of a tool's `inputSchema`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    pub(super) name: String,
    pub(super) header: HeaderName,
    pub(super) path: Vec<String>,
    pub(super) kind: ParamKind,
}

impl ParamHeader {
    /// The annotation's value as written (`Region`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header it designates (`mcp-param-region`; header names are
    /// case-insensitive).
    pub fn header_name(&self) -> &HeaderName {
        &self.header
    }

    /// The chain of `properties` keys from the schema root to the property.
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// The declared type.
    pub fn kind(&self) -> ParamKind {
        self.kind
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
        sanitize_reason(&s)
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
    fn check(&self, headers: &HeaderMap, arguments: Option<&Value>) -> Result<(), String> {
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
                    sanitize_reason(&decoded),
                    sanitize_reason(&shown)
                ))
            }
            Err(why) => Err(format!(
                "Header mismatch: {} cannot be mirrored into {name}: {why}",
                self.display_path()
            )),
        }
    }
}

/// The `x-mcp-header` annotations of one tool, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamHeaders {
    params: Vec<ParamHeader>,
}

impl ParamHeaders {
    /// Parses and validates the `x-mcp-header` annotations of a tool's
    /// `inputSchema` (no annotations: an empty set).
    pub fn from_input_schema(schema: &Value) -> Result<Self, InvalidParamHeader> {
        Ok(Self {
            params: schema::annotations(schema)?,
        })
    }

    /// The annotations.
    pub fn iter(&self) -> impl Iterator<Item = &ParamHeader> {
        self.params.iter()
    }

    /// How many annotations.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether the tool mirrors nothing.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The client side: the `Mcp-Param-*` headers for a call with these
    /// `arguments`, one per annotated parameter with a present, non-null
    /// value, encoded per the spec (Base64 sentinel when needed).
    pub fn headers_for(
        &self,
        arguments: Option<&Value>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, UnmirrorableValue> {
        let mut out = Vec::new();
        for p in &self.params {
            let Some(value) = p.value_in(arguments) else {
                continue;
            };
            let unmirrorable = |why| UnmirrorableValue {
                header: p.display_header(),
                path: p.display_path(),
                why,
            };
            let Some(s) = header_string(value).map_err(unmirrorable)? else {
                continue;
            };
            // encode_header_value leaves only visible ASCII and inner spaces.
            let v = HeaderValue::from_str(&s).map_err(|_| unmirrorable("not a header value"))?;
            out.push((p.header.clone(), v));
        }
        Ok(out)
    }

    /// The server side: checks the request's `Mcp-Param-*` headers against
    /// the body `arguments`. The error names the header; the server answers
    /// it with `HeaderMismatch`. Headers of parameters this tool does not
    /// annotate are ignored.
    pub fn check(
        &self,
        headers: &HeaderMap,
        arguments: Option<&Value>,
    ) -> Result<(), ParamHeaderMismatch> {
        for p in &self.params {
            p.check(headers, arguments)
                .map_err(|message| ParamHeaderMismatch {
                    header: p.display_header(),
                    message,
                })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
