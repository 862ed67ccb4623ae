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

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::validation::{decode_header_value, encode_header_value};
use crate::cancel::sanitize_reason;

/// The annotation keyword.
pub const X_MCP_HEADER: &str = "x-mcp-header";
/// The prefix of the mirrored headers, as the spec writes it.
pub const PARAM_HEADER_PREFIX: &str = "Mcp-Param-";

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
    name: String,
    header: HeaderName,
    path: Vec<String>,
    kind: ParamKind,
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
    fn display_header(&self) -> String {
        format!("{PARAM_HEADER_PREFIX}{}", self.name)
    }

    /// `arguments.a.b`, for messages.
    fn display_path(&self) -> String {
        let mut s = String::from("arguments");
        for p in &self.path {
            s.push('.');
            s.push_str(p);
        }
        sanitize_reason(&s)
    }

    /// The value at the path in `arguments`, when present.
    fn value_in<'a>(&self, arguments: Option<&'a Value>) -> Option<&'a Value> {
        let mut cur = arguments?;
        for key in &self.path {
            cur = cur.as_object()?.get(key)?;
        }
        Some(cur)
    }
}

/// Why an `x-mcp-header` annotation (and so its tool) is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidReason {
    /// The annotation's value is not a string.
    NotAString,
    /// The annotation's value is empty.
    Empty,
    /// The annotation's value contains a control character (CR, LF, …).
    ControlCharacter,
    /// The annotation's value has a character outside the RFC 9110 `tchar` set.
    NotAToken(char),
    /// Two annotations of the schema differ only in case (or are equal).
    Duplicate {
        /// The annotation seen first.
        first: String,
        /// The annotation that repeats it.
        second: String,
    },
    /// The annotated property has `"type": "number"`, which is not permitted.
    NumberType,
    /// The annotated property's type is not integer, string or boolean (or
    /// it declares no type).
    UnsupportedType(String),
    /// The annotation is not on a property reachable from the root through
    /// `properties` keys only: `keyword` is the first other keyword on the
    /// way (`items`, `oneOf`, `$ref`, `$defs`, …), or `<root>` for an
    /// annotation on the schema root itself.
    NotStaticallyReachable {
        /// The keyword that breaks the chain.
        keyword: String,
    },
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidReason::NotAString => f.write_str("the x-mcp-header value must be a string"),
            InvalidReason::Empty => f.write_str("the x-mcp-header value must not be empty"),
            InvalidReason::ControlCharacter => {
                f.write_str("the x-mcp-header value must not contain control characters")
            }
            InvalidReason::NotAToken(c) => write!(
                f,
                "the x-mcp-header value must be an RFC 9110 token; {c:?} is not allowed"
            ),
            InvalidReason::Duplicate { first, second } => write!(
                f,
                "x-mcp-header {second:?} is not case-insensitively unique (also declared as {first:?})"
            ),
            InvalidReason::NumberType => {
                f.write_str("x-mcp-header is not permitted on a parameter of type number")
            }
            InvalidReason::UnsupportedType(t) => write!(
                f,
                "x-mcp-header is only permitted on integer, string or boolean parameters (type is {t})"
            ),
            InvalidReason::NotStaticallyReachable { keyword } if keyword == "<root>" => {
                f.write_str("x-mcp-header on the schema root (it must be on a property)")
            }
            InvalidReason::NotStaticallyReachable { keyword } => write!(
                f,
                "x-mcp-header is only permitted on properties reachable through `properties` keys; this one is under `{keyword}`"
            ),
        }
    }
}

/// An invalid `x-mcp-header` annotation: where it is and why it is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidParamHeader {
    pointer: String,
    reason: InvalidReason,
}

impl InvalidParamHeader {
    /// The JSON pointer of the annotated schema inside the `inputSchema`.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Why it is invalid.
    pub fn reason(&self) -> &InvalidReason {
        &self.reason
    }
}

impl fmt::Display for InvalidParamHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(f, "{} (at inputSchema {at})", self.reason)
    }
}

impl std::error::Error for InvalidParamHeader {}

/// An argument value that cannot be mirrored into its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnmirrorableValue {
    header: String,
    path: String,
    why: &'static str,
}

impl fmt::Display for UnmirrorableValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cannot be mirrored into {}: {}",
            self.path, self.header, self.why
        )
    }
}

impl std::error::Error for UnmirrorableValue {}

/// The `x-mcp-header` annotations of one tool, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamHeaders {
    params: Vec<ParamHeader>,
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
        let invalid = |reason| InvalidParamHeader {
            pointer: pointer.to_owned(),
            reason,
        };
        if let Some(annotation) = obj.get(X_MCP_HEADER) {
            let path = match reachable {
                Ok([]) => {
                    return Err(invalid(InvalidReason::NotStaticallyReachable {
                        keyword: "<root>".into(),
                    }))
                }
                Ok(path) => path,
                Err(keyword) => {
                    return Err(invalid(InvalidReason::NotStaticallyReachable {
                        keyword: keyword.to_owned(),
                    }))
                }
            };
            let name = annotation
                .as_str()
                .ok_or_else(|| invalid(InvalidReason::NotAString))?;
            if name.is_empty() {
                return Err(invalid(InvalidReason::Empty));
            }
            if name.chars().any(char::is_control) {
                return Err(invalid(InvalidReason::ControlCharacter));
            }
            if let Some(c) = name.chars().find(|c| !is_tchar(*c)) {
                return Err(invalid(InvalidReason::NotAToken(c)));
            }
            let kind = kind_of(obj.get("type")).map_err(invalid)?;
            let lower = name.to_ascii_lowercase();
            if let Some(first) = self.seen.get(&lower) {
                return Err(invalid(InvalidReason::Duplicate {
                    first: first.clone(),
                    second: name.to_owned(),
                }));
            }
            // Every tchar is a valid header-name byte.
            let header = HeaderName::from_bytes(format!("mcp-param-{lower}").as_bytes())
                .map_err(|_| invalid(InvalidReason::NotAToken('?')))?;
            self.seen.insert(lower, name.to_owned());
            self.params.push(ParamHeader {
                name: name.to_owned(),
                header,
                path: path.to_vec(),
                kind,
            });
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
}

fn kind_of(ty: Option<&Value>) -> Result<ParamKind, InvalidReason> {
    let one = |t: &str| match t {
        "string" => Ok(ParamKind::String),
        "integer" => Ok(ParamKind::Integer),
        "boolean" => Ok(ParamKind::Boolean),
        "number" => Err(InvalidReason::NumberType),
        other => Err(InvalidReason::UnsupportedType(sanitize_reason(other))),
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
                Err(InvalidReason::UnsupportedType(sanitize_reason(
                    &Value::Array(types.clone()).to_string(),
                )))
            }
        }
        Some(other) => Err(InvalidReason::UnsupportedType(sanitize_reason(
            &other.to_string(),
        ))),
        None => Err(InvalidReason::UnsupportedType("not declared".into())),
    }
}

/// A value's header form, by its JSON type; `Ok(None)` for `null`.
fn header_string(value: &Value) -> Result<Option<String>, &'static str> {
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

impl ParamHeaders {
    /// Parses and validates the `x-mcp-header` annotations of a tool's
    /// `inputSchema` (no annotations: an empty set).
    pub fn from_input_schema(schema: &Value) -> Result<Self, InvalidParamHeader> {
        let mut walk = Walk {
            params: Vec::new(),
            seen: HashMap::new(),
        };
        walk.schema(schema, "", Ok(&[]))?;
        Ok(Self {
            params: walk.params,
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
    /// the body `arguments`. `Err` is the `HeaderMismatch` message (naming
    /// the header). Headers of parameters this tool does not annotate are
    /// ignored.
    pub fn check(&self, headers: &HeaderMap, arguments: Option<&Value>) -> Result<(), String> {
        for p in &self.params {
            let name = p.display_header();
            let mut values = headers.get_all(&p.header).iter();
            let raw = values.next();
            if values.next().is_some() {
                return Err(format!(
                    "Header mismatch: the {name} header appears more than once"
                ));
            }
            let body = p.value_in(arguments).filter(|v| !v.is_null());
            let (raw, body) = match (raw, body) {
                (None, None) => continue,
                (None, Some(_)) => {
                    return Err(format!(
                    "Header mismatch: the {name} header is missing but {} has a value in the body",
                    p.display_path()
                ))
                }
                (Some(_), None) => {
                    return Err(format!(
                    "Header mismatch: the {name} header is present but {} has no value in the body",
                    p.display_path()
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
            let equal = match body {
                Value::String(s) => *s == decoded,
                Value::Bool(b) => decoded == if *b { "true" } else { "false" },
                Value::Number(n) => match safe_integer(n) {
                    Ok(i) => header_equals_integer(&decoded, i),
                    Err(why) => {
                        return Err(format!(
                            "Header mismatch: {} cannot be mirrored into {name}: {why}",
                            p.display_path()
                        ))
                    }
                },
                _ => {
                    return Err(format!(
                        "Header mismatch: {} cannot be mirrored into {name}: arrays and objects cannot be mirrored",
                        p.display_path()
                    ))
                }
            };
            if !equal {
                let shown = match body {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                return Err(format!(
                    "Header mismatch: {name} header value '{}' does not match body value '{}'",
                    sanitize_reason(&decoded),
                    sanitize_reason(&shown)
                ));
            }
        }
        Ok(())
    }
}

/// A tool definition rejected for an invalid `x-mcp-header` annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedTool {
    /// The tool's name (`<unnamed>` when it had none).
    pub name: String,
    /// Why.
    pub error: InvalidParamHeader,
}

/// The `x-mcp-header` annotations of a set of tools, by tool name.
#[derive(Clone, Debug, Default)]
pub struct ToolHeaderMap {
    tools: HashMap<String, Arc<ParamHeaders>>,
}

impl ToolHeaderMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `tool` with its `inputSchema`. An invalid schema is not
    /// registered (and removes what was known of the tool).
    pub fn insert(
        &mut self,
        tool: impl Into<String>,
        input_schema: &Value,
    ) -> Result<(), InvalidParamHeader> {
        let tool = tool.into();
        match ParamHeaders::from_input_schema(input_schema) {
            Ok(h) => {
                self.tools.insert(tool, Arc::new(h));
                Ok(())
            }
            Err(e) => {
                self.tools.remove(&tool);
                Err(e)
            }
        }
    }

    /// [`insert`](Self::insert), chained.
    pub fn with_tool(
        mut self,
        tool: impl Into<String>,
        input_schema: &Value,
    ) -> Result<Self, InvalidParamHeader> {
        self.insert(tool, input_schema)?;
        Ok(self)
    }

    /// The map of a `tools/list` result (`{"tools": [...]}`) or a bare array
    /// of tool definitions, and the tools rejected.
    pub fn from_tools(tools: &Value) -> (Self, Vec<RejectedTool>) {
        let mut map = Self::new();
        let mut copy = tools.clone();
        let rejected = map.learn_tools_list(&mut copy);
        (map, rejected)
    }

    /// Learns from a `tools/list` result (`{"tools": [...]}`, or a bare
    /// array): every valid tool's annotations are recorded (replacing what
    /// was known), every invalid tool is removed from `result` and from the
    /// map, and returned. A tool without an `inputSchema` mirrors nothing.
    pub fn learn_tools_list(&mut self, result: &mut Value) -> Vec<RejectedTool> {
        let list = match result {
            Value::Array(list) => list,
            Value::Object(obj) => match obj.get_mut("tools") {
                Some(Value::Array(list)) => list,
                _ => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        let mut rejected = Vec::new();
        list.retain(|tool| {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                // Not a tool definition we can key; leave it to the caller.
                return true;
            };
            let empty = Value::Object(Default::default());
            let schema = tool.get("inputSchema").unwrap_or(&empty);
            match self.insert(name, schema) {
                Ok(()) => true,
                Err(error) => {
                    rejected.push(RejectedTool {
                        name: name.to_owned(),
                        error,
                    });
                    false
                }
            }
        });
        rejected
    }

    /// The annotations of `tool`, when known.
    pub fn get(&self, tool: &str) -> Option<&ParamHeaders> {
        self.tools.get(tool).map(|a| &**a)
    }

    pub(crate) fn get_shared(&self, tool: &str) -> Option<Arc<ParamHeaders>> {
        self.tools.get(tool).cloned()
    }

    /// How many tools are known.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is known.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(schema: Value) -> InvalidReason {
        ParamHeaders::from_input_schema(&schema)
            .unwrap_err()
            .reason()
            .clone()
    }

    fn prop(p: Value) -> Value {
        json!({"type": "object", "properties": {"p": p}})
    }

    #[test]
    fn valid_annotations_and_paths() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "flag": {"type": ["boolean", "null"], "x-mcp-header": "Flag"},
            "outer": {"type": "object", "properties": {
                "inner": {"type": "string", "x-mcp-header": "Inner_1.x"}}},
            "x-mcp-header": {"type": "string"},
            "plain": {"type": "string", "default": {"x-mcp-header": "NotAnAnnotation"}}
        }});
        let h = ParamHeaders::from_input_schema(&schema).unwrap();
        assert_eq!(h.len(), 4);
        let inner = h.iter().find(|p| p.name() == "Inner_1.x").unwrap();
        assert_eq!(inner.path(), ["outer", "inner"]);
        assert_eq!(inner.header_name().as_str(), "mcp-param-inner_1.x");
        assert!(ParamHeaders::from_input_schema(&json!({"type": "object"}))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn each_constraint_is_enforced() {
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": ""}))),
            InvalidReason::Empty
        );
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": 5}))),
            InvalidReason::NotAString
        );
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": "A\r\nB"}))),
            InvalidReason::ControlCharacter
        );
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": "Re gion"}))),
            InvalidReason::NotAToken(' ')
        );
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": "Région"}))),
            InvalidReason::NotAToken('é')
        );
        assert_eq!(
            reason(prop(json!({"type": "string", "x-mcp-header": "a:b"}))),
            InvalidReason::NotAToken(':')
        );
        assert_eq!(
            reason(prop(json!({"type": "number", "x-mcp-header": "N"}))),
            InvalidReason::NumberType
        );
        assert!(matches!(
            reason(prop(json!({"type": "object", "x-mcp-header": "O"}))),
            InvalidReason::UnsupportedType(_)
        ));
        assert!(matches!(
            reason(prop(json!({"x-mcp-header": "O"}))),
            InvalidReason::UnsupportedType(_)
        ));
        assert!(matches!(
            reason(prop(
                json!({"type": ["string", "integer"], "x-mcp-header": "O"})
            )),
            InvalidReason::UnsupportedType(_)
        ));
        let dup = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "string", "x-mcp-header": "REGION"}}});
        assert!(matches!(reason(dup), InvalidReason::Duplicate { .. }));
        assert_eq!(
            reason(json!({"type": "object", "x-mcp-header": "Root"})),
            InvalidReason::NotStaticallyReachable {
                keyword: "<root>".into()
            }
        );
    }

    #[test]
    fn annotations_off_the_properties_chain_invalidate() {
        let ann = json!({"type": "string", "x-mcp-header": "X"});
        for (keyword, schema) in [
            (
                "items",
                prop(json!({"type": "array", "items": ann.clone()})),
            ),
            ("oneOf", prop(json!({"oneOf": [ann.clone()]}))),
            (
                "anyOf",
                json!({"anyOf": [{"properties": {"p": ann.clone()}}]}),
            ),
            (
                "allOf",
                json!({"allOf": [{"properties": {"p": ann.clone()}}]}),
            ),
            ("not", prop(json!({"not": ann.clone()}))),
            ("if", json!({"if": {"properties": {"p": ann.clone()}}})),
            ("then", json!({"then": {"properties": {"p": ann.clone()}}})),
            ("else", json!({"else": {"properties": {"p": ann.clone()}}})),
            (
                "$defs",
                json!({"$defs": {"R": ann.clone()}, "properties": {"p": {"$ref": "#/$defs/R"}}}),
            ),
            (
                "additionalProperties",
                json!({"additionalProperties": ann.clone()}),
            ),
            (
                "patternProperties",
                json!({"patternProperties": {"^a": ann.clone()}}),
            ),
            (
                "items",
                json!({"properties": {"l": {"type": "array", "items": {"properties": {"p": ann.clone()}}}}}),
            ),
        ] {
            assert_eq!(
                reason(schema.clone()),
                InvalidReason::NotStaticallyReachable {
                    keyword: keyword.into()
                },
                "{schema}"
            );
        }
    }

    #[test]
    fn client_encoding() {
        let h = ParamHeaders::from_input_schema(&json!({"properties": {
            "s": {"type": "string", "x-mcp-header": "S"},
            "i": {"type": "integer", "x-mcp-header": "I"},
            "b": {"type": "boolean", "x-mcp-header": "B"},
            "o": {"type": "object", "properties": {"deep": {"type": "string", "x-mcp-header": "Deep"}}}
        }}))
        .unwrap();
        let out = h
            .headers_for(Some(
                &json!({"s": "Hello, 世界", "i": 42.0, "b": false, "o": {"deep": null}}),
            ))
            .unwrap();
        let get = |n: &str| {
            out.iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.to_str().unwrap().to_owned())
        };
        assert_eq!(
            get("mcp-param-s").unwrap(),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(get("mcp-param-i").unwrap(), "42");
        assert_eq!(get("mcp-param-b").unwrap(), "false");
        assert_eq!(get("mcp-param-deep"), None, "null omits the header");
        assert!(h.headers_for(None).unwrap().is_empty());
        assert!(h
            .headers_for(Some(&json!({"i": 9007199254740992i64})))
            .is_err());
        assert!(h.headers_for(Some(&json!({"i": 1.5}))).is_err());
        assert!(h.headers_for(Some(&json!({"s": ["x"]}))).is_err());
        assert_eq!(
            h.headers_for(Some(&json!({"i": -9007199254740991i64})))
                .unwrap()[0]
                .1,
            "-9007199254740991"
        );
    }

    #[test]
    fn server_check() {
        let h = ParamHeaders::from_input_schema(&json!({"properties": {
            "s": {"type": "string", "x-mcp-header": "S"},
            "i": {"type": "integer", "x-mcp-header": "I"}
        }}))
        .unwrap();
        let headers = |pairs: &[(&str, &[u8])]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_bytes(v).unwrap(),
                );
            }
            m
        };
        let args = json!({"s": "a b", "i": 42});
        assert!(h
            .check(
                &headers(&[("mcp-param-s", b"a b"), ("mcp-param-i", b"42.0")]),
                Some(&args)
            )
            .is_ok());
        assert!(h
            .check(
                &headers(&[
                    ("Mcp-Param-S", b"=?base64?YSBi?="),
                    ("mcp-param-i", b"42"),
                    ("mcp-param-other", b"x")
                ]),
                Some(&args)
            )
            .is_ok());
        let err = h
            .check(&headers(&[("mcp-param-i", b"42")]), Some(&args))
            .unwrap_err();
        assert!(err.contains("Mcp-Param-S header is missing"), "{err}");
        let err = h
            .check(
                &headers(&[("mcp-param-s", b"a b"), ("mcp-param-i", b"43")]),
                Some(&args),
            )
            .unwrap_err();
        assert!(err.contains("Mcp-Param-I header value '43'"), "{err}");
        let err = h
            .check(
                &headers(&[("mcp-param-s", b"a\xffb"), ("mcp-param-i", b"42")]),
                Some(&args),
            )
            .unwrap_err();
        assert!(err.contains("invalid characters"), "{err}");
        let err = h
            .check(
                &headers(&[("mcp-param-s", b"=?base64?!!?="), ("mcp-param-i", b"42")]),
                Some(&args),
            )
            .unwrap_err();
        assert!(err.contains("malformed Base64"), "{err}");
        let err = h
            .check(
                &headers(&[("mcp-param-s", b"x")]),
                Some(&json!({"s": null})),
            )
            .unwrap_err();
        assert!(err.contains("no value in the body"), "{err}");
        assert!(h.check(&headers(&[]), Some(&json!({"s": null}))).is_ok());
        assert!(h.check(&headers(&[]), None).is_ok());
        let err = h
            .check(
                &headers(&[("mcp-param-i", b"1"), ("mcp-param-i", b"1")]),
                Some(&json!({"i": 1})),
            )
            .unwrap_err();
        assert!(err.contains("more than once"), "{err}");
        assert!(h
            .check(&headers(&[("mcp-param-i", b"nan")]), Some(&json!({"i": 1})))
            .is_err());
    }

    #[test]
    fn tools_list_filtering() {
        let mut result = json!({"tools": [
            {"name": "good", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}},
            {"name": "bad", "inputSchema": {"properties": {"r": {"type": "number", "x-mcp-header": "R"}}}},
            {"name": "plain", "inputSchema": {"type": "object"}}
        ], "nextCursor": "c"});
        let mut map = ToolHeaderMap::new();
        map.insert("bad", &json!({})).unwrap();
        let rejected = map.learn_tools_list(&mut result);
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].name, "bad");
        assert_eq!(rejected[0].error.reason(), &InvalidReason::NumberType);
        let names: Vec<_> = result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["good", "plain"]);
        assert_eq!(result["nextCursor"], "c");
        assert_eq!(map.get("good").unwrap().len(), 1);
        assert!(map.get("plain").unwrap().is_empty());
        assert!(map.get("bad").is_none(), "a now-invalid tool is forgotten");
    }
}
