//! [`StreamableHttpService`], the Streamable HTTP server adapter, and its
//! [`Layer`].

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;
use tower_service::Service;

use super::body::ResponseBody;
use super::config::{Config, StatefulRequests};
use super::handle;
use super::origin::OriginPolicy;
use super::param_headers::ToolHeaderMap;
use crate::error::BoxError;
use crate::transport::McpService;

/// The Streamable HTTP server adapter around an MCP request service `S`.
///
/// A tower service over `http::Request<B>` that turns each POST on the MCP
/// endpoint into one call of an MCP request service (your layer stack), and
/// whose response owns that call: **dropping the response — the future, or
/// the SSE body once streaming — drops the handler future and fires its
/// [`Cancellation`](crate::Cancellation) with
/// [`CancelReason::ClientDisconnected`](crate::CancelReason::ClientDisconnected)**. hyper drops
/// them when the client closes the connection (HTTP/1.1) or resets the stream
/// (HTTP/2), so a client that goes away cancels its request, as the spec says.
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder};
/// use tower_mcp_cancel::transport::http::{OriginPolicy, StreamableHttpService};
/// use tower::BoxError;
/// use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, TimeoutLayer};
///
/// let mcp = ServiceBuilder::new()
///     .layer(CancelOnDisconnectLayer::new())
///     .layer(TimeoutLayer::new(Duration::from_secs(60)))
///     .service(service_fn(|req: McpRequest| async move {
///         Ok::<_, BoxError>(serde_json::json!({"resultType": "complete", "method": req.method()}))
///     }));
/// let endpoint = StreamableHttpService::new(mcp)
///     .origin_policy(OriginPolicy::Localhost)
///     .max_body_bytes(1 << 20)
///     .keep_alive(Some(Duration::from_secs(15)));
/// let app: axum::Router = axum::Router::new().route_service("/mcp", endpoint);
/// # let _ = app;
/// ```
///
/// What it does with a request, in order:
///
/// 1. `Origin` not allowed by the [`OriginPolicy`] → `403`. Not `POST` →
///    `405` (`GET` included: there is no GET stream; `DELETE` too unless
///    [legacy sessions](StreamableHttpService::stateful_sessions) are on). `Accept` without both `application/json` and
///    `text/event-stream` → `406`. A `Content-Type` other than JSON → `415`.
/// 2. A body over the limit → `413` (also when a tower-http
///    `RequestBodyLimitLayer` outside cut it). Not JSON-RPC → `400` with the
///    parse / invalid-request error. A notification → `202`, no body. A
///    response → `400`.
/// 3. A request: `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` checked
///    against the body → `400` with `HeaderMismatch` (`-32020`); an
///    unsupported version → `400` with `UnsupportedProtocolVersion`
///    (`-32022`, `data.supported`). For a `tools/call` of a tool whose
///    schema the adapter was given ([`param_headers`](StreamableHttpService::param_headers),
///    [`tool_schema`](StreamableHttpService::tool_schema),
///    [`tools`](StreamableHttpService::tools)), its `Mcp-Param-{Name}`
///    headers too (see [`param_headers`](super::param_headers)): a missing,
///    different, unreadable or repeated one → `400` with `HeaderMismatch`
///    naming it.
/// 4. The call: the request gets a [`Cancellation`](crate::Cancellation) and a
///    notifier in its extensions (reached through [`RequestContext`](crate::RequestContext)) (plus the HTTP request's
///    own extensions and its `HeaderMap`). If the handler answers before it
///    sends any notification, the answer is `application/json` (status `404`
///    for `-32601` method-not-found, `400` for the `-32020..-32022` protocol
///    errors, `200` otherwise). If a notification comes first, the response
///    becomes `text/event-stream`: the request's notifications, then the
///    answer, which ends the stream; `X-Accel-Buffering: no`; `:` keep-alive
///    comments when quiet. A handler still silent after
///    [`sse_after`](StreamableHttpService::sse_after) (10 s by default) gets
///    the SSE shape too — a `:` comment at once, keep-alives, then its
///    answer — so that an idle proxy does not cut a long quiet call. A call
///    that ends with [`Cancelled`](crate::Cancelled) on its own (nobody
///    cancelled the request) is answered with a `-32603` error like any
///    other failure.
/// 5. `subscriptions/listen` streams at once and stays open until the handler
///    ends (its result, with the subscription id added, closes the stream;
///    if it ends as [`Cancelled`](crate::Cancelled) on its own — the server
///    tore the subscription down — a `notifications/cancelled` referencing
///    the listen id closes it instead), the client closes it (the handler is dropped, token fired), or the
///    [shutdown token](StreamableHttpService::shutdown) fires (the handler is
///    dropped and the graceful listen result is sent, then the stream closes).
/// 6. The [shutdown token](StreamableHttpService::shutdown) cancels every
///    other request in flight too, with `CancelReason::Shutdown`: `503` if
///    no byte was sent yet, otherwise the SSE stream ends without an answer.
///
/// # Earlier revisions (2025-03-26 … 2025-11-25)
///
/// A request without `MCP-Protocol-Version` is rejected, unless
/// [`accept_missing_version`](StreamableHttpService::accept_missing_version)
/// is on: it is then a 2025-03-26 request like those below.
/// A request whose `MCP-Protocol-Version` is an earlier revision is passed to
/// the MCP service unchanged, without the 2026 requirements (those clients
/// do not send `Mcp-Method` or `_meta` versions) — but an `Mcp-Method` or
/// `Mcp-Name` header it does send must match the body (`400`
/// `HeaderMismatch`), and a body carrying
/// `_meta["io.modelcontextprotocol/protocolVersion"]` is a 2026 request
/// whatever the header says (a 2025 header on it is a mismatch): a header
/// cannot switch the checks, or cancel-on-disconnect, off. By default a
/// disconnect does **not** cancel it: in those revisions disconnection is not
/// cancellation, so the handler is left to run on (until its end, or the
/// [shutdown](StreamableHttpService::shutdown) after the drain grace, as
/// any request) and its answer is
/// discarded. [`StatefulRequests`] changes that. Without
/// [`stateful_sessions`](StreamableHttpService::stateful_sessions), what the
/// adapter does not do of the 2025 transport: sessions (`Mcp-Session-Id` is
/// ignored, never minted or echoed; `DELETE` gets `405`), and
/// `notifications/cancelled` posted by a 2025 client (answered `202` and
/// dropped: without sessions its request id cannot be resolved). With it,
/// an `initialize` opens a session and that session's
/// `notifications/cancelled` and `DELETE` cancel its requests (see
/// [`session`](super::session)). Never done: the GET stream (`405`),
/// resumability (`Last-Event-ID` is ignored), server-to-client requests on
/// SSE streams.
#[derive(Clone)]
pub struct StreamableHttpService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> fmt::Debug for StreamableHttpService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamableHttpService")
            .field("config", &self.config)
            .finish()
    }
}

impl<S> StreamableHttpService<S> {
    /// The adapter around `inner`, with the defaults: localhost origins only,
    /// 4 MiB bodies, keep-alive every 15 s, SSE after 10 s of silence,
    /// 2026-07-28 supported, earlier revisions served without
    /// cancel-on-disconnect, a request without `MCP-Protocol-Version`
    /// rejected, no `Mcp-Param-*` checks (no tool schemas known).
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            config: Arc::new(Config::default()),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Sets the `Origin` policy (DNS-rebinding protection; default
    /// [`OriginPolicy::Localhost`]).
    #[must_use]
    pub fn origin_policy(mut self, policy: OriginPolicy) -> Self {
        self.config_mut().origin = policy;
        self
    }

    /// Sets the body size limit (default 4 MiB); larger bodies get `413`.
    #[must_use]
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.config_mut().max_body_bytes = limit;
        self
    }

    /// Sets how long the request body may stall: a body whose next chunk
    /// does not come within this time of the previous one (or of the
    /// request head) is refused with `408` and the handler is not called.
    /// A slow upload that keeps sending is not affected. `None`: no timer
    /// (default 30 s; any value is accepted). The [shutdown token](Self::shutdown) also ends
    /// the wait for a body, with `503`.
    #[must_use]
    pub fn body_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config_mut().body_timeout = timeout;
        self
    }

    /// Sets the keep-alive interval of SSE responses (default 15 s; `None`:
    /// no keep-alives).
    /// Keep-alives are SSE comments: a client never counts them as progress.
    #[must_use]
    pub fn keep_alive(mut self, interval: Option<Duration>) -> Self {
        self.config_mut().keep_alive = interval;
        self
    }

    /// Sets the protocol versions accepted as modern (default: `2026-07-28`).
    #[must_use]
    pub fn supported_versions<I, V>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = V>,
        V: Into<String>,
    {
        self.config_mut().supported = versions.into_iter().map(Into::into).collect();
        self
    }

    /// Sets what happens with requests of the stateful (2025) revisions (default
    /// [`StatefulRequests::Serve`]).
    #[must_use]
    pub fn stateful_requests(mut self, legacy: StatefulRequests) -> Self {
        self.config_mut().legacy = legacy;
        self
    }

    /// Accepts a request without an `MCP-Protocol-Version` header, as
    /// protocol version `2025-03-26` (the spec's MAY, for clients older than
    /// 2025-06-18, which did not send it): it then follows the
    /// [`StatefulRequests`] setting like any 2025 request. Off by default: such
    /// a request is rejected with `400` `HeaderMismatch`.
    ///
    /// A body that carries `_meta["io.modelcontextprotocol/protocolVersion"]`
    /// is not from such a client, and stays rejected: leaving the header
    /// out must not be a way around the modern header checks.
    #[must_use]
    pub fn accept_missing_version(mut self, on: bool) -> Self {
        self.config_mut().missing_version_legacy = on;
        self
    }

    /// Serves 2025-era clients with sessions, as far as cancellation needs
    /// them (off by default; see [`session`](super::session)): an
    /// `initialize` without a modern `_meta` (with no
    /// `MCP-Protocol-Version` header, or a 2025 one) is served and its
    /// answer carries a new `Mcp-Session-Id`; later requests with that id
    /// are legacy requests of the session, whose `notifications/cancelled`
    /// cancels them by id and whose `DELETE` ends it (cancelling what is
    /// in flight); an unknown or expired id gets `404`. Sessions are
    /// bounded by `limits` (count, idle expiry); at the bound a new
    /// `initialize` gets `503`.
    ///
    /// A legacy request's disconnect still follows [`StatefulRequests`]
    /// (not cancelled by default). Modern (2026-07-28) requests stay
    /// stateless: an `Mcp-Session-Id` on them is ignored.
    ///
    /// Each call creates a new, empty store, shared by the clones of this
    /// adapter (and by the services made from it [as a layer](Layer)).
    #[must_use]
    pub fn stateful_sessions(mut self, limits: super::SessionLimits) -> Self {
        self.config_mut().sessions = Some(Arc::new(super::session::Sessions::new(limits)));
        self
    }

    /// Sets how long a handler may stay silent before the answer switches to
    /// SSE (`None`: never). A handler that sends no notification is normally
    /// answered with `application/json` once it is done; until then nothing
    /// is written, and an idle proxy or client timeout may cut the
    /// connection. After this delay the response becomes
    /// `text/event-stream` instead: an SSE comment at once, then keep-alive
    /// comments at the [keep-alive](Self::keep_alive) interval, then the
    /// handler's notifications and answer. Comments are never progress: a
    /// client's idle limit is not reset by them. A disconnect still cancels.
    ///
    /// Default: 10 s. The spec makes clients accept
    /// both shapes, so the switch costs nothing to a conforming client, while
    /// common proxy idle limits are 30–60 s: the first bytes at 10 s and then
    /// every 15 s stay well inside them. What changes for a slow handler is
    /// that its answer comes with status `200` inside the stream even when it
    /// is an error (e.g. `-32601`, which is `404` as JSON).
    #[must_use]
    pub fn sse_after(mut self, delay: Option<Duration>) -> Self {
        self.config_mut().sse_after = delay;
        self
    }

    /// Sets the `x-mcp-header` annotations of the tools: for a `tools/call`
    /// of a tool in the map, each annotated argument present (non-null) in
    /// the body must come with its `Mcp-Param-{Name}` header, equal after
    /// decoding (integers numerically), or the request is rejected with
    /// `400` `HeaderMismatch` naming the header. Other `Mcp-Param-*` headers
    /// are ignored, and so are calls of tools not in the map.
    #[must_use]
    pub fn param_headers(mut self, tools: ToolHeaderMap) -> Self {
        self.config_mut().param_headers = Arc::new(tools);
        self
    }

    /// Adds one tool's `inputSchema` to the [`param_headers`](Self::param_headers)
    /// map. An invalid annotation is logged (`warn`) and the tool left out —
    /// conforming clients do not list it either.
    #[must_use]
    pub fn tool_schema(mut self, tool: &str, input_schema: &serde_json::Value) -> Self {
        let map = Arc::make_mut(&mut self.config_mut().param_headers);
        if let Err(e) = map.insert(tool, input_schema) {
            tracing::warn!(tool = %crate::sanitize::for_log(tool), reason = %e, "tool has an invalid x-mcp-header annotation; its Mcp-Param headers are not checked");
        }
        self
    }

    /// Sets the [`param_headers`](Self::param_headers) map from the server's
    /// `tools/list` result (`{"tools": [...]}`) or a bare array of tool
    /// definitions; invalid tools are logged (`warn`) and left out.
    #[must_use]
    pub fn tools(self, tools: &serde_json::Value) -> Self {
        let (map, rejected) = ToolHeaderMap::from_tools(tools);
        for r in rejected {
            tracing::warn!(tool = %crate::sanitize::for_log(&r.name), reason = %r.error, "tool has an invalid x-mcp-header annotation; its Mcp-Param headers are not checked");
        }
        self.param_headers(map)
    }

    /// Sets the server's shutdown token: when it fires, every request in
    /// flight on this endpoint is cancelled with
    /// [`CancelReason::Shutdown`](crate::CancelReason::Shutdown) (its
    /// handler future dropped, its token fired): one still waiting for its
    /// first byte is answered `503` with no body, an SSE stream ends without
    /// an answer, and an open `subscriptions/listen` stream gets its graceful
    /// result before it closes. Requests arriving later get `503` without
    /// their handler being called. Fire the same token as axum's
    /// `with_graceful_shutdown` signal (or hyper-util's graceful shutdown) so
    /// the server returns as soon as those responses are out.
    #[must_use]
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.config_mut().shutdown = Some(token);
        self
    }

    /// How long requests in flight may go on once the
    /// [shutdown token](Self::shutdown) fired (default zero: none, they are
    /// cancelled at once).
    ///
    /// During the grace new requests get `503`, open `subscriptions/listen`
    /// streams get their graceful result at once, and other requests may
    /// finish and are answered as usual; those still running when it is
    /// over are cancelled with
    /// [`CancelReason::Shutdown`](crate::CancelReason::Shutdown) (handler
    /// future dropped, token fired): `503` if no byte was sent, otherwise the
    /// SSE stream ends without an answer. With [`serve`](super::serve) on the
    /// same token, the server returns once they are all done.
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config_mut().drain_grace = grace;
        self
    }

    /// The cooperative grace of cancelled requests, by method, and by tool
    /// for a `tools/call` (a [tool entry](crate::MethodPolicy::tool) comes before the
    /// `tools/call` entry; default
    /// zero for every method: none, a cancel drops the handler future at
    /// once; an entry of
    /// [`method_unlimited`](crate::MethodPolicy::method_unlimited) also
    /// means none; a `subscriptions/listen` never gets one). A request's
    /// own [`Cancellation::set_grace`](crate::Cancellation::set_grace)
    /// overrides it.
    ///
    /// On a cancel — a 2026 client's disconnect, a 2025 session's
    /// `notifications/cancelled` or `DELETE`, a `TimeoutLayer` or
    /// `ProgressResetLayer` expiry in the stack, the shutdown after the
    /// [drain grace](Self::drain_grace) — the request's token fires at
    /// once and the client sees what it sees without a grace, at the same
    /// moment; the handler future is then polled for up to the grace, so
    /// that a handler that waits on its token can finish its cleanup, and
    /// dropped. Nothing it sends meanwhile goes out; it keeps its place
    /// under [`max_in_flight`](Self::max_in_flight), and
    /// [`serve`](super::serve()) returns only once it ended. See the
    /// [transport docs](crate::transport#cooperative-grace-then-drop).
    #[must_use]
    pub fn grace(mut self, policy: crate::MethodPolicy<Duration>) -> Self {
        self.config_mut().grace = policy;
        self
    }

    /// Bounds the MCP requests this adapter runs at once (default 1024,
    /// what the stdio server lets one connection run; at least 1).
    ///
    /// Every request whose handler is called counts, from the call until
    /// its end: attached to its response, detached (a 2025-era request
    /// whose client hung up runs on, see [`StatefulRequests::Serve`]), and
    /// open `subscriptions/listen` streams. Notifications, `DELETE` and
    /// refused requests do not. A request past the bound is answered at
    /// once, without calling the handler: `503` with `Retry-After: 1` and
    /// a JSON-RPC error (`-32603`, "the server has its maximum of N
    /// requests in flight"). The count is shared by the clones of this
    /// adapter (and by the services made from it [as a layer](Layer)); each
    /// call of this method starts a new one.
    #[must_use]
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.config_mut().set_max_in_flight(requests);
        self
    }

    /// Sets how many notifications a handler may queue ahead of a slow client
    /// before [`RequestContext::notify`](crate::RequestContext::notify) waits (default 32;
    /// at least 1, at most tokio's `Semaphore::MAX_PERMITS`).
    #[must_use]
    pub fn notification_queue(mut self, capacity: usize) -> Self {
        self.config_mut().queue = capacity.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// Honours a client's remaining budget, read from each request's
    /// `_meta[key]` (a JSON integer of milliseconds, as a client transport
    /// with the same key writes it): the request's timer layers enforce
    /// `min(own policy, budget)`, as a gRPC server does with
    /// `grpc-timeout`, and its handler sees the budget as its
    /// [deadline](crate::RequestContext::deadline). A missing, malformed or
    /// negative value is ignored, a huge one clamped; a budget never
    /// lengthens a deadline. Off by default. See the
    /// [timeout module](crate::timeout#on-the-wire-an-opt-in-budget-in-_meta).
    ///
    /// # Errors
    ///
    /// [`InvalidBudgetKey`](crate::timeout::InvalidBudgetKey) if `key` is
    /// empty or under a `_meta` prefix MCP reserves
    /// (`io.modelcontextprotocol/`, `dev.mcp/`, …; it defines no budget
    /// key); the setting is then left as it was.
    pub fn budget_key(
        mut self,
        key: impl Into<String>,
    ) -> Result<Self, crate::timeout::InvalidBudgetKey> {
        self.config_mut().budget_key = Some(crate::timeout::BudgetKey::new(key)?);
        Ok(self)
    }

    /// The MCP service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The MCP service, mutably (the adapter's settings stay as they are).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the adapter, returning the MCP service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// A configured adapter without its MCP service
/// (`StreamableHttpService::new(())` and its settings) is the [`Layer`] for
/// `ServiceBuilder` stacks:
/// `ServiceBuilder::new().layer(StreamableHttpService::new(()).sse_after(…)).layer(…mcp layers…).service(handler)`.
/// The services it makes share its settings and its shared state (the
/// session store, the in-flight count), as clones of one adapter do.
impl<S> Layer<S> for StreamableHttpService<()> {
    type Service = StreamableHttpService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        StreamableHttpService {
            inner,
            config: self.config.clone(),
        }
    }
}

impl<S, B> Service<Request<B>> for StreamableHttpService<S>
where
    S: McpService,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    /// Boxed. It owns the handler future until the response head is
    /// ready; dropping it cancels the request.
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness of the MCP service is awaited per request, after the body
        // is read and validated.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let config = self.config.clone();
        let handled = handle::handle(inner, config, req);
        Box::pin(async move { Ok(handled.await) })
    }
}
