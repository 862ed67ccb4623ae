//! An rmcp client as a tower [`Service<McpRequest>`](tower_service::Service):
//! [`RmcpClient`], so this crate's [`TimeoutLayer`](tower_mcp_cancel::TimeoutLayer)
//! and [`ProgressResetLayer`](tower_mcp_cancel::ProgressResetLayer) drive it, and
//! [`RouteProgress`], the client handler wrapper that hands incoming
//! `notifications/progress` to the requests' [`ProgressTap`]s.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use ::rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientNotification, ClientRequest,
    MetaObject, NumberOrString, RequestId as RmcpRequestId, RequestMetaObject, ServerNotification,
};
use ::rmcp::service::{
    NotificationContext, PeerRequestOptions, RequestContext, RunningService, ServiceRole,
};
use ::rmcp::{ErrorData, Peer, RoleClient, Service};
use serde_json::Value;
use tower_service::Service as TowerService;

use super::request::convert;
use tower::BoxError;
use tower_mcp_cancel::{Cancellation, McpRequest, ProgressObserver, ProgressTap};

/// Taps by rmcp progress token, shared by [`RouteProgress`] and the
/// [`RmcpClient`]s built from it.
#[derive(Clone, Default)]
struct Routes(Arc<Mutex<HashMap<NumberOrString, ProgressTap>>>);

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NumberOrString, ProgressTap>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An rmcp client handler (`ClientHandler` or any `Service<RoleClient>`,
/// `()` for none) that also hands `notifications/progress` to the
/// [`ProgressTap`] of the [`RmcpClient`] call it belongs to, then to the
/// handler as before. Serve it with rmcp (`rmcp::serve_client` or
/// `ServiceExt::serve`) and build the [`RmcpClient`] from the running
/// service.
pub struct RouteProgress<H> {
    handler: H,
    routes: Routes,
}

impl<H> std::fmt::Debug for RouteProgress<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteProgress").finish_non_exhaustive()
    }
}

impl<H> RouteProgress<H> {
    /// Wraps `handler`.
    pub fn new(handler: H) -> Self {
        Self {
            handler,
            routes: Routes::default(),
        }
    }

    /// The wrapped handler.
    pub fn get_ref(&self) -> &H {
        &self.handler
    }
}

impl<H: Service<RoleClient>> Service<RoleClient> for RouteProgress<H> {
    async fn handle_request(
        &self,
        request: <RoleClient as ServiceRole>::PeerReq,
        context: RequestContext<RoleClient>,
    ) -> Result<<RoleClient as ServiceRole>::Resp, ErrorData> {
        self.handler.handle_request(request, context).await
    }

    async fn handle_notification(
        &self,
        notification: ServerNotification,
        context: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        if let ServerNotification::ProgressNotification(n) = &notification {
            let tap = self.routes.lock().get(&n.params.progress_token.0).cloned();
            if let Some(tap) = tap {
                tap.record(n.params.progress, n.params.total, n.params.message.clone());
            }
        }
        self.handler
            .handle_notification(notification, context)
            .await
    }

    fn get_info(&self) -> <RoleClient as ServiceRole>::Info {
        self.handler.get_info()
    }
}

/// An rmcp client as a tower service: an [`McpRequest`] (method and
/// params) is sent as rmcp's `ClientRequest` and answered with the result
/// as JSON. Serve the rmcp client with [`RouteProgress`] so that server
/// progress reaches the calls' taps:
///
/// ```no_run
/// # async fn run(transport: tokio::io::DuplexStream) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tower::{ServiceBuilder, ServiceExt as _};
/// use tower_mcp_cancel_rmcp::{RmcpClient, RouteProgress};
/// use tower_mcp_cancel::{McpRequest, ProgressResetLayer, TimeoutLayer};
///
/// let running = rmcp::serve_client(RouteProgress::new(()), transport).await?;
/// let client = ServiceBuilder::new()
///     .layer(TimeoutLayer::new(Duration::from_secs(60)))
///     .layer(ProgressResetLayer::new(Duration::from_secs(10)))
///     .service(RmcpClient::new(&running));
/// let req = McpRequest::without_id("tools/call")
///     .with_params(serde_json::json!({"name": "slow", "arguments": {"seconds": 5}}));
/// let result = client.oneshot(req).await.map_err(|e| e.to_string())?;
/// # let _ = result; Ok(()) }
/// ```
///
/// Dropping a call's future — a layer's deadline, or the caller giving up —
/// cancels the request the way rmcp's own `RequestHandle::cancel` does:
/// a `notifications/cancelled` for its id, whose reason is the one the
/// request's [`Cancellation`] was cancelled with (a layer of this crate that
/// gives up cancels it before dropping the call; a caller can do the same
/// with a reason of their own), and none when the request carries no
/// cancellation or it was not cancelled: with a lone `TimeoutLayer` and no
/// cancellation in the request, the peer is told no reason. rmcp
/// gives every request its own id and progress token (replacing those the
/// request carried), and [`RouteProgress`] routes by that token to the
/// request's [`ProgressTap`] (set by a
/// [`ProgressResetLayer`](tower_mcp_cancel::ProgressResetLayer)) or, without one, to
/// the caller's [`ProgressObserver`] in its extensions.
///
/// rmcp handles each incoming notification in a task of its own, so a
/// progress report the server sent just before its answer can reach the
/// tap after the call ended, and is then dropped.
///
/// What the server sends is read by rmcp's transport, within its limits
/// (rmcp 3.11: 16 MiB for a stdio line, `with_max_line_length`, and for an
/// SSE event): rmcp drops a stdio line over it with an error log, so the
/// call it answered gets no answer and ends only by its deadline (a test
/// pins this). Keep a [`TimeoutLayer`](tower_mcp_cancel::TimeoutLayer)
/// above: `StdioClient` and `HttpClient` end such a call at once with an
/// error naming their limit.
///
/// Once the cancel is written, rmcp forgets the request (a late answer is
/// discarded). Not covered: a future dropped while rmcp is still queueing
/// the request (before its id is known) sends no cancel. The cancel is
/// sent from a spawned task, so a drop outside a tokio runtime sends none
/// (it is logged). Those tasks are bounded as `HttpClient`'s
/// cancel posts are: at most 64 under way per client (its clones share
/// them; past that a cancel is logged and not sent) and 10 s each (a
/// transport that takes nothing does not keep one; rmcp's own task that
/// writes the notification waits on its transport until it takes the
/// bytes or closes).
#[derive(Clone)]
pub struct RmcpClient {
    peer: Peer<RoleClient>,
    routes: Option<Routes>,
    cancels: PendingCancels,
    /// The client's own capabilities (its handler's `get_info`), which
    /// rmcp puts in the `_meta` of each request of a 2026-era session.
    capabilities: Option<Value>,
}

/// How long a spawned `notifications/cancelled` may take: the timer of
/// `HttpClient`'s cancel posts.
const CANCEL_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How many `notifications/cancelled` sends may be under way at once (per
/// client and its clones): `HttpClient`'s bound.
const MAX_PENDING_CANCELS: usize = 64;

/// The cancel sends under way, bounded in number and in time.
#[derive(Clone)]
struct PendingCancels(Arc<tokio::sync::Semaphore>);

impl Default for PendingCancels {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_CANCELS)))
    }
}

impl PendingCancels {
    /// Runs `send` in a task on `runtime` for at most
    /// [`CANCEL_SEND_TIMEOUT`], if fewer than [`MAX_PENDING_CANCELS`] are
    /// under way; otherwise drops it unpolled and returns `false`.
    fn spawn<F>(&self, runtime: &tokio::runtime::Handle, send: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(permit) = self.0.clone().try_acquire_owned() else {
            return false;
        };
        runtime.spawn(async move {
            let _permit = permit;
            if tokio::time::timeout(CANCEL_SEND_TIMEOUT, send)
                .await
                .is_err()
            {
                tracing::debug!("notifications/cancelled timed out");
            }
        });
        true
    }
}

impl std::fmt::Debug for RmcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmcpClient")
            .field("routes_progress", &self.routes.is_some())
            .finish_non_exhaustive()
    }
}

impl RmcpClient {
    /// Calls through `running`'s peer; progress reaches the calls' taps.
    pub fn new<H>(running: &RunningService<RoleClient, RouteProgress<H>>) -> Self
    where
        H: Service<RoleClient>,
    {
        let capabilities = serde_json::to_value(running.service().get_info().capabilities).ok();
        Self {
            peer: running.peer().clone(),
            routes: Some(running.service().routes.clone()),
            cancels: PendingCancels::default(),
            capabilities,
        }
    }

    /// Calls through `peer`, a client not served with [`RouteProgress`]:
    /// progress does not reach the calls' taps (an idle limit is not reset),
    /// and, in a 2026-era session, a request that declares client
    /// capabilities in its `_meta` (as `TaskCallLayer` declares the tasks
    /// extension) is sent with those alone, not merged into the client's
    /// own (which only the running service knows).
    pub fn from_peer(peer: Peer<RoleClient>) -> Self {
        Self {
            peer,
            routes: None,
            cancels: PendingCancels::default(),
            capabilities: None,
        }
    }

    /// The rmcp peer.
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }
}

impl TowerService<McpRequest> for RmcpClient {
    type Response = Value;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        let peer = self.peer.clone();
        let routes = self.routes.clone();
        let cancels = self.cancels.clone();
        let request = client_request(&req);
        let options = declared_options(&req, self.capabilities.as_ref());
        let cancellation = req.cancellation().cloned();
        // The tap a layer set, else one of our own for the caller's
        // observer (made once rmcp has chosen the token).
        let tap = match req.progress_tap() {
            Some(tap) => Some(Ok(tap.clone())),
            None => req.extensions().get::<ProgressObserver>().cloned().map(Err),
        };
        Box::pin(async move {
            let request = request?;
            let handle = peer.send_cancellable_request(request, options).await?;
            let mut guard = CancelOnDrop {
                peer: Some(handle.peer.clone()),
                id: handle.id.clone(),
                cancellation,
                cancels,
                route: routes.zip(tap).map(|(routes, tap)| {
                    let token = handle.progress_token.0.clone();
                    let tap = tap.unwrap_or_else(|observer| {
                        ProgressTap::new(convert(&token), Some(observer))
                    });
                    routes.lock().insert(token.clone(), tap);
                    (routes, token)
                }),
            };
            let response = handle.await_response().await;
            // Answered (or the transport is gone): nothing to cancel.
            guard.peer = None;
            Ok(serde_json::to_value(response?)?)
        })
    }
}

/// The request's options: in a 2026-era session rmcp replaces the client
/// capabilities in a request's `_meta` with the client's own, so those the
/// request declared (the tasks extension `TaskCallLayer` declares, say) are
/// given back to rmcp here, merged into the client's own, extension by
/// extension (the declared one wins where both have a capability).
fn declared_options(req: &McpRequest, own: Option<&Value>) -> PeerRequestOptions {
    let mut options = PeerRequestOptions::no_options();
    let declared = req.params_as::<Value>().ok().and_then(|mut p| {
        p.get_mut("_meta")?
            .get_mut(CLIENT_CAPABILITIES)
            .map(Value::take)
    });
    let Some(Value::Object(declared)) = declared else {
        return options;
    };
    let mut merged = match own {
        Some(Value::Object(own)) => own.clone(),
        _ => serde_json::Map::new(),
    };
    for (key, value) in declared {
        match (merged.get_mut(&key), value) {
            (Some(Value::Object(mine)), Value::Object(theirs)) if key == "extensions" => {
                mine.extend(theirs);
            }
            (_, value) => {
                merged.insert(key, value);
            }
        }
    }
    let mut meta = serde_json::Map::new();
    meta.insert(CLIENT_CAPABILITIES.to_owned(), Value::Object(merged));
    options.meta = Some(RequestMetaObject(MetaObject(meta)));
    options
}

/// The key of the client's capabilities in a request's `_meta`.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Builds rmcp's request from the method and the params as they go on the
/// wire (rmcp's serde picks the variant by method).
fn client_request(req: &McpRequest) -> Result<ClientRequest, BoxError> {
    let mut object = serde_json::Map::new();
    object.insert("method".into(), Value::String(req.method().to_owned()));
    if let Some(params) = req.wire_params()? {
        object.insert("params".into(), serde_json::from_str(params.get())?);
    }
    Ok(serde_json::from_value(Value::Object(object))?)
}

/// Sends `notifications/cancelled` for the request when the call's future
/// is dropped before its answer, and removes its progress route.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RmcpRequestId,
    /// The request's cancellation, whose reason (once cancelled) is the
    /// notification's.
    cancellation: Option<Cancellation>,
    cancels: PendingCancels,
    route: Option<(Routes, NumberOrString)>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((routes, token)) = self.route.take() {
            routes.lock().remove(&token);
        }
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(request_id = ?self.id, "no runtime to send notifications/cancelled");
            return;
        };
        let reason = self
            .cancellation
            .as_ref()
            .and_then(Cancellation::reason)
            .map(ToString::to_string);
        tracing::debug!(request_id = ?self.id, ?reason, "call dropped; cancelling the request");
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(self.id.clone()), reason),
        ));
        let sent = self.cancels.spawn(&runtime, async move {
            // A closed transport has nothing left to cancel.
            let _ = peer.send_notification(notification).await;
        });
        if !sent {
            tracing::warn!(request_id = ?self.id, max = MAX_PENDING_CANCELS, "too many cancellations under way; notifications/cancelled not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports its drop on a channel.
    struct DropProbe(tokio::sync::mpsc::UnboundedSender<()>);

    impl Drop for DropProbe {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    /// A send that never completes (a transport that takes nothing),
    /// reporting when it is dropped.
    fn hanging_send(
        dropped: &tokio::sync::mpsc::UnboundedSender<()>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let probe = DropProbe(dropped.clone());
        async move {
            let _probe = probe;
            std::future::pending::<()>().await
        }
    }

    /// A cancel send that hangs ends after its timer (10 s).
    #[tokio::test(start_paused = true)]
    async fn a_cancel_send_that_hangs_ends_after_its_timer() {
        let cancels = PendingCancels::default();
        let (tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        assert!(cancels.spawn(&tokio::runtime::Handle::current(), hanging_send(&tx)));
        dropped.recv().await.unwrap();
        assert_eq!(start.elapsed(), CANCEL_SEND_TIMEOUT);
        assert_eq!(cancels.0.available_permits(), MAX_PENDING_CANCELS);
    }

    /// At most [`MAX_PENDING_CANCELS`] sends are under way: past that a
    /// cancel is dropped unsent, and no task is spawned for it.
    #[tokio::test(start_paused = true)]
    async fn past_the_bound_a_cancel_is_not_sent_and_nothing_grows() {
        let runtime = tokio::runtime::Handle::current();
        let cancels = PendingCancels::default();
        let (tx, mut dropped) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..MAX_PENDING_CANCELS {
            assert!(cancels.spawn(&runtime, hanging_send(&tx)));
        }
        let tasks = runtime.metrics().num_alive_tasks();
        let start = tokio::time::Instant::now();
        assert!(!cancels.spawn(&runtime, hanging_send(&tx)));
        assert_eq!(runtime.metrics().num_alive_tasks(), tasks);
        // The one past the bound was dropped at once, unsent.
        dropped.try_recv().expect("dropped at once");
        for _ in 0..MAX_PENDING_CANCELS {
            dropped.recv().await.unwrap();
        }
        assert_eq!(start.elapsed(), CANCEL_SEND_TIMEOUT);
        assert_eq!(cancels.0.available_permits(), MAX_PENDING_CANCELS);
    }
}
