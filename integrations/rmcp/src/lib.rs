//! Drop-cancellation, timeouts and progress-reset for servers written with
//! [rmcp](https://docs.rs/rmcp) (the official Rust MCP SDK, 3.x), with the
//! layers of [`tower_mcp_cancel`]; and rmcp's client as a tower service,
//! [`RmcpClient`], so the same layers drive an rmcp client (see there).
//! Feature `http`: rmcp's `StreamableHttpService` too (see
//! [below](#over-streamable-http)). With [`Cancellable::tasks`], chosen
//! tools run as tasks that `tasks/cancel` and their TTL drop (see
//! [Tasks](#tasks)).
//!
//! Keep your `ServerHandler` (macros and all) and your transport; wrap the
//! handler in a [`Cancellable`] — itself a `ServerHandler` — and serve that
//! (over Streamable HTTP, see [below](#over-streamable-http)):
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
//! use rmcp::model::{ServerCapabilities, ServerConfig};
//! use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};
//! use tower_mcp_cancel_rmcp::Cancellable;
//! use tower_mcp_cancel::{ProgressResetLayer, TimeoutLayer};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Nap {
//!     seconds: u64,
//! }
//!
//! #[derive(Clone)]
//! struct Sleeper {
//!     tool_router: ToolRouter<Self>,
//! }
//!
//! #[tool_router]
//! impl Sleeper {
//!     /// Never looks at its cancellation token: only a drop stops it.
//!     #[tool(description = "Sleeps")]
//!     async fn nap(&self, Parameters(Nap { seconds }): Parameters<Nap>) -> String {
//!         tokio::time::sleep(Duration::from_secs(seconds)).await;
//!         "rested".to_owned()
//!     }
//! }
//!
//! #[tool_handler(router = self.tool_router)]
//! impl ServerHandler for Sleeper {
//!     fn get_info(&self) -> ServerConfig {
//!         ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let sleeper = Sleeper { tool_router: Sleeper::tool_router() };
//!     let running = Cancellable::new(sleeper)
//!         .timeout(
//!             TimeoutLayer::new(Duration::from_secs(60))
//!                 .method("tools/call", Duration::from_secs(600))
//!                 .tool("nap", Duration::from_secs(5)), // `nap` gets 5 s
//!         )
//!         .progress(ProgressResetLayer::new(Duration::from_secs(30)))
//!         .serve(tower_mcp_cancel_rmcp::stdio())
//!         .await?;
//!     running.waiting().await?;
//!     Ok(())
//! }
//! ```
//!
//! # What it does
//!
//! rmcp spawns one task per request and calls the handler in it with a
//! `RequestContext` whose `ct` it fires for the peer's
//! `notifications/cancelled`, a Streamable HTTP client that went away
//! (stateless requests), and the session ending. It never drops the
//! handler's future: a handler that does not watch `ct` runs to its end.
//! [`Cancellable`] implements `ServerHandler` by forwarding every method to
//! the handler; each request method's call — the only place the handler's
//! future can be dropped, since rmcp's task is detached and a `Peer` cannot
//! be built outside rmcp — runs under [`CancelOnDisconnectLayer`] and the
//! [`TimeoutLayer`] and [`ProgressResetLayer`] you configured, over a
//! per-request [`Cancellation`]. rmcp's own dispatch (protocol checks,
//! result shaping) stays in front of it; `initialize` and
//! `subscriptions/listen` are forwarded unraced.
//!
//! | what happens | the handler's future | the handler's `ct` | the peer hears |
//! | --- | --- | --- | --- |
//! | the peer's `notifications/cancelled` | dropped | fires | nothing (rmcp discards the answer of a cancelled id) |
//! | the HTTP client disconnects (2026-era, session-less requests) | dropped (reason: see [below](#over-streamable-http)) | fires | nothing (the stream is gone) |
//! | a deadline of the [`TimeoutLayer`] | dropped | fires | a `-32603` error with `data.limit` |
//! | the progress idle limit or hard maximum | dropped | fires | a `-32603` error with `data.limit` |
//! | the session ends (stdin closed, `RunningService::cancel`) | dropped once rmcp fires `ct` | fires | what rmcp's drain sends, see below |
//!
//! A limit can be set per tool: [`TimeoutLayer::tool`] and
//! [`ProgressResetLayer::tool`] apply to the `tools/call` of that tool
//! (the wrapper gives the layers the tool's name, from the params rmcp
//! decoded), before the `tools/call` entry.
//!
//! Each is logged with the request id, method and reason. The handler's
//! `context.ct` is replaced by the request's cancellation token, so work
//! it spawned stops in every row, and the request's [`Cancellation`] is in
//! its `context.extensions`: `context.extensions.get::<Cancellation>()`
//! tells it why its request ended ([`Cancellation::reason`]).
//!
//! Progress the handler reports with `peer.notify_progress` restarts the
//! idle limit when the transport was served through [`Cancellable::serve`]
//! (or wrapped by [`Cancellable::observe`]): rmcp's `Peer` writes only to
//! the transport, so that is where [`ObserveProgress`] sees it. A request
//! without a progress token keeps its idle limit, unreset. There, too,
//! progress is held to the rules of progress.md, which rmcp does not check:
//! a notification whose value does not increase, or that comes after its
//! request's handler ended (from a task the handler spawned with a clone
//! of its peer), is not written. Over Streamable HTTP the same check is
//! made on the response bodies by the layer of
//! [`Cancellable::observe_http`]; a transport served without either is
//! not checked.
//!
//! Two cancels rmcp's stdio server mishandles are taken care of on the way
//! in. A cancel that comes before the connection's lifecycle is chosen (a
//! 2026-era client that dropped its `server/discover` call sends one) would
//! make rmcp end the connection: [`ObserveProgress`], and so
//! [`Cancellable::serve`], holds it back (it can only name a request rmcp
//! already answered). A notification rmcp cannot decode (a cancel whose
//! `params` are not an object) would be answered with an id-less `-32600`
//! error: serve [`stdio()`] (or wrap your reader in [`CheckedInput`])
//! rather than `rmcp::transport::stdio()`, and it is ignored, as JSON-RPC
//! and the cancellation page have it.
//!
#![cfg_attr(feature = "http", doc = include_str!("http.md"))]
#![cfg_attr(
    not(feature = "http"),
    doc = "# Over Streamable HTTP\n\nWith this package's feature `http`: rmcp's `StreamableHttpService` under the layers (see the docs built with it).\n"
)]
//!
#![doc = include_str!("tasks.md")]
//!
//! # What it does not cover
//!
//! * Over `StreamableHttpService`, progress restarts the idle limit only
//!   through the layer of [`Cancellable::observe_http`] (feature `http`),
//!   which reads it back out of the response bodies: rmcp builds its
//!   per-request transports itself, and [`ObserveProgress`] cannot wrap
//!   them. (Upstream: a hook on the server's outgoing messages, or a
//!   transport factory in `StreamableHttpServerConfig`, would make this
//!   direct.)
//! * When a session ends (stdin closed, `RunningService::cancel`), rmcp
//!   first waits up to 5 s (2 s) for handlers to answer and only then fires
//!   `ct`; an answer made in that window — including the error of a handler
//!   dropped on `RunningService::cancel` — is written.
//! * A `ServerHandler` method rmcp adds later falls back to rmcp's default
//!   until this wrapper forwards it; an rmcp `Service<RoleServer>` that is
//!   not a `ServerHandler` cannot be wrapped (rmcp's transports for it do
//!   not include `StreamableHttpService`).
//! * rmcp's `local` feature (non-`Send` handlers) is not supported.
//! * A notification other than progress (a log message, say) that a task
//!   the handler spawned sends after the request ended is written: rmcp's
//!   `Peer` sends it with nothing that ties it to a request (progress has
//!   its token), so the transport cannot tell it from a connection-wide
//!   one. Such a task should stop on `context.ct`, which fires for every
//!   early end.
//! * [`RmcpClient`] reads through rmcp's client transport, which answers a
//!   server's notification it cannot decode with an id-less `-32600`
//!   error; [`CheckedInput`] is for a server's input only.
//!
//! (Docs built without the feature `http` link its items to the section
//! above, where they are described, instead.)
//!
#![cfg_attr(
    feature = "http",
    doc = "[`Cancellable::observe_http`]: Cancellable::observe_http"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "[`Cancellable::observe_http`]: crate#over-streamable-http"
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, see Cargo.toml): each feature-gated item says
// which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's code blocks are compiled as doctests (the HTTP one needs
// the feature).
#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod client;
mod handler;
#[cfg(feature = "http")]
mod http_progress;
mod input;
mod lifecycle;
mod progress;
mod request;
mod tasks;

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::rmcp::model::ErrorCode;
use ::rmcp::service::{RequestContext, RunningService, ServerInitializeError};
use ::rmcp::transport::{IntoTransport, Transport};
use ::rmcp::{ErrorData, RoleServer, ServerHandler};
use tower::{ServiceBuilder, ServiceExt as _};
use tower_service::Service as TowerService;

pub use self::client::{RmcpClient, RouteProgress};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use self::http_progress::{ObserveBody, ObserveFuture, ObserveHttp, ObserveHttpLayer};
pub use self::input::{stdio, CheckedInput, NotificationCheck};
pub use self::progress::ObserveProgress;
pub use self::request::RmcpRequest;
use tower::BoxError;
use tower_mcp_cancel::integration::ProgressRegistry;
use tower_mcp_cancel::tasks::TasksLayer;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, ProgressResetLayer, RequestView,
    TimeoutLayer,
};

/// The reason given when rmcp fires a request's `ct`: rmcp does not say
/// which of its causes it was.
const RMCP_CANCELLED: &str =
    "rmcp cancelled the request (the peer's notifications/cancelled, a disconnect, or the session ending)";

/// The header that marks a 2025-era Streamable HTTP session, whose POST
/// streams may close without cancelling their requests.
const SESSION_ID_HEADER: &str = "mcp-session-id";

/// An rmcp `ServerHandler` whose requests are dropped when cancelled, under
/// this crate's timeout and progress policies; itself a `ServerHandler`, so
/// every rmcp transport serves it. See the [module docs](self).
pub struct Cancellable<H> {
    handler: Arc<H>,
    timeout: Option<TimeoutLayer>,
    progress: Option<ProgressResetLayer>,
    tasks: Option<TasksLayer>,
    registry: ProgressRegistry,
}

impl<H> Clone for Cancellable<H> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            timeout: self.timeout.clone(),
            progress: self.progress.clone(),
            tasks: self.tasks.clone(),
            registry: self.registry.clone(),
        }
    }
}

impl<H> std::fmt::Debug for Cancellable<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancellable")
            .field("timeout", &self.timeout)
            .field("progress", &self.progress)
            .field("tasks", &self.tasks)
            .finish_non_exhaustive()
    }
}

impl<H> Cancellable<H> {
    /// Wraps `handler`: cancels drop its future; no deadline yet.
    pub fn new(handler: H) -> Self {
        Self {
            handler: Arc::new(handler),
            timeout: None,
            progress: None,
            tasks: None,
            registry: ProgressRegistry::default(),
        }
    }

    /// Puts every request under `layer`'s deadlines.
    pub fn timeout(mut self, layer: TimeoutLayer) -> Self {
        self.timeout = Some(layer);
        self
    }

    /// Puts every request under `layer`'s idle limit and hard maximum.
    pub fn progress(mut self, layer: ProgressResetLayer) -> Self {
        self.progress = Some(layer);
        self
    }

    /// Runs the `tools/call`s of the tools `layer` names as tasks (the
    /// `io.modelcontextprotocol/tasks` extension), and answers `tasks/get`,
    /// `tasks/update` and `tasks/cancel` from its store: see
    /// [Tasks](crate#tasks). The extension is then advertised in
    /// `server/discover`, `initialize` and `get_info`.
    pub fn tasks(mut self, layer: TasksLayer) -> Self {
        self.tasks = Some(layer);
        self
    }

    /// The wrapped handler.
    pub fn get_ref(&self) -> &H {
        &self.handler
    }

    /// Wraps `transport` so that the progress the handler sends through it
    /// restarts its requests' idle limits, and a notification that would
    /// end rmcp's handshake phase is held back (see [`ObserveProgress`]).
    /// [`serve`](Self::serve) does this for you; use it with rmcp's own
    /// `serve_*` functions. Here the handler is taken to support the
    /// protocol versions rmcp knows (its default); [`serve`](Self::serve)
    /// asks the handler.
    pub fn observe<T, E, A>(
        &self,
        transport: T,
    ) -> ObserveProgress<impl Transport<RoleServer, Error = E> + 'static>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let versions = Cow::Borrowed(::rmcp::model::ProtocolVersion::KNOWN_VERSIONS);
        self.observe_with(transport, versions)
    }

    fn observe_with<T, E, A>(
        &self,
        transport: T,
        versions: Cow<'static, [::rmcp::model::ProtocolVersion]>,
    ) -> ObserveProgress<impl Transport<RoleServer, Error = E> + 'static>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        ObserveProgress::new(
            transport.into_transport(),
            self.registry.clone(),
            lifecycle::Lifecycle::new(versions),
        )
    }

    /// A layer for rmcp's `StreamableHttpService` that feeds the progress
    /// the handler sends in its response bodies to its requests' idle
    /// limits, and takes out of them the progress events of a request that
    /// ended or whose value does not increase (rmcp builds its HTTP
    /// transports itself, so [`observe`](Self::observe) cannot wrap them).
    /// Feature `http`.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn observe_http(&self) -> ObserveHttpLayer {
        ObserveHttpLayer::new(self.registry.clone())
    }

    /// Serves over `transport` (anything rmcp's `serve` takes: `stdio()`, a
    /// reader/writer pair, ...), with progress observed. Use this rather
    /// than rmcp's `ServiceExt::serve`, which would not observe progress.
    pub async fn serve<T, E, A>(
        self,
        transport: T,
    ) -> Result<RunningService<RoleServer, Self>, ServerInitializeError>
    where
        H: ServerHandler,
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let versions = self.supported_protocol_versions();
        let transport = self.observe_with(transport, versions);
        ::rmcp::serve_server(self, transport).await
    }
}

impl<H: ServerHandler> Cancellable<H> {
    /// Runs one call of the handler (`run`, given the handler and the
    /// context whose `ct` is the request's cancellation token; `tool`, a
    /// `tools/call`'s tool) through the layers, raced against rmcp's `ct` and, over 2026-era HTTP, the
    /// disconnect of the request's HTTP exchange.
    fn race<T, F, Fut>(
        &self,
        method: &str,
        tool: Option<Box<str>>,
        context: RequestContext<RoleServer>,
        run: F,
    ) -> impl Future<Output = Result<T, ErrorData>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(Arc<H>, RequestContext<RoleServer>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ErrorData>> + Send + 'static,
    {
        let cause = cancel_cause(&context);
        let cancellation = Cancellation::new();
        let req = RmcpRequest::new(method, tool, context, cancellation.clone());
        let handler = Handler {
            run: Some(run),
            handler: self.handler.clone(),
            registry: self.registry.clone(),
        };
        let call = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .option_layer(self.timeout.clone())
            .option_layer(self.progress.clone())
            .service(handler)
            .oneshot(req);
        async move {
            let out =
                tower_mcp_cancel::integration::run_cancellable(call, cause, &cancellation).await;
            out.map_err(|e| error_data(&*e))
        }
    }
}

/// What cancels a request of rmcp's: its `ct` (the peer's cancel, a
/// disconnect, the session ending) and, over 2026-era HTTP, the request's
/// HTTP exchange going away; with the reason.
fn cancel_cause(
    context: &RequestContext<RoleServer>,
) -> impl Future<Output = CancelReason> + Send + 'static {
    let rmcp_ct = context.ct.clone();
    // Its own, not the HTTP exchange's: a deadline cancels the request's,
    // and must not cancel the exchange that carries its error response.
    let exchange = http_cancellation(context);
    async move {
        match &exchange {
            // A disconnect fires both, rmcp's first (its drop guard is
            // inside the exchange's response future): the exchange's
            // reason is the one that says why.
            Some(exchange) => tokio::select! {
                biased;
                reason = exchange.cancelled() => reason,
                () = rmcp_ct.cancelled() => exchange
                    .reason()
                    .cloned()
                    .unwrap_or(CancelReason::Other(Cow::Borrowed(RMCP_CANCELLED))),
            },
            None => {
                rmcp_ct.cancelled().await;
                CancelReason::Other(Cow::Borrowed(RMCP_CANCELLED))
            }
        }
    }
}

/// The [`Cancellation`] of the HTTP exchange, put in the HTTP request by a
/// [`CancelOnDisconnectLayer::http`] mounted around rmcp's
/// `StreamableHttpService`, which hands the request's `http::request::Parts`
/// to the handler in `context.extensions`; it fires when the client drops
/// the exchange before its response ended.
/// Only for a 2026-era (session-less) request: a 2025-era session's POST
/// stream may close without cancelling its requests.
fn http_cancellation(context: &RequestContext<RoleServer>) -> Option<Cancellation> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    if parts.headers.contains_key(SESSION_ID_HEADER) {
        return None;
    }
    parts
        .extensions
        .get::<Cancellation>()
        .filter(|c| !c.is_finished())
        .cloned()
}

/// The innermost service: registers the request in the progress registry
/// (so that its progress goes out only while the handler runs) and makes
/// the one call of the handler.
struct Handler<H, F> {
    run: Option<F>,
    handler: Arc<H>,
    registry: ProgressRegistry,
}

impl<H, F, Fut, T> TowerService<RmcpRequest> for Handler<H, F>
where
    H: Send + Sync + 'static,
    F: FnOnce(Arc<H>, RequestContext<RoleServer>) -> Fut,
    Fut: Future<Output = Result<T, ErrorData>> + Send + 'static,
    T: Send + 'static,
{
    type Response = T;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: RmcpRequest) -> Self::Future {
        let Some(run) = self.run.take() else {
            return Box::pin(std::future::ready(Err(
                "the handler's call was made already".into(),
            )));
        };
        // Only a token the client sent can come back in the handler's
        // progress notifications; they go out while the handler runs.
        let registration = req.progress_token().map(|token| {
            self.registry
                .register(token.clone(), req.progress_tap().cloned())
        });
        let call = run(self.handler.clone(), req.context);
        Box::pin(async move {
            let _registration = registration;
            call.await.map_err(|e| Box::new(e) as BoxError)
        })
    }
}

/// The rmcp error for a failed call: the handler's own as it is, a layer's
/// as [`ErrorObject::of_error`](tower_mcp_cancel::jsonrpc::ErrorObject::of_error) has it.
fn error_data(error: &(dyn std::error::Error + 'static)) -> ErrorData {
    if let Some(e) = error.downcast_ref::<ErrorData>() {
        return e.clone();
    }
    let e = tower_mcp_cancel::jsonrpc::ErrorObject::of_error(error);
    let code = i32::try_from(e.code).unwrap_or(ErrorCode::INTERNAL_ERROR.0);
    ErrorData::new(ErrorCode(code), e.message, e.data)
}
