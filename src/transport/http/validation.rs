//! What the server checks before a request reaches the MCP stack, apart
//! from `Origin` ([`OriginPolicy`](super::OriginPolicy)): `Accept`,
//! `Content-Type`, and the request metadata headers
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`)
//! against the body. A failed check is a [`Rejection`].

use std::borrow::Cow;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::headers::{
    decode_header_value, name_field, MCP_METHOD_HEADER, MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
};
use super::param_headers::ToolHeaderMap;
use crate::jsonrpc::{self, json_str, ErrorObject, ParamsView, RequestId, PROTOCOL_VERSION_META};
use crate::sanitize::for_log;

/// A request refused before it reached the MCP stack: an HTTP status and the
/// JSON-RPC error to send with it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Rejection {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The id of the request, when it could be read.
    pub(crate) id: Option<RequestId>,
    /// The JSON-RPC error.
    pub(crate) error: ErrorObject,
}

impl Rejection {
    /// A rejection.
    pub(crate) fn new(status: StatusCode, id: Option<RequestId>, error: ErrorObject) -> Self {
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
    pub(crate) fn into_response(self) -> Response<Full<Bytes>> {
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
pub(crate) fn check_accept(headers: &HeaderMap) -> Result<(), Rejection> {
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mime = item.split(';').next().unwrap_or("").trim();
            // Media types are case-insensitive; compared without allocating.
            let is = |t: &str| mime.eq_ignore_ascii_case(t);
            if is("*/*") {
                json = true;
                sse = true;
            } else if is("application/json") || is("application/*") {
                json = true;
            } else if is("text/event-stream") || is("text/*") {
                sse = true;
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

/// Checks that a `Content-Type`, if present, is `application/json`, once
/// (a repeated one is refused: another reader may take another copy).
pub(crate) fn check_content_type(headers: &HeaderMap) -> Result<(), Rejection> {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let Some(ct) = values.next() else {
        return Ok(());
    };
    // Compared without a lower-cased copy.
    let json = ct
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if json && values.next().is_none() {
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

/// The fields of `params` the transport compares with headers: the
/// [`ParamsView`] read with the request's envelope and progress token (one
/// pass over the body, nothing allocated), a string read only when it is
/// compared.
#[derive(Clone, Copy, Default)]
pub(crate) struct MirroredParams<'a>(ParamsView<'a>);

impl<'a> From<ParamsView<'a>> for MirroredParams<'a> {
    fn from(view: ParamsView<'a>) -> Self {
        Self(view)
    }
}

impl<'a> MirroredParams<'a> {
    /// Reads the fields from raw params (the adapter has them from the
    /// decode already).
    #[cfg(test)]
    pub(crate) fn read(params: Option<&'a RawValue>) -> Self {
        Self(
            params
                .map(|p| crate::jsonrpc::ParamsPeek::of(p).view)
                .unwrap_or_default(),
        )
    }

    /// Whether the body carries `_meta["io.modelcontextprotocol/protocolVersion"]`
    /// at all (any non-null value): only 2026 clients send it.
    pub(crate) fn has_protocol_version(&self) -> bool {
        self.0.protocol_version.is_some()
    }

    pub(crate) fn protocol_version(&self) -> Option<Cow<'a, str>> {
        self.0.protocol_version.and_then(json_str)
    }

    fn field(&self, field: &str) -> Option<Cow<'a, str>> {
        match field {
            "name" => self.0.name.and_then(json_str),
            "uri" => self.0.uri.and_then(json_str),
            "taskId" => self.0.task_id.and_then(json_str),
            _ => None,
        }
    }
}

/// A header compared with the body: absent, or present once and readable.
/// A repeated one is a mismatch even when its copies agree: the server
/// compares one copy, while a proxy may route on another, or on all of them
/// joined.
fn header_str<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    id: &RequestId,
) -> Result<Option<&'a str>, Rejection> {
    let mut values = headers.get_all(name).iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Rejection::header_mismatch(
            id,
            format!("Header mismatch: the {name} header is sent more than once"),
        ));
    }
    v.to_str().map(Some).map_err(|_| {
        Rejection::header_mismatch(
            id,
            format!("Header mismatch: the {name} header contains invalid characters"),
        )
    })
}

/// The `MCP-Protocol-Version` header, if present and readable.
pub(crate) fn protocol_version_header(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(&MCP_PROTOCOL_VERSION_HEADER)
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
    let Some(version) = header_str(headers, &MCP_PROTOCOL_VERSION_HEADER, id)? else {
        return Err(Rejection::header_mismatch(
            id,
            "Header mismatch: the required MCP-Protocol-Version header is missing".into(),
        ));
    };
    let version = version.trim();
    match params.protocol_version().as_deref() {
        Some(body) if body == version => {}
        Some(body) => {
            return Err(Rejection::header_mismatch(
                id,
                format!(
                    "Header mismatch: MCP-Protocol-Version header value '{}' does not match body value '{}'",
                    for_log(version),
                    for_log(body)
                ),
            ))
        }
        None => {
            return Err(Rejection::header_mismatch(
                id,
                format!(
                    "Header mismatch: MCP-Protocol-Version is '{}' but the body has no _meta[\"{PROTOCOL_VERSION_META}\"]",
                    for_log(version)
                ),
            ))
        }
    }
    if !supported.iter().any(|s| s == version) {
        let requested = for_log(version);
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            Some(id.clone()),
            ErrorObject::new(
                ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version: {requested}"),
            )
            .with_data(serde_json::json!({ "supported": supported, "requested": requested })),
        ));
    }
    let Some(h) = header_str(headers, &MCP_METHOD_HEADER, id)? else {
        return Err(Rejection::header_mismatch(
            id,
            "Header mismatch: the required Mcp-Method header is missing".into(),
        ));
    };
    check_method_header(h, id, method)?;
    if let Some(field) = name_field(method) {
        let Some(raw) = header_str(headers, &MCP_NAME_HEADER, id)? else {
            return Err(Rejection::header_mismatch(
                id,
                format!("Header mismatch: the Mcp-Name header is required for {method}"),
            ));
        };
        check_name_header(raw, id, params.field(field).as_deref())?;
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
    // The era was read from it: one copy only.
    header_str(headers, &MCP_PROTOCOL_VERSION_HEADER, id)?;
    if let Some(h) = header_str(headers, &MCP_METHOD_HEADER, id)? {
        check_method_header(h, id, method)?;
    }
    if let Some(field) = name_field(method) {
        if let Some(raw) = header_str(headers, &MCP_NAME_HEADER, id)? {
            check_name_header(raw, id, params.field(field).as_deref())?;
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
            for_log(header),
            for_log(method)
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
            for_log(&decoded),
            for_log(body.unwrap_or("<absent>"))
        ),
    ))
}

/// Checks the `Mcp-Param-*` headers of a modern `tools/call` against its
/// `arguments`, for tools in `tools`; calls of other tools pass.
pub(crate) fn check_param_headers(
    headers: &HeaderMap,
    id: &RequestId,
    params: Option<&RawValue>,
    tools: &ToolHeaderMap,
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
        .map_err(|mismatch| Rejection::header_mismatch(id, mismatch.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn accept_is_case_insensitive_and_ignores_parameters() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("Application/JSON; q=0.9, TEXT/Event-Stream"),
        );
        assert!(check_accept(&h).is_ok());
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("APPLICATION/JSON, text/html"),
        );
        assert!(check_accept(&h).is_err());
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(check_accept(&h).is_ok());
    }

    fn mirrored(params: &str) -> (bool, Option<String>, Option<String>, Option<String>) {
        let raw = RawValue::from_string(params.to_owned()).unwrap();
        let m = MirroredParams::read(Some(&raw));
        (
            m.has_protocol_version(),
            m.protocol_version().map(Cow::into_owned),
            m.field("name").map(Cow::into_owned),
            m.field("uri").map(Cow::into_owned),
        )
    }

    #[test]
    fn mirrored_params_read_strings_null_and_other_values() {
        let v = r#"{"name":"e\u0063ho","uri":"file:///a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","other":{"x":[1]}}}"#;
        assert_eq!(
            mirrored(v),
            (
                true,
                Some("2026-07-28".into()),
                Some("echo".into()),
                Some("file:///a".into())
            )
        );
        // null is absent; a non-string is present but matches no header.
        let v = r#"{"name":7,"_meta":{"io.modelcontextprotocol/protocolVersion":null}}"#;
        assert_eq!(mirrored(v), (false, None, None, None));
        let v = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":5}}"#;
        assert_eq!(mirrored(v), (true, None, None, None));
        // Odd shapes have none of the fields.
        assert_eq!(mirrored("[1,2]"), (false, None, None, None));
        assert_eq!(mirrored(r#"{"_meta":3}"#), (false, None, None, None));
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
