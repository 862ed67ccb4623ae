//! tower-mcp's router as a request service of this crate's server
//! transports ([`McpRouterService`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::io::AsyncRead;
use tower::BoxError;
use tower_mcp::context::{CancellationToken, Extensions, NotificationSender};
use tower_mcp::protocol::{
    self as tm, JsonRpcNotification, JsonRpcRequest, JsonRpcResponse, McpNotification,
};
use tower_mcp::{JsonRpcService, McpRouter, RouterRequest, RouterResponse, ServerNotification};
use tower_service::Service;

use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::transport::{id_member, IdMember, LineFilter};
use tower_mcp_cancel::{McpRequest, RequestContext};

use super::request::ignore_removed_task;
use super::token::FireOnDrop;

/// How many notifications one request's handler may queue before tower-mcp
/// drops the next (its own transports' channel holds 256 for a connection).
const REQUEST_NOTIFICATIONS: usize = 64;

/// tower-mcp's `McpRouter` as a `tower::Service<McpRequest>`: what this
/// crate's server transports drive
/// ([`StdioServer`](tower_mcp_cancel::transport::stdio::StdioServer), and
/// `StreamableHttpService` with its feature `http`), under any of its
/// layers (`TimeoutLayer`, `ProgressResetLayer`, `TasksLayer`...), in place
/// of tower-mcp's own transports.
///
/// Each request goes through tower-mcp's `JsonRpcService` (its protocol
/// checks, revision negotiation and result shaping, as its transports
/// have them) to a clone of the router whose notification sender is the
/// request's own: what the handler sends (`ctx.report_progress`, a log
/// message) reaches the request's [`RequestContext`] — progress through
/// [`RequestContext::progress`] (checked, counted by a
/// `ProgressResetLayer`, a task's status message once the call runs as a
/// task), anything else as a notification of that request. What it queued
/// before it returned goes out before its answer, and nothing after it (a
/// task the handler spawned with a clone of its context sends into a
/// closed channel). The request's [`Cancellation`](tower_mcp_cancel::Cancellation)
/// fires the handler's `ctx.cancellation_token()` (at once, so a grace
/// the transport gives it is the handler's), and dropping the call (the
/// transport's cancel, a layer's limit, `tasks/cancel`, a task's TTL)
/// fires it too: work the handler spawned stops with the call.
///
/// The handler finds, with `ctx.extension::<T>()`, this crate's
/// [`RequestContext`] (its deadline, its cancellation) and, with this
/// package's feature `tasks`, the request's
/// `tower_mcp_cancel::tasks::TaskContext` when it may run as a task (its
/// input requests).
///
/// Notifications are not requests: read the transport's input through
/// [`route_notifications`](Self::route_notifications) so that they reach
/// the router (`notifications/initialized` completes a 2025 handshake).
///
/// Cloning the router per request costs a copy of its tables of tools,
/// resources and prompts (a map of `Arc`s).
#[derive(Clone)]
pub struct McpRouterService {
    jsonrpc: JsonRpcService<PerRequest>,
    router: McpRouter,
}

impl std::fmt::Debug for McpRouterService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRouterService").finish_non_exhaustive()
    }
}

impl McpRouterService {
    /// Serves `router`, with every protocol revision tower-mcp was
    /// compiled with.
    pub fn new(router: McpRouter) -> Self {
        Self {
            jsonrpc: JsonRpcService::new(PerRequest {
                router: router.clone(),
            }),
            router,
        }
    }

    /// `input` with each client notification handed to the router as its
    /// line is read (`McpRouter::handle_notification`), before the
    /// transport behind reads it; every byte is passed on unchanged. A
    /// `notifications/cancelled` is left to the transport, which cancels
    /// the request itself; a line that is not a notification tower-mcp can
    /// read is not routed. A notification reaches the router when its line
    /// is read, which may be before the transport dispatched a request
    /// read just ahead of it.
    pub fn route_notifications<R>(&self, input: R) -> impl AsyncRead + Unpin + Send
    where
        R: AsyncRead + Unpin + Send,
    {
        let router = self.router.clone();
        LineFilter::with_check(input, move |line: &[u8]| {
            route(&router, line);
            true
        })
    }
}

/// Hands `line` to `router` if it is a client notification other than
/// a cancel.
fn route(router: &McpRouter, line: &[u8]) {
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&[][..], |i| &line[i..]);
    if start.first() != Some(&b'{') || id_member(start) == IdMember::Present {
        return;
    }
    let Ok(n) = serde_json::from_slice::<JsonRpcNotification>(line) else {
        return;
    };
    if n.method == tm::notifications::CANCELLED {
        return;
    }
    match McpNotification::from_jsonrpc(&n) {
        Ok(n) => router.handle_notification(n),
        Err(e) => {
            tracing::debug!(method = %n.method, error = %e, "notification tower-mcp cannot read: not routed")
        }
    }
}

/// The request's notification sender, in the extensions `JsonRpcService`
/// passes to [`PerRequest`].
#[derive(Clone)]
struct RequestSender(NotificationSender);

/// The router, cloned per request with that request's notification sender.
#[derive(Clone)]
struct PerRequest {
    router: McpRouter,
}

impl Service<RouterRequest> for PerRequest {
    type Response = RouterResponse;
    type Error = std::convert::Infallible;
    type Future = <McpRouter as Service<RouterRequest>>::Future;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: RouterRequest) -> Self::Future {
        ignore_removed_task(&mut req);
        let mut router = self.router.clone();
        if let Some(RequestSender(tx)) = req.extensions.get::<RequestSender>() {
            router = router.with_notification_sender(tx.clone());
        }
        router.call(req)
    }
}

impl Service<McpRequest> for McpRouterService {
    type Response = Value;
    /// A JSON-RPC error is an [`ErrorObject`], as tower-mcp answered it.
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        let ctx = RequestContext::of(&req);
        let jreq = match to_jsonrpc(&req) {
            Ok(jreq) => jreq,
            Err(e) => return Box::pin(std::future::ready(Err(e.into()))),
        };
        let (tx, mut rx) = tower_mcp::notification_channel(REQUEST_NOTIFICATIONS);
        let token = CancellationToken::new();
        let mut ext = Extensions::new();
        ext.insert(RequestSender(tx));
        // tower-mcp adopts it as the handler's `ctx.cancellation_token()`.
        ext.insert(token.clone());
        ext.insert(ctx.clone());
        #[cfg(feature = "tasks")]
        if let Some(task) = tower_mcp_cancel::tasks::TaskContext::of(&req) {
            ext.insert(task);
        }
        let mut jsonrpc = self.jsonrpc.clone().with_extensions(ext);
        Box::pin(async move {
            let call = jsonrpc.call_single(jreq);
            tokio::pin!(call);
            // Fires the token if the call is dropped before its end.
            let mut fire = FireOnDrop::armed(token.clone());
            let cancelled = ctx.token();
            let mut fired = false;
            let out = loop {
                tokio::select! {
                    biased;
                    out = &mut call => break out,
                    Some(n) = rx.recv() => forward(&ctx, n).await,
                    () = cancelled.cancelled(), if !fired => {
                        // A cancel with a grace: the token now, the drop later.
                        fired = true;
                        token.cancel();
                    }
                }
            };
            fire.disarm();
            // What the handler queued before it returned, before its answer.
            while let Ok(n) = rx.try_recv() {
                forward(&ctx, n).await;
            }
            drop(rx);
            match out {
                Ok(JsonRpcResponse::Result(r)) => Ok(r.result),
                Ok(JsonRpcResponse::Error(e)) => Err(error_object(e.error).into()),
                Ok(_) => Err(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    "tower-mcp answered in a form this package does not know",
                )
                .into()),
                Err(e) => Err(ErrorObject::new(ErrorObject::INTERNAL_ERROR, e.to_string()).into()),
            }
        })
    }
}

/// The request as tower-mcp's `JsonRpcService` takes it.
fn to_jsonrpc(req: &McpRequest) -> Result<JsonRpcRequest, ErrorObject> {
    let id = req
        .id()
        .and_then(request_id)
        .ok_or_else(|| ErrorObject::new(ErrorObject::INVALID_REQUEST, "a request needs an id"))?;
    let params = match req.params() {
        Some(raw) => Some(serde_json::from_str::<Value>(raw.get()).map_err(|e| {
            ErrorObject::new(ErrorObject::INVALID_PARAMS, format!("Invalid params: {e}"))
        })?),
        None => None,
    };
    let mut jreq = JsonRpcRequest::new(id, req.method());
    jreq.params = params;
    Ok(jreq)
}

/// This crate's id as tower-mcp's (the same JSON).
fn request_id(id: &RequestId) -> Option<tm::RequestId> {
    serde_json::to_value(id)
        .and_then(serde_json::from_value)
        .ok()
}

fn error_object(e: tower_mcp::JsonRpcError) -> ErrorObject {
    let out = ErrorObject::new(i64::from(e.code), e.message);
    match e.data {
        Some(data) => out.with_data(data),
        None => out,
    }
}

/// Passes a notification the handler sent on through its request's
/// context: progress as progress (checked there, and a task's status
/// once the call runs as a task), the rest as notifications of the
/// request.
async fn forward(ctx: &RequestContext, n: ServerNotification) {
    let (method, params) = match n {
        ServerNotification::Progress(p) => {
            ctx.progress(p.progress, p.total, p.message).await;
            return;
        }
        ServerNotification::LogMessage(p) => (tm::notifications::MESSAGE, to_value(&p)),
        ServerNotification::ResourceUpdated { uri } => (
            tm::notifications::RESOURCE_UPDATED,
            serde_json::json!({ "uri": uri }),
        ),
        ServerNotification::ResourcesListChanged => {
            (tm::notifications::RESOURCES_LIST_CHANGED, Value::Null)
        }
        ServerNotification::ToolsListChanged => {
            (tm::notifications::TOOLS_LIST_CHANGED, Value::Null)
        }
        ServerNotification::PromptsListChanged => {
            (tm::notifications::PROMPTS_LIST_CHANGED, Value::Null)
        }
        other => {
            // tower-mcp's own task notifications: its tasks do not run here.
            tracing::debug!(notification = ?other, "notification of tower-mcp's own tasks not sent");
            return;
        }
    };
    if params.is_null() {
        ctx.notify(method, &serde_json::Map::new()).await;
    } else {
        ctx.notify(method, &params).await;
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}
