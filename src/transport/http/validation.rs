//! What the server checks before a request reaches the MCP stack: `Origin`
//! (DNS-rebinding protection), `Accept`, `Content-Type`, and the request
//! metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`)
//! against the body; and the Base64 sentinel encoding of header values.
//!
//! ```
//! use tower_mcp_cancel::transport::http::validation::{decode_header_value, encode_header_value, OriginPolicy};
//!
//! // Values that are not plain visible ASCII travel Base64-encoded.
//! assert_eq!(encode_header_value("get_weather"), "get_weather");
//! assert_eq!(encode_header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
//! assert_eq!(decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(), "Hello, 世界");
//!
//! // The default origin policy allows browsers on this machine only.
//! let policy = OriginPolicy::default();
//! assert!(policy.allows("http://localhost:3000"));
//! assert!(policy.allows("http://127.0.0.1:8080"));
//! assert!(!policy.allows("https://evil.example"));
//! ```

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::jsonrpc::{self, ErrorObject, RequestId, PROTOCOL_VERSION_META};

/// The `MCP-Protocol-Version` request header.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// The `Mcp-Method` request header.
pub const METHOD_HEADER: &str = crate::request::MCP_METHOD_HEADER;
/// The `Mcp-Name` request header (`tools/call`, `resources/read`, `prompts/get`).
pub const NAME_HEADER: &str = "mcp-name";

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// Which `Origin` header values the server accepts.
///
/// A request without `Origin` (a non-browser client) is always accepted; a
/// request whose `Origin` is not allowed gets `403 Forbidden` with a JSON-RPC
/// error without id, as the spec asks.
#[derive(Clone, Default)]
pub enum OriginPolicy {
    /// Only origins whose host is `localhost`, `127.0.0.1` or `[::1]` (any
    /// scheme and port). The default: right for a server bound to loopback.
    #[default]
    Localhost,
    /// Exactly these origins (compared as written, e.g. `https://app.example`),
    /// plus the localhost ones if `also_localhost`.
    List {
        /// The allowed origins.
        origins: Arc<[String]>,
        /// Whether localhost origins are allowed too.
        also_localhost: bool,
    },
    /// Any origin (no DNS-rebinding protection: only behind a proxy that checks).
    Any,
    /// A function deciding for each `Origin` value.
    Custom(Arc<dyn Fn(&str) -> bool + Send + Sync>),
}

impl fmt::Debug for OriginPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginPolicy::Localhost => f.write_str("Localhost"),
            OriginPolicy::List {
                origins,
                also_localhost,
            } => f
                .debug_struct("List")
                .field("origins", origins)
                .field("also_localhost", also_localhost)
                .finish(),
            OriginPolicy::Any => f.write_str("Any"),
            OriginPolicy::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl OriginPolicy {
    /// Exactly these origins, and localhost.
    pub fn list<I, S>(origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        OriginPolicy::List {
            origins: origins.into_iter().map(Into::into).collect(),
            also_localhost: true,
        }
    }

    /// A policy deciding with `f`.
    pub fn custom(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        OriginPolicy::Custom(Arc::new(f))
    }

    /// Whether an `Origin` header value is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPolicy::Localhost => is_localhost_origin(origin),
            OriginPolicy::List {
                origins,
                also_localhost,
            } => {
                origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
                    || (*also_localhost && is_localhost_origin(origin))
            }
            OriginPolicy::Any => true,
            OriginPolicy::Custom(f) => f(origin),
        }
    }

    /// Checks a request's headers: `Err` is the 403 response to send.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Rejection> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let ok = origin.to_str().map(|o| self.allows(o)).unwrap_or(false);
        if ok {
            Ok(())
        } else {
            tracing::warn!(origin = ?origin, "request from a disallowed Origin rejected");
            Err(Rejection::new(
                StatusCode::FORBIDDEN,
                None,
                ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    "Forbidden: the Origin header is not allowed",
                ),
            ))
        }
    }
}

/// `OriginPolicy` as a [`tower_http`] request validator, to protect other
/// routes of the same server (`ValidateRequestHeaderLayer::custom(policy)`).
impl<B> tower_http::validate_request::ValidateRequest<B> for OriginPolicy {
    type ResponseBody = Full<Bytes>;
    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Full<Bytes>>> {
        self.check(request.headers())
            .map_err(Rejection::into_response)
    }
}

fn is_localhost_origin(origin: &str) -> bool {
    let Some((_scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, _)) => h,
            None => return false,
        }
    } else {
        authority.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1"
}

/// A request refused before it reached the MCP stack: an HTTP status and the
/// JSON-RPC error to send with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The HTTP status.
    pub status: StatusCode,
    /// The id of the request, when it could be read.
    pub id: Option<RequestId>,
    /// The JSON-RPC error.
    pub error: ErrorObject,
}

impl Rejection {
    /// A rejection.
    pub fn new(status: StatusCode, id: Option<RequestId>, error: ErrorObject) -> Self {
        Self { status, id, error }
    }

    pub(crate) fn header_mismatch(id: &RequestId, message: String) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            Some(id.clone()),
            ErrorObject::new(ErrorObject::HEADER_MISMATCH, message),
        )
    }

    /// The HTTP response: the status and a JSON-RPC error response body.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let body = match &self.id {
            Some(id) => jsonrpc::encode_response::<()>(Some(id), Err(&self.error)),
            None => crate::transport::call::server::encode_error_without_id(&self.error),
        };
        let mut res = Response::new(Full::new(Bytes::from(body)));
        *res.status_mut() = self.status;
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res
    }
}

/// Checks that `Accept` lists both `application/json` and
/// `text/event-stream` (wildcards count), as the spec requires of clients.
pub fn check_accept(headers: &HeaderMap) -> Result<(), Rejection> {
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mime = item.split(';').next().unwrap_or("").trim();
            match mime.to_ascii_lowercase().as_str() {
                "*/*" => {
                    json = true;
                    sse = true;
                }
                "application/json" | "application/*" => json = true,
                "text/event-stream" | "text/*" => sse = true,
                _ => {}
            }
        }
    }
    if json && sse {
        Ok(())
    } else {
        Err(Rejection::new(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Not Acceptable: the Accept header must list both application/json and text/event-stream",
            ),
        ))
    }
}

/// Checks that a `Content-Type`, if present, is `application/json`.
pub fn check_content_type(headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let mime = ct
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if mime.as_deref() == Some("application/json") {
        Ok(())
    } else {
        Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Unsupported Media Type: the body must be application/json",
            ),
        ))
    }
}

/// Encodes a value for `Mcp-Name` / `Mcp-Param-*`: as-is when it is plain
/// visible ASCII (spaces inside allowed) and not sentinel-shaped, otherwise
/// `=?base64?…?=` of its UTF-8.
pub fn encode_header_value(value: &str) -> String {
    let sentinel_shaped = value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX);
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !sentinel_shaped;
    if plain {
        value.to_owned()
    } else {
        format!(
            "{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

/// Decodes a header value that may use the Base64 sentinel encoding.
/// `None` when the sentinel is malformed (bad Base64 or not UTF-8).
pub fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix(SENTINEL_PREFIX)
        .and_then(|v| v.strip_suffix(SENTINEL_SUFFIX))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
    }
}

/// The methods whose requests carry `Mcp-Name`, and the params field it mirrors.
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The fields of `params` the transport compares with headers.
#[derive(Deserialize, Default)]
pub(crate) struct MirroredParams {
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    uri: Option<serde_json::Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<MetaFields>,
}

#[derive(Deserialize, Default)]
struct MetaFields {
    #[serde(default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<serde_json::Value>,
}

impl MirroredParams {
    pub(crate) fn read(params: Option<&RawValue>) -> Self {
        // Arrays and odd shapes simply have none of the fields.
        params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default()
    }

    /// Whether the body carries `_meta["io.modelcontextprotocol/protocolVersion"]`
    /// at all (any non-null value): only 2026 clients send it.
    pub(crate) fn has_protocol_version(&self) -> bool {
        self.meta
            .as_ref()
            .is_some_and(|m| m.protocol_version.is_some())
    }

    pub(crate) fn protocol_version(&self) -> Option<&str> {
        self.meta
            .as_ref()
            .and_then(|m| m.protocol_version.as_ref())
            .and_then(|v| v.as_str())
    }

    fn field(&self, field: &str) -> Option<&serde_json::Value> {
        match field {
            "name" => self.name.as_ref(),
            "uri" => self.uri.as_ref(),
            _ => None,
        }
    }
}

fn header_str<'a>(
    headers: &'a HeaderMap,
    name: &str,
    id: &RequestId,
) -> Result<Option<&'a str>, Rejection> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            Rejection::header_mismatch(
                id,
                format!("Header mismatch: the {name} header contains invalid characters"),
            )
        }),
    }
}

/// The `MCP-Protocol-Version` header, if present and readable.
pub fn protocol_version_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// Validates a modern (2026-07-28) request's metadata headers against its
/// body: `MCP-Protocol-Version` present and equal to
/// `params._meta["io.modelcontextprotocol/protocolVersion"]`, the version
/// supported, `Mcp-Method` equal to `method`, and `Mcp-Name` (decoded) equal
/// to `params.name` / `params.uri` where the method requires it.
pub(crate) fn check_request_headers(
    headers: &HeaderMap,
    id: &RequestId,
    method: &str,
    params: &MirroredParams,
    supported: &[String],
) -> Result<(), Rejection> {
    let Some(version) = header_str(headers, PROTOCOL_VERSION_HEADER, id)? else {
        return Err(Rejection::header_mismatch(
            id,
            "Header mismatch: the required MCP-Protocol-Version header is missing".into(),
        ));
    };
    let version = version.trim();
    match params.protocol_version() {
        Some(body) if body == version => {}
        Some(body) => {
            return Err(Rejection::header_mismatch(
                id,
                format!(
                    "Header mismatch: MCP-Protocol-Version header value '{version}' does not match body value '{body}'"
                ),
            ))
        }
        None => {
            return Err(Rejection::header_mismatch(
                id,
                format!(
                    "Header mismatch: MCP-Protocol-Version is '{version}' but the body has no _meta[\"{PROTOCOL_VERSION_META}\"]"
                ),
            ))
        }
    }
    if !supported.iter().any(|s| s == version) {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            Some(id.clone()),
            ErrorObject::new(
                ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version: {version}"),
            )
            .with_data(serde_json::json!({ "supported": supported, "requested": version })),
        ));
    }
    let Some(h) = header_str(headers, METHOD_HEADER, id)? else {
        return Err(Rejection::header_mismatch(
            id,
            "Header mismatch: the required Mcp-Method header is missing".into(),
        ));
    };
    check_method_header(h, id, method)?;
    if let Some(field) = name_field(method) {
        let Some(raw) = header_str(headers, NAME_HEADER, id)? else {
            return Err(Rejection::header_mismatch(
                id,
                format!("Header mismatch: the Mcp-Name header is required for {method}"),
            ));
        };
        check_name_header(raw, id, params.field(field).and_then(|v| v.as_str()))?;
    }
    Ok(())
}

/// Validates the metadata headers a legacy (2025) request does send: those
/// revisions have no `Mcp-Method` or `Mcp-Name`, so they may be absent, but
/// one that is present must match the body like on a 2026 request. A
/// proxy or gateway may route or authorize by them; a client must not be
/// able to show it one method and run another.
pub(crate) fn check_legacy_headers(
    headers: &HeaderMap,
    id: &RequestId,
    method: &str,
    params: &MirroredParams,
) -> Result<(), Rejection> {
    if let Some(h) = header_str(headers, METHOD_HEADER, id)? {
        check_method_header(h, id, method)?;
    }
    if let Some(field) = name_field(method) {
        if let Some(raw) = header_str(headers, NAME_HEADER, id)? {
            check_name_header(raw, id, params.field(field).and_then(|v| v.as_str()))?;
        }
    }
    Ok(())
}

fn check_method_header(header: &str, id: &RequestId, method: &str) -> Result<(), Rejection> {
    if header == method {
        return Ok(());
    }
    Err(Rejection::header_mismatch(
        id,
        format!(
            "Header mismatch: Mcp-Method header value '{}' does not match body value '{}'",
            crate::cancel::sanitize_reason(header),
            crate::cancel::sanitize_reason(method)
        ),
    ))
}

fn check_name_header(raw: &str, id: &RequestId, body: Option<&str>) -> Result<(), Rejection> {
    let Some(decoded) = decode_header_value(raw) else {
        return Err(Rejection::header_mismatch(
            id,
            "Header mismatch: the Mcp-Name header has a malformed Base64 value".into(),
        ));
    };
    if body == Some(decoded.as_str()) {
        return Ok(());
    }
    Err(Rejection::header_mismatch(
        id,
        format!(
            "Header mismatch: Mcp-Name header value '{}' does not match body value '{}'",
            crate::cancel::sanitize_reason(&decoded),
            crate::cancel::sanitize_reason(body.unwrap_or("<absent>"))
        ),
    ))
}

/// Checks the `Mcp-Param-*` headers of a modern `tools/call` against its
/// `arguments`, for tools in `tools`; calls of other tools pass.
pub(crate) fn check_param_headers(
    headers: &HeaderMap,
    id: &RequestId,
    params: Option<&RawValue>,
    tools: &super::param_headers::ToolHeaderMap,
) -> Result<(), Rejection> {
    #[derive(Deserialize)]
    struct Call {
        #[serde(default)]
        name: Option<serde_json::Value>,
        #[serde(default)]
        arguments: Option<serde_json::Value>,
    }
    let Some(call) = params.and_then(|p| serde_json::from_str::<Call>(p.get()).ok()) else {
        return Ok(());
    };
    let Some(tool) = call
        .name
        .as_ref()
        .and_then(|n| n.as_str())
        .and_then(|n| tools.get(n))
    else {
        return Ok(());
    };
    tool.check(headers, call.arguments.as_ref())
        .map_err(|message| Rejection::header_mismatch(id, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_examples_from_the_spec() {
        assert_eq!(encode_header_value("us-west1"), "us-west1");
        assert_eq!(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(
            encode_header_value("line1\nline2"),
            "=?base64?bGluZTEKbGluZTI=?="
        );
        assert_eq!(
            encode_header_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        assert_eq!(
            decode_header_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").unwrap(),
            "=?base64?literal?="
        );
        assert_eq!(decode_header_value("=?base64?!!!?="), None);
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
    }

    #[test]
    fn localhost_origins() {
        for o in [
            "http://localhost",
            "http://LOCALHOST:1",
            "https://127.0.0.1:8443/",
            "http://[::1]:80",
        ] {
            assert!(is_localhost_origin(o), "{o}");
        }
        for o in [
            "null",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://[::2]",
            "",
        ] {
            assert!(!is_localhost_origin(o), "{o}");
        }
    }

    #[test]
    fn accept_needs_both() {
        let mut h = HeaderMap::new();
        assert!(check_accept(&h).is_err());
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(check_accept(&h).is_err());
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream;q=0.9"),
        );
        assert!(check_accept(&h).is_ok());
    }
}
