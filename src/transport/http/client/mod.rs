//! [`HttpClient`]: the Streamable HTTP client as a tower service.
//!
//! Each request is its own POST with the headers the spec requires
//! (`Accept`, `Content-Type`, `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` with the Base64 sentinel encoding when needed). The answer is
//! read in either shape: a JSON body, or an SSE stream (parsed with the
//! `sse-stream` crate) whose `notifications/progress` are recorded in the
//! request's [`ProgressTap`](crate::ProgressTap), so a [`ProgressResetLayer`](crate::ProgressResetLayer)
//! above sees them, and whose final response ends the call. A caller's
//! [`ProgressObserver`](crate::ProgressObserver) sees them without that layer
//! too: a request carrying an observer and no progress token is given one.
//!
//! **Dropping the call's future is the cancellation**: it drops the response
//! stream, which closes it — on HTTP/1.1 the connection is closed and not
//! reused, on HTTP/2 the stream is reset — and, with a 2026 server, nothing
//! else is posted. A [`TimeoutLayer`](crate::TimeoutLayer) or
//! [`ProgressResetLayer`](crate::ProgressResetLayer) above therefore cancels
//! per spec when its limit fires.
//!
//! **Both eras**: the first request goes out in the 2026 shape. A server
//! that answers it with `400 Bad Request` whose body is not a recognized
//! modern error (a 2025-era server, e.g. "Server not initialized" or
//! "Unsupported protocol version") is spoken to in its revision from then on:
//! the client sends `initialize` and `notifications/initialized`, keeps the
//! `Mcp-Session-Id` and the negotiated `MCP-Protocol-Version` for every later
//! request, and a dropped call also POSTs `notifications/cancelled` (its id,
//! the drop's reason) in the session, from a task (at most 64 under way,
//! 10 s each), since closing a stream is not a cancellation there.
//! [`HttpClient::close`] `DELETE`s the session (the last clone's drop does
//! it in the background, as it does for a session whose handshake did not
//! complete: the call running it was dropped, or it failed); a session the
//! server ended (`404`) is initialized again. [`HttpClient::server_era`] tells what was found. The same layer
//! stack works on both. That `400` is the spec's only signal: any other
//! refusal (`401`, `403`, `404`, `413`, `429`, …) or a connection failure
//! is the error of that call, and the client stays in its era.
//!
//! **Answers are bounded**: a JSON body, or one SSE event, over
//! [`HttpClientBuilder::max_response_bytes`] (64 MiB by default) is not
//! buffered; its call fails with [`HttpClientError::ResponseTooLarge`],
//! which names the limit, and other calls go on.
//!
//! **Ids and progress tokens** are unique among the client's calls in flight
//! (its clones share them), in both eras: those the client assigns skip the
//! ones in use, and a call whose own id or token is already in flight fails
//! at once with `-32600` without being sent — the rule of the stdio client
//! too. In a 2025 session, a cancelled call's id stays in use until its
//! `notifications/cancelled` is posted, so that no later call is cancelled
//! by it.
//!
//! **HTTPS** (feature `tls`): rustls with ring through hyper-rustls, the
//! platform's roots (or `SSL_CERT_FILE` / `SSL_CERT_DIR`) and
//! `HttpClientBuilder::tls_root_certificate`. A connection failure is the
//! [`HttpClientError`] variant of what failed (refused, DNS, TLS and why, …;
//! [`HttpClientError::is_connect`] holds for all).
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
//! the error comes back as that [`ErrorObject`](crate::jsonrpc::ErrorObject).
//!
//! ```no_run
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::transport::http::HttpClient;
//! use tower_mcp_cancel::{McpRequest, ProgressResetLayer, TimeoutLayer};
//!
//! # #[tokio::main] async fn main() -> Result<(), tower::BoxError> {
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
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll};

use http::{HeaderMap, Uri};
use tokio::sync::Semaphore;
use tower_service::Service;
use tracing::Instrument;

use crate::error::BoxError;
use crate::jsonrpc::RequestId;
use crate::protocol::PROTOCOL_VERSION;
use crate::transport::call::client::{Abandon, Outbound, Pending};
use crate::transport::http::param_headers::{InvalidParamHeader, ToolHeaderMap};
use crate::{CancelReason, McpRequest};

mod builder;
mod call;
mod connector;
mod era;
mod error;
mod request;
mod response;
mod send;
mod tools;
mod wire_body;

#[cfg(any(all(test, feature = "stdio"), feature = "fuzzing"))]
pub(crate) use response::MAX_RESPONSE_BYTES;

pub use builder::HttpClientBuilder;
pub use era::ServerEra;
pub use error::HttpClientError;
#[cfg(feature = "fuzzing")]
pub(crate) use response::read_response;

use call::{Call, SentIn};
use connector::PooledClient;
use era::{EraCell, Legacy};

struct Inner {
    client: PooledClient,
    uri: Uri,
    protocol_version: String,
    client_info: Option<serde_json::Value>,
    headers: HeaderMap,
    outbound: Outbound,
    /// The ids and progress tokens of the calls in flight.
    in_flight: Arc<Mutex<Pending<()>>>,
    tools: RwLock<ToolHeaderMap>,
    relist_on_mismatch: bool,
    era: EraCell,
    /// Bounds the `notifications/cancelled` POSTs under way.
    pending_cancels: Arc<Semaphore>,
    /// The `_meta` key each request's budget is written under, if any.
    budget_key: Option<crate::timeout::BudgetKey>,
    /// The largest JSON body, or SSE event, read from the server.
    max_response_bytes: usize,
}

impl Inner {
    fn tools(&self) -> RwLockReadGuard<'_, ToolHeaderMap> {
        self.tools.read().unwrap_or_else(|e| e.into_inner())
    }

    fn tools_mut(&self) -> RwLockWriteGuard<'_, ToolHeaderMap> {
        self.tools.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// A request's id (and progress token) in the client's table of calls in
/// flight, until it is dropped.
struct Lease {
    table: Arc<Mutex<Pending<()>>>,
    id: RequestId,
}

impl Lease {
    /// A fresh id for a request of the client's own (`initialize`, a
    /// `tools/list` again).
    fn fresh(inner: &Inner) -> Self {
        let id = lock(&inner.in_flight).fresh(&inner.outbound, ());
        Self {
            table: inner.in_flight.clone(),
            id,
        }
    }

    fn id(&self) -> &RequestId {
        &self.id
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        lock(&self.table).take(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last clone is gone without `close`: end the legacy session.
        if let Some(legacy) = self.era.take_session() {
            era::spawn_delete(self, legacy, None);
        }
    }
}

/// The Streamable HTTP client: `Service<McpRequest, Response = serde_json::Value>`.
/// See the [module docs](self). Clones share the connection pool, the ids
/// and progress tokens in flight and what is known of the server's era (and
/// its legacy session).
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("uri", &self.inner.uri)
            .field("protocol_version", &self.inner.protocol_version)
            .field("era", &self.inner.era.public())
            .finish()
    }
}
impl HttpClient {
    /// A client for the MCP endpoint `uri` (`http://…`, or `https://…` with
    /// feature `tls`), over HTTP/1.1 (HTTP/2 when TLS negotiates it).
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
            stateful_fallback: true,
            tls: Default::default(),
            budget_key: None,
            connect_timeout: Some(connector::DEFAULT_CONNECT_TIMEOUT),
            max_response_bytes: response::MAX_RESPONSE_BYTES,
        }
    }

    /// The endpoint.
    pub fn uri(&self) -> &Uri {
        &self.inner.uri
    }

    /// What the client knows of the server's era: unknown before the first
    /// answer, then modern, or legacy (after the `initialize` fallback).
    pub fn server_era(&self) -> ServerEra {
        self.inner.era.public()
    }

    /// Ends the legacy session, if there is one (`DELETE` with its
    /// `Mcp-Session-Id`, awaited); the next call detects the era again.
    /// Without it, the session is deleted in the background when the last
    /// clone of the client is dropped inside a tokio runtime.
    ///
    /// It first waits (10 s at most) for the `notifications/cancelled` of
    /// dropped calls still under way (and the `DELETE`s of sessions whose
    /// handshake did not complete), so that a program that drops a call
    /// and then closes the client before it exits has told the server.
    pub async fn close(&self) -> Result<(), BoxError> {
        let all = era::MAX_PENDING_CANCELS as u32;
        let _ = tokio::time::timeout(
            era::BACKGROUND_POST_TIMEOUT,
            self.inner.pending_cancels.acquire_many(all),
        )
        .await;
        match self.inner.era.take_session() {
            Some(legacy) => era::delete(&self.inner, &legacy).await,
            None => Ok(()),
        }
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

impl Service<McpRequest> for HttpClient {
    type Response = serde_json::Value;
    type Error = BoxError;
    /// Boxed; dropping it before it is ready cancels the request.
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<serde_json::Value, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: McpRequest) -> Self::Future {
        let inner = self.inner.clone();
        // Unique among the calls in flight, though each is its own stream:
        // the server sees them all (a caller's observer without a
        // ProgressResetLayer above gets a token here).
        let registered = lock(&inner.in_flight).register(&inner.outbound, &mut req, |_| false, ());
        let (id, route) = match registered {
            Ok(r) => r,
            Err(refused) => return Box::pin(async move { Err(Box::new(refused) as BoxError) }),
        };
        let (call, guard) = Call::prepare(inner, id, route, req);
        let span = guard.span();
        Box::pin(call.run(guard).instrument(span))
    }
}

/// Cancelling an HTTP call: dropping its response stream, which closes it
/// (HTTP/1.1: the connection is closed, not reused; HTTP/2: the stream is
/// reset). On a legacy connection, where a closed stream is not a
/// cancellation, `notifications/cancelled` is posted too, from a task.
/// Holds the call's id in flight: released with the call, or, in a legacy
/// session, once its cancel is posted.
struct CancelHttp {
    inner: Arc<Inner>,
    sent_in: SentIn,
    lease: Option<Lease>,
}

impl CancelHttp {
    fn legacy(&self) -> Option<Arc<Legacy>> {
        self.sent_in
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Abandon for CancelHttp {
    fn abandon(&mut self, _id: &RequestId) -> Option<&'static str> {
        Some(match self.legacy() {
            Some(_) => "closing its HTTP response stream and posting notifications/cancelled (legacy session)",
            None => "closing its HTTP response stream",
        })
    }

    fn cancel(&mut self, _id: &RequestId, reason: CancelReason) {
        if let (Some(legacy), Some(lease)) = (self.legacy(), self.lease.take()) {
            era::spawn_cancel(&self.inner, &legacy, lease, &reason);
        }
    }
}
