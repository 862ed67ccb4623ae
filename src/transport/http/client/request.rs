//! One POST: the request's body with its `_meta`, the headers the spec
//! requires, and sending it (again, when the pool gave up on it before it
//! was sent).

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};

use super::connector::{check_scheme, classify, PooledClient};
use super::era::{is_modern_error, NotModern, SessionGone};
use super::response::read_response;
use super::{HttpClientError, Inner};
use crate::error::BoxError;
use crate::jsonrpc::{self, ErrorObject, RequestId, PROTOCOL_VERSION_META};
use crate::transport::call::client::Route;
use crate::transport::http::headers::{
    encode_header_value, name_field, MCP_METHOD_HEADER, MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
};
use crate::McpRequest;

pub(super) const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
pub(super) const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

type Params = serde_json::Map<String, serde_json::Value>;

/// The POST of request `id`: its body, with the `_meta` every request
/// carries, and its headers (protocol version, method, name, the caller's
/// extra headers and, for a `tools/call`, the `Mcp-Param-*` headers).
pub(super) fn prepare(
    inner: &Inner,
    id: &RequestId,
    req: &McpRequest,
) -> Result<Request<Full<Bytes>>, HttpClientError> {
    let method = req.method();
    let params = crate::timeout::wire_params(req, inner.budget_key.as_ref())
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
    let body = jsonrpc::encode_request(id, method, Some(&params))
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;

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
    let mut http_req = builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    for (k, v) in &inner.headers {
        http_req.headers_mut().append(k.clone(), v.clone());
    }
    for (k, v) in param_headers {
        http_req.headers_mut().insert(k, v);
    }
    Ok(http_req)
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
    http_req: Request<Full<Bytes>>,
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
/// is not a recognized modern error: that is [`NotModern`], and the caller
/// falls back. A success, or a modern error under any status, makes the
/// client modern. Anything else — another status (`401`, `404`, `413`,
/// `429`, …) without a modern error — is this call's error and tells
/// nothing of the era.
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
    let modern = is_modern_error(&body, id);
    if status == StatusCode::BAD_REQUEST && !modern {
        return Err(Box::new(NotModern(status)));
    }
    if modern {
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
    matches!(crate::jsonrpc::Message::decode(body), Ok(crate::jsonrpc::Message::Response(r)) if r.id.as_ref() == Some(id))
}

/// How often a request is tried again when the connection pool gave up on
/// it before it was sent (see [`send`]).
const CHECKOUT_RETRIES: usize = 3;

/// Sends `req`, trying again when hyper-util's pool reports
/// `CheckoutNoLongerWanted`: over HTTP/2, concurrent first requests share one
/// connection attempt, driven by one of them; if that one is cancelled
/// (dropped), the others fail with that error although nothing was sent, so
/// sending them again is safe and loses nothing. A connection failure comes
/// back as the [`HttpClientError`] variant of what failed
/// ([`HttpClientError::is_connect`]).
pub(super) async fn send(
    client: &PooledClient,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
    let uri = req.uri().clone();
    check_scheme(&uri)?;
    let mut attempt = 0;
    let mut req = req;
    loop {
        let again = (attempt < CHECKOUT_RETRIES).then(|| copy_request(&req));
        match client.request(req).await {
            Err(e) if e.is_connect() && is_checkout_gone(&e) => match again {
                Some(again) => {
                    attempt += 1;
                    tracing::debug!(
                        attempt,
                        "connection attempt given up by the pool; sending again"
                    );
                    req = again;
                }
                None => return Err(classify(&uri, e)),
            },
            Err(e) => return Err(classify(&uri, e)),
            Ok(res) => return Ok(res),
        }
    }
}

fn is_checkout_gone(e: &hyper_util::client::legacy::Error) -> bool {
    format!("{e:?}").contains("CheckoutNoLongerWanted")
}

fn copy_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}
