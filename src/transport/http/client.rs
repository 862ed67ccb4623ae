//! [`HttpClient`]: the Streamable HTTP client as a tower service.
//!
//! Each request is its own POST with the headers the spec requires
//! (`Accept`, `Content-Type`, `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` with the Base64 sentinel encoding when needed). The answer is
//! read in either shape: a JSON body, or an SSE stream (parsed with the
//! `sse-stream` crate) whose `notifications/progress` are recorded in the
//! request's [`ProgressTap`], so a [`ProgressResetLayer`](crate::ProgressResetLayer)
//! above sees them, and whose final response ends the call. A caller's
//! [`ProgressObserver`](crate::ProgressObserver) sees them without that layer
//! too: a request carrying an observer and no progress token is given one.
//!
//! **Dropping the call's future is the cancellation**: it drops the response
//! stream, which closes it — on HTTP/1.1 the connection is closed and not
//! reused, on HTTP/2 the stream is reset — and nothing else is posted.
//! A [`TimeoutLayer`](crate::TimeoutLayer) or
//! [`ProgressResetLayer`](crate::ProgressResetLayer) above therefore cancels
//! per spec when its limit fires.
//!
//! **`x-mcp-header`**: the client learns each tool's annotations from the
//! `tools/list` results that pass through it (per client; clones share
//! them). A tool whose annotations break the spec's constraints is removed
//! from the result the caller gets, with a `warn` naming the tool and the
//! reason; for the others, each `tools/call` carries the present, non-null
//! annotated arguments in `Mcp-Param-{Name}` headers (Base64 sentinel when
//! needed). Schemas can also be given by hand
//! ([`HttpClientBuilder::tool_schema`], [`HttpClient::register_tool_schema`]).
//! When a `tools/call` is refused with `HeaderMismatch` (`-32020`), the
//! client lists the tools again and, if that changed the headers the call
//! carries, sends it once more (the spec's SHOULD;
//! [`HttpClientBuilder::relist_on_header_mismatch`] turns it off); otherwise
//! the error comes back as that [`ErrorObject`].
//!
//! ```no_run
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::transport::http::HttpClient;
//! use tower_mcp_cancel::{McpRequest, ProgressResetLayer, TimeoutLayer};
//!
//! # #[tokio::main] async fn main() -> Result<(), tower_mcp_cancel::BoxError> {
//! let http = HttpClient::new("http://127.0.0.1:8080/mcp".parse()?);
//! let mut client = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_secs(300)))     // hard cap
//!     .layer(ProgressResetLayer::new(Duration::from_secs(30))) // idle, reset by progress
//!     .service(http);
//! let req = McpRequest::without_id("tools/call")
//!     .with_params(serde_json::json!({"name": "slow", "arguments": {"steps": 5}}));
//! let result = client.ready().await?.call(req).await?;
//! println!("{result}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sse_stream::SseStream;
use tokio::time::Instant;
use tower_service::Service;

use crate::cancel::current_drop_reason;
use crate::error::BoxError;
use crate::jsonrpc::{
    self, ErrorObject, Message, ProgressParams, RequestId, PROGRESS, PROTOCOL_VERSION_META,
};
use crate::transport::outbound::Outbound;
use crate::{McpRequest, ProgressTap};

use super::headers::{
    encode_header_value, name_field, MCP_METHOD_HEADER, MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
};
use super::param_headers::{InvalidParamHeader, ToolHeaderMap};
use crate::protocol::PROTOCOL_VERSION;

const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// An HTTP-level failure of a call (a JSON-RPC error answer is reported as
/// [`ErrorObject`] instead).
#[derive(Debug)]
#[non_exhaustive]
pub enum HttpClientError {
    /// The server answered with a status and a body that is not a JSON-RPC
    /// answer (e.g. a proxy's error page, or a legacy server's `404`).
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// The start of the body, for the message.
        body: String,
    },
    /// The SSE stream ended without the final response (the server went away).
    StreamEnded,
    /// The response was neither `application/json` nor `text/event-stream`.
    UnexpectedContentType(String),
    /// The answer did not parse as the response to this request.
    InvalidResponse(String),
    /// The request could not be sent as given (bad params, a method that is
    /// not a valid header value).
    InvalidRequest(String),
}

impl fmt::Display for HttpClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpClientError::Status { status, body } => {
                write!(f, "MCP server answered HTTP {status}")?;
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            HttpClientError::StreamEnded => {
                f.write_str("the SSE response stream ended without a response")
            }
            HttpClientError::UnexpectedContentType(ct) => {
                write!(f, "unexpected response content type {ct:?}")
            }
            HttpClientError::InvalidResponse(m) => write!(f, "invalid response: {m}"),
            HttpClientError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
        }
    }
}

impl std::error::Error for HttpClientError {}

struct Inner {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    protocol_version: String,
    client_info: Option<serde_json::Value>,
    headers: HeaderMap,
    outbound: Outbound,
    tools: RwLock<ToolHeaderMap>,
    relist_on_mismatch: bool,
}

impl Inner {
    fn tools(&self) -> std::sync::RwLockReadGuard<'_, ToolHeaderMap> {
        self.tools.read().unwrap_or_else(|e| e.into_inner())
    }

    fn tools_mut(&self) -> std::sync::RwLockWriteGuard<'_, ToolHeaderMap> {
        self.tools.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The Streamable HTTP client: `Service<McpRequest, Response = serde_json::Value>`.
/// See the [module docs](self). Clones share the connection pool and the id
/// counter.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("uri", &self.inner.uri)
            .field("protocol_version", &self.inner.protocol_version)
            .finish()
    }
}

/// Configures an [`HttpClient`].
#[derive(Debug)]
pub struct HttpClientBuilder {
    uri: Uri,
    http2: bool,
    protocol_version: String,
    client_info: Option<serde_json::Value>,
    headers: HeaderMap,
    tools: ToolHeaderMap,
    relist_on_mismatch: bool,
}

impl HttpClientBuilder {
    /// Whether a `tools/call` refused with `HeaderMismatch` (`-32020`) makes
    /// the client list the tools again and, if that changed the
    /// `Mcp-Param-*` headers the call carries, send it once more (the
    /// spec's SHOULD; default: on). The refused call never reached the
    /// handler, so sending it again cannot run it twice.
    pub fn relist_on_header_mismatch(mut self, on: bool) -> Self {
        self.relist_on_mismatch = on;
        self
    }

    /// Speak HTTP/2 without upgrade (prior knowledge, `h2c`), one stream per
    /// request over a shared connection.
    pub fn http2_prior_knowledge(mut self) -> Self {
        self.http2 = true;
        self
    }

    /// The protocol version sent in `MCP-Protocol-Version` and `_meta`
    /// (default `2026-07-28`).
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = version.into();
        self
    }

    /// The `io.modelcontextprotocol/clientInfo` sent with each request
    /// (default: this crate's name and version).
    pub fn client_info(mut self, name: &str, version: &str) -> Self {
        self.client_info = Some(serde_json::json!({ "name": name, "version": version }));
        self
    }

    /// Sends no `clientInfo`.
    pub fn without_client_info(mut self) -> Self {
        self.client_info = None;
        self
    }

    /// An extra header on every request (e.g. `Authorization`).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Registers a tool's `inputSchema` by hand, so its `x-mcp-header`
    /// parameters are mirrored without a `tools/list` first. An invalid
    /// annotation is logged (`warn`) and the tool left unregistered; use
    /// [`param_headers`](Self::param_headers) with a [`ToolHeaderMap`] to
    /// see the error.
    pub fn tool_schema(mut self, tool: &str, input_schema: &serde_json::Value) -> Self {
        if let Err(e) = self.tools.insert(tool, input_schema) {
            tracing::warn!(tool = %crate::cancel::sanitize_reason(tool), reason = %e, "tool definition rejected: invalid x-mcp-header annotation");
        }
        self
    }

    /// Starts from these tools' annotations (a later `tools/list` adds to
    /// and replaces them).
    pub fn param_headers(mut self, tools: ToolHeaderMap) -> Self {
        self.tools = tools;
        self
    }

    /// Builds the client.
    pub fn build(self) -> HttpClient {
        let mut builder = Client::builder(TokioExecutor::new());
        if self.http2 {
            builder.http2_only(true);
        }
        HttpClient {
            inner: Arc::new(Inner {
                client: builder.build_http(),
                uri: self.uri,
                protocol_version: self.protocol_version,
                client_info: self.client_info,
                headers: self.headers,
                outbound: Outbound::new(),
                tools: RwLock::new(self.tools),
                relist_on_mismatch: self.relist_on_mismatch,
            }),
        }
    }
}

impl HttpClient {
    /// A client for the MCP endpoint `uri` (`http://…`), over HTTP/1.1.
    pub fn new(uri: Uri) -> Self {
        Self::builder(uri).build()
    }

    /// A builder for the MCP endpoint `uri`.
    pub fn builder(uri: Uri) -> HttpClientBuilder {
        HttpClientBuilder {
            uri,
            http2: false,
            protocol_version: PROTOCOL_VERSION.to_owned(),
            client_info: Some(serde_json::json!({
                "name": env!("CARGO_PKG_NAME"),
                "version": env!("CARGO_PKG_VERSION"),
            })),
            headers: HeaderMap::new(),
            tools: ToolHeaderMap::new(),
            relist_on_mismatch: true,
        }
    }

    /// The endpoint.
    pub fn uri(&self) -> &Uri {
        &self.inner.uri
    }

    /// Registers (or replaces) a tool's `inputSchema`, whose `x-mcp-header`
    /// parameters are then mirrored on `tools/call`. An invalid schema is
    /// refused and forgets what was known of the tool.
    pub fn register_tool_schema(
        &self,
        tool: &str,
        input_schema: &serde_json::Value,
    ) -> Result<(), InvalidParamHeader> {
        self.inner.tools_mut().insert(tool, input_schema)
    }

    /// A copy of what the client knows of the tools' `x-mcp-header`
    /// annotations.
    pub fn param_headers(&self) -> ToolHeaderMap {
        self.inner.tools().clone()
    }
}

/// Logs a call dropped before its answer: closing the stream is the
/// cancellation, and both sides should log why.
struct DropLog {
    id: RequestId,
    method: String,
    started: Instant,
    done: bool,
}

impl DropLog {
    fn finish(&mut self) {
        self.done = true;
    }
}

impl Drop for DropLog {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let reason = current_drop_reason()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "caller dropped the request".into());
        tracing::info!(
            request_id = %self.id,
            method = %self.method,
            %reason,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "request cancelled; closing its HTTP response stream"
        );
    }
}

impl Service<McpRequest> for HttpClient {
    type Response = serde_json::Value;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<serde_json::Value, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: McpRequest) -> Self::Future {
        let inner = self.inner.clone();
        let id = match req.id() {
            Some(id) => id.clone(),
            None => {
                // Each call is its own stream: an id need not avoid others.
                let id = inner.outbound.next_id(|_| false);
                req.set_id(id.clone());
                id
            }
        };
        // Where progress goes; a caller's observer without a
        // ProgressResetLayer above gets a token here (any token will do: the
        // stream carries only this request's progress).
        let tap = inner.outbound.progress_route(&mut req, |_| false);
        let token = req.progress_token().cloned();
        // Everything that needs the request is done before the future, so
        // the future holds only what it sends and where progress goes (and,
        // for a tools/call, the request, in case it must be sent again).
        let prepared = prepare(&inner, &id, &req);
        let is_tools_list = req.method() == "tools/list";
        let mut log = DropLog {
            id: id.clone(),
            method: req.method().to_owned(),
            started: Instant::now(),
            done: false,
        };
        // What a second attempt after a HeaderMismatch needs: the request
        // (to mirror its arguments again), the headers first sent, and the
        // progress routing.
        let retry = (inner.relist_on_mismatch && req.method() == "tools/call").then(|| Retry {
            sent: prepared.as_ref().map(param_headers_of).unwrap_or_default(),
            tap: tap.clone(),
            token: token.clone(),
            req,
        });
        Box::pin(async move {
            let http_req = match prepared {
                Ok(r) => r,
                Err(e) => {
                    log.finish();
                    return Err(e.into());
                }
            };
            let mut out = exchange(&inner, http_req, &id, tap, token).await;
            if let Some(retry) = retry {
                if is_header_mismatch(&out) {
                    if let Some(again) = retry.again(&inner, &id).await {
                        out = again;
                    }
                }
            }
            log.finish();
            if is_tools_list {
                if let Ok(result) = out.as_mut() {
                    learn_tools(&inner, result);
                }
            }
            out
        })
    }
}

/// A `tools/call` that may be sent again after a `HeaderMismatch`.
struct Retry {
    req: McpRequest,
    sent: Vec<(HeaderName, HeaderValue)>,
    tap: Option<ProgressTap>,
    token: Option<jsonrpc::ProgressToken>,
}

/// The most `tools/list` pages read when listing again.
const RELIST_PAGES: usize = 32;

impl Retry {
    /// Lists the tools again; if that changed the call's `Mcp-Param-*`
    /// headers, sends it once more and returns that outcome.
    async fn again(
        self,
        inner: &Inner,
        id: &RequestId,
    ) -> Option<Result<serde_json::Value, BoxError>> {
        if let Err(e) = relist(inner).await {
            tracing::debug!(error = %e, "listing the tools again after a header mismatch failed");
            return None;
        }
        let http_req = prepare(inner, id, &self.req).ok()?;
        if param_headers_of(&http_req) == self.sent {
            return None; // the same headers would be refused again
        }
        tracing::debug!(request_id = %id, "tool schema changed; sending the call again");
        Some(exchange(inner, http_req, id, self.tap, self.token).await)
    }
}

fn param_headers_of(req: &Request<Full<Bytes>>) -> Vec<(HeaderName, HeaderValue)> {
    req.headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("mcp-param-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn is_header_mismatch(out: &Result<serde_json::Value, BoxError>) -> bool {
    matches!(out, Err(e) if e.downcast_ref::<ErrorObject>().is_some_and(|e| e.code == ErrorObject::HEADER_MISMATCH))
}

/// Lists the tools (every page, up to [`RELIST_PAGES`]) so that the client
/// learns their current annotations.
async fn relist(inner: &Inner) -> Result<(), BoxError> {
    let mut cursor: Option<String> = None;
    for _ in 0..RELIST_PAGES {
        let id = inner.outbound.next_id(|_| false);
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let req = McpRequest::new(id.clone(), "tools/list").with_params(params);
        let http_req = prepare(inner, &id, &req)?;
        let mut result = exchange(inner, http_req, &id, None, None).await?;
        learn_tools(inner, &mut result);
        match result.get("nextCursor").and_then(|c| c.as_str()) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Records the tools' annotations and drops the invalid tools from `result`.
fn learn_tools(inner: &Inner, result: &mut serde_json::Value) {
    let rejected = inner.tools_mut().learn_tools_list(result);
    for r in rejected {
        tracing::warn!(
            tool = %crate::cancel::sanitize_reason(&r.name),
            reason = %r.error,
            "tool definition rejected: invalid x-mcp-header annotation; removed from the tools/list result"
        );
    }
}

fn prepare(
    inner: &Inner,
    id: &RequestId,
    req: &McpRequest,
) -> Result<Request<Full<Bytes>>, HttpClientError> {
    let method = req.method();
    let params = req
        .wire_params()
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    let mut obj: serde_json::Map<String, serde_json::Value> = match params.as_deref() {
        None => serde_json::Map::new(),
        Some(p) => serde_json::from_str(p.get()).map_err(|_| {
            HttpClientError::InvalidRequest("params must be a JSON object over HTTP".into())
        })?,
    };
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
    let name = name_field(method)
        .and_then(|f| obj.get(f))
        .and_then(|v| v.as_str())
        .map(encode_header_value);
    let param_headers = if method == "tools/call" {
        let tool = obj.get("name").and_then(|v| v.as_str());
        let known = tool.and_then(|t| inner.tools().get_shared(t));
        match known {
            Some(h) => h
                .headers_for(obj.get("arguments"))
                .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?,
            None => Vec::new(),
        }
    } else {
        Vec::new()
    };
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

async fn exchange(
    inner: &Inner,
    http_req: Request<Full<Bytes>>,
    id: &RequestId,
    tap: Option<ProgressTap>,
    token: Option<jsonrpc::ProgressToken>,
) -> Result<serde_json::Value, BoxError> {
    let res = send(&inner.client, http_req).await?;
    read_response(res, id, tap, token).await
}

/// How often a request is tried again when the connection pool gave up on
/// it before it was sent (see [`send`]).
const CHECKOUT_RETRIES: usize = 3;

/// Sends `req`, trying again when hyper-util's pool reports
/// `CheckoutNoLongerWanted`: over HTTP/2, concurrent first requests share one
/// connection attempt, driven by one of them; if that one is cancelled
/// (dropped), the others fail with that error although nothing was sent, so
/// sending them again is safe and loses nothing.
async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
    let mut attempt = 0;
    let mut req = req;
    loop {
        let again = (attempt < CHECKOUT_RETRIES).then(|| copy_request(&req));
        match client.request(req).await {
            Err(e) if e.is_connect() && again.is_some() && is_checkout_gone(&e) => {
                attempt += 1;
                tracing::debug!(
                    attempt,
                    "connection attempt given up by the pool; sending again"
                );
                req = again.expect("checked above");
            }
            other => return other,
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

/// A response body that fails once more than `limit` bytes arrive without
/// the SSE parser giving out an event (`pending` is reset at each event), so
/// a server streaming one endless event cannot grow the client's memory.
struct EventBounded<B> {
    inner: B,
    pending: Arc<AtomicUsize>,
    limit: usize,
}

/// The error of an [`EventBounded`] body.
#[derive(Debug)]
enum EventBoundedError {
    Body(BoxError),
    TooLarge(usize),
}

impl fmt::Display for EventBoundedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Body(e) => write!(f, "response body: {e}"),
            Self::TooLarge(limit) => write!(f, "SSE event larger than {limit} bytes"),
        }
    }
}

impl std::error::Error for EventBoundedError {}

impl<B> http_body::Body for EventBounded<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = Bytes;
    type Error = EventBoundedError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, Bytes::len);
                let pending = this.pending.fetch_add(len, Ordering::Relaxed) + len;
                if pending > this.limit {
                    return Poll::Ready(Some(Err(EventBoundedError::TooLarge(this.limit))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(EventBoundedError::Body(Box::new(e)))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// Reads the answer to request `id` out of a response: a JSON body, or an
/// SSE stream whose progress goes to `tap`.
pub(crate) async fn read_response<B>(
    res: http::Response<B>,
    id: &RequestId,
    tap: Option<ProgressTap>,
    token: Option<jsonrpc::ProgressToken>,
) -> Result<serde_json::Value, BoxError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let status = res.status();
    let mime = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if status.is_success() && mime == "text/event-stream" {
        let pending = Arc::new(AtomicUsize::new(0));
        let body = EventBounded {
            inner: res.into_body(),
            pending: pending.clone(),
            limit: MAX_RESPONSE_BYTES,
        };
        let mut events = SseStream::new(body);
        while let Some(event) = events.next().await {
            let event = event?;
            // The parser buffers an event until its blank line: what it may
            // hold is what arrived since the last event it gave out.
            pending.store(0, Ordering::Relaxed);
            let Some(data) = event.data else { continue };
            if !matches!(event.event.as_deref(), None | Some("message")) {
                continue;
            }
            match Message::decode(data.as_bytes()) {
                Ok(Message::Response(r)) if r.id.as_ref() == Some(id) => return outcome(r.outcome),
                Ok(Message::Response(r)) => {
                    tracing::debug!(request_id = %id, other = ?r.id, "response for another id on this stream ignored");
                }
                Ok(Message::Notification(n)) if n.method == PROGRESS => {
                    let Some(params) = n.params else { continue };
                    let Ok(p) = serde_json::from_str::<ProgressParams>(params.get()) else {
                        tracing::debug!(request_id = %id, "malformed progress notification ignored");
                        continue;
                    };
                    if token.as_ref() != Some(&p.progress_token) {
                        tracing::debug!(request_id = %id, token = %p.progress_token, "progress for another token ignored");
                        continue;
                    }
                    if let Some(tap) = &tap {
                        tap.record_params(p);
                    }
                }
                Ok(Message::Notification(n)) => {
                    tracing::debug!(request_id = %id, method = ?n.method, "notification on the response stream");
                }
                Ok(Message::Request(r)) => {
                    tracing::debug!(request_id = %id, method = ?r.method, "server request on the response stream ignored (not allowed in 2026-07-28)");
                }
                Err(e) => {
                    tracing::debug!(request_id = %id, error = %e, "undecodable SSE event ignored");
                }
            }
        }
        return Err(HttpClientError::StreamEnded.into());
    }
    let body = Limited::new(res.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await?
        .to_bytes();
    match Message::decode(&body) {
        Ok(Message::Response(r)) if r.outcome.is_err() => outcome(r.outcome),
        Ok(Message::Response(r)) if status.is_success() => {
            if r.id.as_ref() != Some(id) {
                return Err(HttpClientError::InvalidResponse(format!(
                    "response id {:?} does not match request id {id}",
                    r.id
                ))
                .into());
            }
            outcome(r.outcome)
        }
        _ if status.is_success() && mime != "application/json" => {
            Err(HttpClientError::UnexpectedContentType(mime).into())
        }
        _ if status.is_success() => Err(HttpClientError::InvalidResponse(
            "the body is not a JSON-RPC response".into(),
        )
        .into()),
        _ => Err(HttpClientError::Status {
            status,
            body: crate::cancel::sanitize_reason(&String::from_utf8_lossy(&body)),
        }
        .into()),
    }
}

fn outcome(
    outcome: Result<Box<serde_json::value::RawValue>, ErrorObject>,
) -> Result<serde_json::Value, BoxError> {
    match outcome {
        Ok(raw) => Ok(serde_json::from_str(raw.get())?),
        Err(e) => Err(Box::new(e)),
    }
}

#[cfg(test)]
mod event_bound_tests {
    use super::*;
    use http_body_util::StreamBody;

    fn sse(
        body: impl http_body::Body<Data = Bytes, Error = std::io::Error> + Unpin,
    ) -> http::Response<impl http_body::Body<Data = Bytes, Error = std::io::Error> + Unpin> {
        http::Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(body)
            .unwrap()
    }

    /// A server streaming one `data:` line that never ends is cut off at the
    /// limit instead of growing the client's memory without bound.
    #[tokio::test]
    async fn an_endless_sse_event_is_refused() {
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        let head = futures_util::stream::once(std::future::ready(Ok(http_body::Frame::data(
            Bytes::from_static(b"data: "),
        ))));
        let endless = futures_util::stream::repeat_with(move || {
            Ok::<_, std::io::Error>(http_body::Frame::data(chunk.clone()))
        });
        let body = StreamBody::new(head.chain(endless));
        let res = sse(body);
        let err = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            read_response(res, &RequestId::Number(1), None, None),
        )
        .await
        .expect("bounded")
        .unwrap_err();
        assert!(err.to_string().contains("SSE event larger than"), "{err}");
    }

    /// Many small events add up to far more than the limit and are fine: the
    /// bound is per event.
    #[tokio::test]
    async fn the_bound_is_per_event() {
        let progress = Bytes::from_static(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/ping\"}\n\n",
        );
        let n = (MAX_RESPONSE_BYTES / progress.len()) + 1000;
        let events = futures_util::stream::iter(
            (0..n).map(move |_| Ok::<_, std::io::Error>(http_body::Frame::data(progress.clone()))),
        );
        let last = futures_util::stream::once(std::future::ready(Ok(http_body::Frame::data(
            Bytes::from_static(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n\n",
            ),
        ))));
        let res = sse(StreamBody::new(events.chain(last)));
        let v = read_response(res, &RequestId::Number(1), None, None)
            .await
            .unwrap();
        assert_eq!(v["ok"], true);
    }
}
