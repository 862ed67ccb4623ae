//! One POST: the request's body with its `_meta`, the headers the spec
//! requires, and reading its answer — in a legacy session, or while the
//! server's era is unknown, where a `400` may be the spec's signal of a
//! 2025-era server ([`NotModern`]).

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};

use super::response::read_response;
use super::send::{send, Outgoing};
use super::{HttpClientError, Inner};
use crate::error::BoxError;
use crate::jsonrpc::{ErrorObject, Message, RequestId, PROTOCOL_VERSION_META};
use crate::timeout::{WireBudget, WireRequest};
use crate::transport::call::client::Route;
use crate::transport::http::headers::{
    encode_header_value, name_field, MCP_METHOD_HEADER, MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
};
use crate::McpRequest;

pub(super) const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
pub(super) use crate::jsonrpc::CLIENT_CAPABILITIES_META;

type Params = serde_json::Map<String, serde_json::Value>;

/// The POST of request `id`: its body, with the `_meta` every request
/// carries (and its budget, written when it is sent), and its headers
/// (protocol version, method, name, the caller's extra headers and, for a
/// `tools/call`, the `Mcp-Param-*` headers).
pub(super) fn prepare(
    inner: &Inner,
    id: &RequestId,
    req: &McpRequest,
) -> Result<Outgoing, HttpClientError> {
    let method = req.method();
    let params = req
        .wire_params()
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    let mut obj: Params = match params.as_deref() {
        None => serde_json::Map::new(),
        Some(p) => serde_json::from_str(p.get()).map_err(|_| {
            HttpClientError::InvalidRequest("params must be a JSON object over HTTP".into())
        })?,
    };
    let version = add_meta(inner, &mut obj)?;
    let name = name_field(method)
        .and_then(|f| obj.get(f))
        .and_then(|v| v.as_str())
        .map(encode_header_value);
    let param_headers = param_headers(inner, method, &obj)?;
    let params = serde_json::value::to_raw_value(&obj)
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    let budget = WireBudget::of(req, inner.budget_key.as_ref());
    let body = WireRequest::new(id.clone(), method, Some(params), budget);

    let invalid =
        |what: &str| HttpClientError::InvalidRequest(format!("{what} is not a valid header value"));
    let mut builder = Request::post(inner.uri.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(
            MCP_PROTOCOL_VERSION_HEADER,
            HeaderValue::from_str(&version).map_err(|_| invalid("the protocol version"))?,
        )
        .header(
            MCP_METHOD_HEADER,
            HeaderValue::from_str(method).map_err(|_| invalid("the method"))?,
        );
    if let Some(name) = name {
        builder = builder.header(
            MCP_NAME_HEADER,
            HeaderValue::from_str(&name).map_err(|_| invalid("Mcp-Name"))?,
        );
    }
    let mut head = builder
        .body(())
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    for (k, v) in &inner.headers {
        head.headers_mut().append(k.clone(), v.clone());
    }
    for (k, v) in param_headers {
        head.headers_mut().insert(k, v);
    }
    Ok(Outgoing::new(head, body))
}

/// Adds the protocol version, client capabilities and client info to
/// `params._meta` where the caller did not set them; the protocol version.
fn add_meta(inner: &Inner, obj: &mut Params) -> Result<String, HttpClientError> {
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    let serde_json::Value::Object(meta) = meta else {
        return Err(HttpClientError::InvalidRequest(
            "params._meta must be an object".into(),
        ));
    };
    let version = meta
        .entry(PROTOCOL_VERSION_META)
        .or_insert_with(|| inner.protocol_version.clone().into())
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| {
            HttpClientError::InvalidRequest(format!(
                "_meta[{PROTOCOL_VERSION_META:?}] must be a string"
            ))
        })?;
    meta.entry(CLIENT_CAPABILITIES_META)
        .or_insert_with(|| serde_json::json!({}));
    if let Some(info) = &inner.client_info {
        meta.entry(CLIENT_INFO_META).or_insert_with(|| info.clone());
    }
    Ok(version)
}

/// The `Mcp-Param-*` headers of a `tools/call` of a tool whose annotations
/// the client knows (none for anything else).
fn param_headers(
    inner: &Inner,
    method: &str,
    obj: &Params,
) -> Result<Vec<(HeaderName, HeaderValue)>, HttpClientError> {
    if method != "tools/call" {
        return Ok(Vec::new());
    }
    let tool = obj.get("name").and_then(|v| v.as_str());
    match tool.and_then(|t| inner.tools().get_shared(t)) {
        Some(h) => h
            .headers_for(obj.get("arguments"))
            .map_err(|e| HttpClientError::InvalidRequest(e.to_string())),
        None => Ok(Vec::new()),
    }
}

/// The shape a request was sent in, which decides how some `4xx` answers
/// are read.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape {
    /// 2026-07-28; `probe` while the server's era is unknown.
    Modern { probe: bool },
    /// In a legacy session.
    Legacy,
}

/// Sends request `id` and reads its answer. While probing (the server's era
/// is not known yet), see [`probe`]. In a legacy session, a `404` that is
/// not the answer to this request is [`SessionGone`]: the server ended the
/// session.
pub(super) async fn exchange(
    inner: &Inner,
    http_req: Outgoing,
    id: &RequestId,
    route: Route,
    shape: Shape,
) -> Result<serde_json::Value, BoxError> {
    let res = send(&inner.client, http_req).await?;
    if matches!(shape, Shape::Legacy) && res.status() == http::StatusCode::NOT_FOUND {
        let (parts, body) = res.into_parts();
        let body = read_small(body).await;
        if !answers(&body, id) {
            return Err(Box::new(SessionGone));
        }
        return read_response(
            http::Response::from_parts(parts, Full::new(body)),
            id,
            route,
            inner.max_response_bytes,
        )
        .await;
    }
    if matches!(shape, Shape::Modern { probe: true }) {
        return probe(inner, res, id, route).await;
    }
    read_response(res, id, route, inner.max_response_bytes).await
}

/// The answer to a modern request while the server's era is unknown. The
/// spec's one signal of a 2025-era server is `400 Bad Request` whose body
/// is not a recognized modern error ([`is_modern_error`]): that is
/// [`NotModern`], and the caller falls back — whatever id the body
/// carries, since a 2025 server may answer the request's own id (`-32600`
/// "Server not initialized"). A success, or a modern error under any
/// status, makes the client modern; so does a JSON-RPC error answering the
/// request under another status than `400` (`404` method-not-found: the
/// server processed the modern request). Anything else — another status
/// (`401`, `404`, `413`, `429`, …) without such an error — is this call's
/// error and tells nothing of the era.
async fn probe(
    inner: &Inner,
    res: http::Response<hyper::body::Incoming>,
    id: &RequestId,
    route: Route,
) -> Result<serde_json::Value, BoxError> {
    let status = res.status();
    if status.is_success() {
        let out = read_response(res, id, route, inner.max_response_bytes).await;
        // A result or a JSON-RPC error in the body: a modern exchange.
        if out
            .as_ref()
            .map_or_else(|e| e.is::<ErrorObject>(), |_| true)
        {
            inner.era.modern();
        }
        return out;
    }
    let (parts, body) = res.into_parts();
    let body = read_small(body).await;
    let modern = is_modern_error(&body);
    if status == StatusCode::BAD_REQUEST && !modern {
        return Err(Box::new(NotModern(status)));
    }
    if modern || answers(&body, id) {
        inner.era.modern();
    }
    read_response(
        http::Response::from_parts(parts, Full::new(body)),
        id,
        route,
        inner.max_response_bytes,
    )
    .await
}

/// The modern request got a `400` without a recognized modern error body:
/// the server is of an earlier era.
#[derive(Debug)]
pub(super) struct NotModern(pub(super) StatusCode);

impl std::fmt::Display for NotModern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {} without a modern MCP error", self.0)
    }
}

impl std::error::Error for NotModern {}

/// A legacy request got `404` (not as its answer): the server ended the
/// session.
#[derive(Debug)]
pub(super) struct SessionGone;

impl std::fmt::Display for SessionGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the server ended the legacy session (HTTP 404)")
    }
}

impl std::error::Error for SessionGone {}

/// Whether a `4xx` body is a recognized modern JSON-RPC error: one of those
/// the spec names as modern servers' `400`s (Backward Compatibility) —
/// header validation (`HeaderMismatch`), `MissingRequiredClientCapability`,
/// `UnsupportedProtocolVersion` —, whatever its id.
fn is_modern_error(body: &[u8]) -> bool {
    matches!(
        Message::decode(body),
        Ok(Message::Response(r)) if r.outcome.as_ref().is_err_and(|e| matches!(
            e.code,
            ErrorObject::HEADER_MISMATCH
                | ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY
                | ErrorObject::UNSUPPORTED_PROTOCOL_VERSION
        ))
    )
}

/// How much of a `4xx` body is read to tell the era or the session's end.
const MAX_PROBE_BODY: usize = 64 << 10;

pub(super) async fn read_small(body: hyper::body::Incoming) -> Bytes {
    Limited::new(body, MAX_PROBE_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default()
}

/// Whether `body` is a JSON-RPC response to request `id`.
fn answers(body: &[u8], id: &RequestId) -> bool {
    matches!(Message::decode(body), Ok(Message::Response(r)) if r.id.as_ref() == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(id: serde_json::Value, code: i64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "m"}
        }))
        .unwrap()
    }

    /// The three errors the spec names are a modern server's `400`, with or
    /// without the request's id; any other error is not, with the id too.
    #[test]
    fn modern_errors_are_the_ones_the_spec_names_whatever_the_id() {
        for code in [
            ErrorObject::HEADER_MISMATCH,
            ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY,
            ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
        ] {
            assert!(is_modern_error(&error(7.into(), code)), "{code}");
            assert!(
                is_modern_error(&error(serde_json::Value::Null, code)),
                "{code}"
            );
        }
        for code in [
            ErrorObject::INVALID_REQUEST,
            ErrorObject::METHOD_NOT_FOUND,
            -32000,
        ] {
            assert!(!is_modern_error(&error(7.into(), code)), "{code}");
        }
        assert!(!is_modern_error(b""));
        assert!(!is_modern_error(b"Bad Request"));
        assert!(!is_modern_error(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#));
    }
}
