//! Drop-cancellation, timeouts, progress-reset and tasks for servers
//! written with [tower-mcp](https://docs.rs/tower-mcp) (0.25), with the
//! layers of [`tower_mcp_cancel`].
//!
//! Two ways in:
//!
//! * **This crate's transports** (recommended for stdio, and the only way
//!   to tasks): [`McpRouterService`] makes tower-mcp's `McpRouter` a
//!   `Service<McpRequest>` that any of this crate's layers stack over —
//!   `TimeoutLayer`, `ProgressResetLayer`, and `TasksLayer` (its feature
//!   `tasks`) — served by this crate's
//!   [`StdioServer`](tower_mcp_cancel::transport::stdio::StdioServer) or
//!   `StreamableHttpService` in place of tower-mcp's `StdioTransport` and
//!   `HttpTransport`. See [below](#served-by-this-crates-transports).
//! * **tower-mcp's own transports**: give them a [`RouterLayer`]
//!   configured with this crate's [`TimeoutLayer`] and
//!   [`ProgressResetLayer`] (`.layer(...)`), and serve stdio from
//!   [`stdio()`] (its input read through [`CheckedInput`]). Their own
//!   races stay (see [what it does not cover](#what-it-does-not-cover)).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use tower_mcp::{CallToolResult, McpRouter, StdioTransport, ToolBuilder};
//! use tower_mcp_cancel_tower_mcp::RouterLayer;
//! use tower_mcp_cancel::{ProgressResetLayer, TimeoutLayer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let nap = ToolBuilder::new("nap")
//!         .description("Sleeps; never looks at its cancellation token")
//!         .handler(|_: serde_json::Value| async move {
//!             tokio::time::sleep(Duration::from_secs(3600)).await;
//!             Ok(CallToolResult::text("rested"))
//!         })
//!         .build();
//!     let router = McpRouter::new().server_info("sleeper", "1").tool(nap);
//!     let (input, output) = tower_mcp_cancel_tower_mcp::stdio();
//!     StdioTransport::new(router)
//!         .layer(
//!             RouterLayer::new()
//!                 .timeout(TimeoutLayer::new(Duration::from_secs(60)))
//!                 .progress(ProgressResetLayer::new(Duration::from_secs(30))),
//!         )
//!         .run_with_streams(input, output)
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
#![doc = include_str!("served.md")]
//!
//! # What `RouterLayer` does
//!
//! tower-mcp fires a request's cancellation token (`ctx.cancellation_token()`)
//! for the peer's `notifications/cancelled` and does not answer the
//! request, but a handler that never looks at the token runs to its end.
//! [`RouterLayer`] runs every request through [`CancelOnDisconnectLayer`],
//! the [`TimeoutLayer`] and the [`ProgressResetLayer`] you configured, over
//! a per-request [`Cancellation`], bridged both ways to a tower-mcp
//! `CancellationToken` it puts in the request's extensions (tower-mcp adopts
//! it as the handler's `ctx.cancellation_token()` and as the token its
//! in-flight registry fires for the peer's cancel):
//!
//! | what happens | the handler's future | its token | the peer hears |
//! | --- | --- | --- | --- |
//! | the peer's `notifications/cancelled` | dropped | fires | nothing (tower-mcp does not answer a request the peer cancelled) |
//! | a deadline of the [`TimeoutLayer`] | dropped | fires | a `-32603` error with `data.limit` |
//! | the progress idle limit or hard maximum | dropped | fires | a `-32603` error with `data.limit` |
//! | a transport's own token (tower-mcp's HTTP transport on a disconnect) | dropped | fires | nothing, or an error no one reads |
//!
//! A limit can be set per tool: [`TimeoutLayer::tool`] and
//! [`ProgressResetLayer::tool`] apply to the `tools/call` of that tool
//! (the layers read its name from the request tower-mcp parsed), before
//! the `tools/call` entry.
//!
//! Each is logged with the request id, method and reason. Dropping the
//! router's future also removes the request from tower-mcp's in-flight
//! registry (tower-mcp 0.25 untracks a dispatch on drop).
//!
//! Progress a tool reports with `ctx.report_progress(..)` restarts its
//! request's idle limit: the layer puts itself between the router and the
//! transport's notification channel and sees each progress notification
//! on its way out (so it needs a tokio runtime when `.layer(...)` is
//! called; without one, progress is not seen and the idle limit is not
//! reset). Only `tools/call` progress tokens are read. There, too,
//! progress is held to the rules of progress.md, which tower-mcp does not
//! check: a notification whose value does not increase, or that comes
//! after its request ended (from a task the tool spawned with a clone of
//! its context), is not passed on.
//!
//! # What it does not cover
//!
//! Served by [`McpRouterService`] and this crate's transports, none of
//! what follows applies: those transports read the wire, register each
//! request before the next line is read, and write progress in order. With
//! `RouterLayer` over tower-mcp's own transports:
//!
//! * Giving the router a token of its own replaces the child of the
//!   connection's token that tower-mcp's stdio transport would have given
//!   it: when that transport stops and cancels everything in flight, a
//!   handler under this layer is dropped by tower-mcp's abort after its
//!   drain timeout, not by the cancel. (tower-mcp keeps that connection
//!   token crate-private.)
//! * The reason text of the peer's `notifications/cancelled` does not reach
//!   the layer (tower-mcp only fires the token), so it is logged as
//!   "tower-mcp cancelled the request".
//! * A notification other than progress (a log message, say) that a task
//!   the tool spawned sends after the request ended is passed on: it
//!   carries nothing that ties it to a request. And tower-mcp's stdio
//!   transport picks between its queue of answers and its queue of
//!   notifications at random, so progress a tool sent just before it
//!   returned can still be written after its answer. The layer passes it
//!   to the transport before the request ends, but cannot make the
//!   transport write it first: `mcp-cancel-check`'s
//!   `progress.stops-at-response` fails now and then under the layer and
//!   on tower-mcp alone (3 of 14 runs of the example server under the
//!   layer, 1 of 11 with `--plain`, on 2026-12-06).
//!
//! What tower-mcp's stdio transport does with a notification never
//! reaches the layer, which sees requests only. There (tower-mcp 0.25;
//! `tests/tower_mcp_transport.rs` pins both, and `mcp-cancel-check` finds
//! them):
//!
//! * It reads a notification in its read loop but hands a request to a
//!   task, and its router ignores a cancel for a request it has not yet
//!   registered (logged at debug: "Cancellation requested for unknown
//!   request"). A cancel that comes right behind its request is lost: the
//!   handler runs on and is answered, under this layer as on tower-mcp
//!   alone (`cancel.right-behind`, `cancel.burst-no-response`).
//! * Once given a layer with `StdioTransport::layer` (any layer: tower's
//!   `Identity` too), it answers a malformed notification (a
//!   `notifications/cancelled` without its `requestId`, or whose `params`
//!   are an array) with a `-32602` error with a null id, where JSON-RPC
//!   wants no answer; without a layer it ignores it (`cancel.malformed`).
//!   Fixed when the input is read through [`CheckedInput`] (as [`stdio()`]
//!   reads stdin): it leaves out each notification tower-mcp's inspection
//!   would reject, which is then ignored, and passes every other line on
//!   unchanged. Served from `run()`, or from another reader, the transport
//!   still answers it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, see Cargo.toml): an item behind a feature
// says which.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's code blocks are compiled as doctests (the tasks one needs
// the middleware's `tasks`, a dev-dependency feature).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod input;
mod request;
mod service;
mod token;

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt as _};
use tower_layer::Layer;
use tower_mcp::context::CancellationToken;
use tower_mcp::context::NotificationSender;
use tower_mcp::{JsonRpcError, McpRouter, RouterRequest, RouterResponse, ServerNotification};
use tower_service::Service;

pub use self::input::{stdio, CheckedInput, NotificationCheck};
use self::request::{ignore_removed_task, LayeredRequest};
pub use self::service::McpRouterService;
use self::token::FireOnDrop;
use tower::BoxError;
use tower_mcp_cancel::integration::ProgressRegistry;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, ProgressResetLayer, RequestView,
    TimeoutLayer,
};

/// The reason given when tower-mcp fires the request's token: it does so
/// for the peer's `notifications/cancelled` and does not say more.
const ROUTER_CANCELLED: &str =
    "tower-mcp cancelled the request (the peer's notifications/cancelled)";

/// The reason given when a token a tower-mcp transport put in the request
/// fires (its HTTP transport does on a client disconnect).
const TRANSPORT_CANCELLED: &str = "tower-mcp's transport cancelled the request";

/// Applies this crate's cancellation, timeouts and progress-reset to
/// tower-mcp's `McpRouter`; give it to a tower-mcp transport's `.layer(...)`.
/// See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct RouterLayer {
    timeout: Option<TimeoutLayer>,
    progress: Option<ProgressResetLayer>,
}

impl RouterLayer {
    /// Cancels drop the handler's future; no deadline yet.
    pub fn new() -> Self {
        Self::default()
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
}

impl Layer<McpRouter> for RouterLayer {
    type Service = RouterService;

    fn layer(&self, router: McpRouter) -> RouterService {
        let registry = ProgressRegistry::default();
        let (router, flush) = observe_progress(router, &registry);
        let inner = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .option_layer(self.timeout.clone())
            .option_layer(self.progress.clone())
            .service(Router {
                router,
                registry,
                flush,
            });
        RouterService {
            inner: BoxCloneSyncService::new(inner),
        }
    }
}

/// Sits between `router` and its transport's notification channel: each
/// progress notification is checked by `registry` on its way out (recorded
/// if it belongs to a request in flight and increases, dropped otherwise).
/// Returns the router, and how to flush what the relay holds.
fn observe_progress(router: McpRouter, registry: &ProgressRegistry) -> (McpRouter, Option<Flush>) {
    let Some(out) = router.notification_sender().cloned() else {
        // No transport attached yet: nothing to observe, nothing to send.
        return (router, None);
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("RouterLayer applied outside a tokio runtime: handler progress is not checked and will not reset idle limits");
        return (router, None);
    };
    let (tx, mut rx) = tower_mcp::notification_channel(out.max_capacity());
    let (flush_tx, mut flushes) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
    let registry = registry.clone();
    // Ends when the router's senders are all gone, or the transport's
    // receiver is (tower-mcp's stateless HTTP makes one per request):
    // then its own receiver goes too, and tower-mcp's registries, which
    // keep senders until they find them closed, let go of ours.
    runtime.spawn(async move {
        loop {
            tokio::select! {
                n = rx.recv() => {
                    let Some(n) = n else { break };
                    if !forward(&registry, &out, n) {
                        break;
                    }
                }
                Some(done) = flushes.recv() => {
                    // What was queued before the flush was asked for; not
                    // what a busy reporter queues meanwhile.
                    let queued = rx.len();
                    let mut open = true;
                    for _ in 0..queued {
                        let Ok(n) = rx.try_recv() else { break };
                        open = forward(&registry, &out, n);
                        if !open {
                            break;
                        }
                    }
                    let _ = done.send(());
                    if !open {
                        break;
                    }
                }
                () = out.closed() => break,
            }
        }
    });
    (router.with_notification_sender(tx), Some(Flush(flush_tx)))
}

/// Passes `n` on to the transport unless it is progress the registry
/// refuses. Without waiting, as tower-mcp's own senders do: a full queue
/// drops it (so that a request's end never waits for the transport).
/// `false`: the transport is gone.
fn forward(registry: &ProgressRegistry, out: &NotificationSender, n: ServerNotification) -> bool {
    if let ServerNotification::Progress(p) = &n {
        let admitted = request::progress_token(&p.progress_token)
            .is_some_and(|t| registry.admit(&t, p.progress, p.total, p.message.as_deref()));
        if !admitted {
            return true;
        }
    }
    match out.try_send(n) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::debug!("notification dropped: the transport's queue is full");
            true
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// Asks the relay of [`observe_progress`] to pass on what the router
/// queued so far, and waits until it has: a request's progress goes out
/// (or is refused) while the request is still in flight.
#[derive(Clone)]
struct Flush(mpsc::UnboundedSender<oneshot::Sender<()>>);

impl Flush {
    async fn wait(&self) {
        let (tx, rx) = oneshot::channel();
        if self.0.send(tx).is_ok() {
            // An error: the relay is gone, nothing to wait for.
            let _ = rx.await;
        }
    }
}

/// A tower-mcp `McpRouter` under this crate's layers: a
/// `Service<RouterRequest>` as tower-mcp's transports take it. Made by
/// [`RouterLayer`].
#[derive(Clone)]
pub struct RouterService {
    inner: BoxCloneSyncService<LayeredRequest, RouterResponse, BoxError>,
}

impl std::fmt::Debug for RouterService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterService").finish_non_exhaustive()
    }
}

impl Service<RouterRequest> for RouterService {
    type Response = RouterResponse;
    /// Errors are in the response, as tower-mcp's own services have them.
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<RouterResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is awaited in the call, on the clone that serves it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: RouterRequest) -> Self::Future {
        let id = req.id.clone();
        ignore_removed_task(&mut req);
        let cancellation = Cancellation::new();
        // tower-mcp adopts a token of its own type found in the extensions
        // as the handler's (`ctx.cancellation_token()`) and the one its
        // in-flight registry fires. A token a transport put there
        // (tower-mcp's HTTP transport, for a disconnect) still cancels.
        let transport = req.extensions.get::<CancellationToken>().cloned();
        let token = CancellationToken::new();
        req.extensions.insert(token.clone());
        let mut req = LayeredRequest::new(req);
        req.set_cancellation(cancellation.clone());
        // Fires the handler's token when its request ends without an answer
        // of its own (a layer's limit, a cancel, the call dropped): the way
        // back from this crate's Cancellation to tower-mcp's token, for the
        // work the handler spawned.
        let mut bridge = FireOnDrop::armed(token.clone());
        let fresh = self.inner.clone();
        let call = std::mem::replace(&mut self.inner, fresh).oneshot(req);
        Box::pin(async move {
            // The router firing its token (the peer's cancel) or the
            // transport's → the cancellation, which the CancelOnDisconnect
            // layer races the router's future against.
            let cause = async {
                let reason = match &transport {
                    Some(t) => tokio::select! {
                        () = t.cancelled() => TRANSPORT_CANCELLED,
                        () = token.cancelled() => ROUTER_CANCELLED,
                    },
                    None => {
                        token.cancelled().await;
                        ROUTER_CANCELLED
                    }
                };
                CancelReason::Other(Cow::Borrowed(reason))
            };
            let out =
                tower_mcp_cancel::integration::run_cancellable(call, cause, &cancellation).await;
            if out.is_ok() && !cancellation.is_cancelled() {
                bridge.disarm();
            }
            drop(bridge);
            Ok(out.unwrap_or_else(|e| {
                let e = tower_mcp_cancel::jsonrpc::ErrorObject::of_error(&*e);
                RouterResponse {
                    id,
                    inner: Err(JsonRpcError {
                        code: i32::try_from(e.code).unwrap_or(-32603),
                        message: e.message,
                        data: e.data,
                    }),
                }
            }))
        })
    }
}

/// The router's future, which fires the handler's token
/// (`ctx.cancellation_token()`) when it is dropped before its end, before
/// it drops the handler's future: a layer's limit (or any cancel that
/// drops the stack) reaches the handler's token at the cancel, not after
/// the drop.
struct TokenFirst<F> {
    /// Declared before `call`: fields drop in declaration order, so the
    /// token fires before the handler's future is dropped.
    fire: Option<FireOnDrop>,
    call: Pin<Box<F>>,
}

impl<F: Future> Future for TokenFirst<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let out = std::task::ready!(self.call.as_mut().poll(cx));
        if let Some(fire) = &mut self.fire {
            fire.disarm();
        }
        Poll::Ready(out)
    }
}

/// The innermost service: registers the request in the progress registry
/// (so that its progress goes out only while it runs) and calls the
/// router.
#[derive(Clone)]
struct Router {
    router: McpRouter,
    registry: ProgressRegistry,
    flush: Option<Flush>,
}

impl Service<LayeredRequest> for Router {
    type Response = RouterResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<RouterResponse, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.router.poll_ready(cx).map_err(BoxError::from)
    }

    fn call(&mut self, req: LayeredRequest) -> Self::Future {
        let registration = req.progress_token().map(|token| {
            self.registry
                .register(token.clone(), req.progress_tap().cloned())
        });
        // The relay passes notifications on in a task of its own: progress
        // the handler queued before it returned is passed on (or refused)
        // before the request leaves the registry.
        let flush = registration.as_ref().and(self.flush.clone());
        let token = req.inner.extensions.get::<CancellationToken>().cloned();
        let call = TokenFirst {
            fire: token.map(FireOnDrop::armed),
            call: Box::pin(self.router.call(req.inner)),
        };
        Box::pin(async move {
            let _registration = registration;
            let out = call.await;
            if let Some(flush) = flush {
                flush.wait().await;
            }
            out.map_err(BoxError::from)
        })
    }
}
