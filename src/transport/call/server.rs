//! One server request from decode to its end.
//!
//! [`prepare`] builds the request the service sees; [`run`] races the
//! handler against its [`Cancellation`] with the
//! [`CancelOnDisconnect`](crate::cancel::CancelOnDisconnect) layer's own
//! future and decides the one [`Ending`]. The transports only render it:
//! stdio writes a line (or nothing), HTTP a JSON body, an SSE event, or a
//! status.
//!
//! # What ends a request on the wire
//!
//! | how the request ended | [`Ending`] |
//! | --- | --- |
//! | the handler returned `Ok(result)` | `Respond` with the result; for `subscriptions/listen`, with `resultType: "complete"` and `_meta["io.modelcontextprotocol/subscriptionId"]` added if absent |
//! | the handler returned an error, or ended as [`Cancelled`] on its own, or a limit inside the stack fired | `Respond` with the JSON-RPC error (a `Cancelled` nobody asked for is `-32603`) |
//! | a `subscriptions/listen` ended as [`Cancelled`] without a transport cancel | `TearDown`: `notifications/cancelled` referencing it (HTTP: as the stream's last event) |
//! | the transport cancelled it: the peer's `notifications/cancelled`, the transport closed | `Silent`: nothing at all (a disconnect drops the call: nothing is decided) |
//! | the server shut down | `Silent`, except a `subscriptions/listen`, which gets its graceful result (`Respond`) |

use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use pin_project_lite::pin_project;
use serde::Serialize;
use tokio::time::Sleep;
use tower::{Service, ServiceExt};
use tracing::Span;

use crate::cancel::guard::DisconnectGuard;
use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::{ParamsView, RawRequest, RequestId};
use crate::notify::outbox::{Outgoing, Scope};
use crate::notify::Notifier;
use crate::observe::record::{Record, SpanParams};
use crate::observe::{Era, Side, Transport};
use crate::{CancelReason, Cancellation, McpRequest, MethodPolicy, RequestView};

mod ending;

pub(crate) use self::ending::encode_error_without_id;
use self::ending::{ending, Panicked};

/// A request service the server transports can drive: a cloneable, sendable
/// `tower::Service<McpRequest>` whose response serializes to the JSON-RPC
/// `result` and whose error converts to a [`BoxError`].
///
/// Implemented for every type that fits (it only names the bound); it is
/// sealed, so it cannot be implemented otherwise. A `ServiceBuilder` stack
/// over `service_fn(handler)` is one.
pub trait McpService:
    Service<McpRequest, Response: Serialize, Error: Into<BoxError>, Future: Send + 'static>
    + Clone
    + Send
    + sealed::Sealed
    + 'static
{
}

impl<S> McpService for S where
    S: Service<McpRequest, Response: Serialize, Error: Into<BoxError>, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

mod sealed {
    /// Keeps [`McpService`](super::McpService) a name for its bound only.
    pub trait Sealed {}
    impl<S> Sealed for S {}
}

/// How a request ends on the wire. Decided once, by [`run`].
#[derive(Debug)]
pub(crate) enum Ending {
    /// Write this response (a result or an error).
    Respond {
        /// The encoded response.
        bytes: Vec<u8>,
        /// Its JSON-RPC error code, for an error (HTTP maps some to statuses).
        #[cfg_attr(not(feature = "http"), allow(dead_code))]
        error_code: Option<i64>,
    },
    /// A `subscriptions/listen` stream torn down by the server without a
    /// result, for this reason: both transports send `notifications/cancelled`.
    TearDown(String),
    /// Write nothing: the transport cancelled the request, for this reason
    /// (HTTP answers a shutdown before the first byte with `503`).
    Silent(#[cfg_attr(not(feature = "http"), allow(dead_code))] CancelReason),
}

/// Builds the request the service sees, with its [`Cancellation`] and a
/// [`Notifier`] that sends through `scope` into `tx`; `view` is what the
/// decode read of its params (its tool's name is taken from there).
///
/// `shutdown` is the server's shutdown token, if it has one: the tasks the
/// request creates stop with it (see the `tasks` module).
pub(crate) fn prepare(
    raw: RawRequest,
    view: &ParamsView<'_>,
    scope: &Scope,
    tx: Option<tokio::sync::mpsc::Sender<Outgoing>>,
    shutdown: Option<&tokio_util::sync::CancellationToken>,
) -> McpRequest {
    let notifier = Notifier::new(tx, raw.progress_token.clone(), scope.clone());
    let mut req = McpRequest::decoded(raw, view);
    req.set_cancellation(scope.cancellation().clone());
    req.extensions_mut().insert(notifier);
    #[cfg(feature = "tasks")]
    if let Some(token) = shutdown {
        req.extensions_mut()
            .insert(crate::request::TransportShutdown(token.clone()));
    }
    #[cfg(not(feature = "tasks"))]
    let _ = shutdown;
    req
}

/// The cooperative grace of `req` under a transport's `policy`: by its
/// tool for a `tools/call`, else by its method (none when it has none).
pub(crate) fn grace_of(policy: &MethodPolicy<Duration>, req: &McpRequest) -> Duration {
    policy
        .limit_for_call(Some(req.method()), req.tool_name())
        .unwrap_or_default()
}

/// Runs one request to its end: readies and calls `service`, races the call
/// against the request's cancellation (the cancel is checked first, so a
/// processed cancel is never followed by the handler's answer), turns a
/// panic into an internal error, and decides the [`Ending`].
///
/// The request's span (see [`observe`](crate::observe)) is opened here,
/// its fields from `params` read from `view` (the decode's, not parsed
/// again), the handler runs inside it, and its [`Outcome`](crate::observe::Outcome) is recorded when the
/// ending is decided — or, if the future is dropped first, the outcome of
/// the drop.
///
/// `grace` is the cooperative grace of the transport's policy for this
/// request (see [`ServerCall`]); a `subscriptions/listen` gets none.
///
/// Dropping the returned future drops the handler and fires the token with
/// [`CancelReason::ClientDisconnected`], unless the request's cancellation
/// already holds a reason (a shutdown, a limit).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<S>(
    mut service: S,
    req: McpRequest,
    view: ParamsView<'_>,
    id: RequestId,
    cancellation: Cancellation,
    is_listen: bool,
    transport: Transport,
    era: Option<Era>,
    grace: Duration,
) -> ServerCall<impl Future<Output = Result<S::Response, BoxError>> + Send + 'static, S::Response>
where
    S: Service<McpRequest> + Send + 'static,
    S::Response: Serialize,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let record = Record::start(
        Side::Server,
        transport,
        era,
        Some(&id),
        req.method(),
        SpanParams::Viewed(view),
    )
    .with_cancellation(cancellation.clone());
    if !is_listen {
        // Before the service sees the request: its layers then hand a
        // cancelled future to this call instead of dropping it.
        cancellation.own_grace(grace);
    }
    let guard = DisconnectGuard::new(cancellation.clone());
    let call = AssertUnwindSafe(async move {
        service.ready().await.map_err(Into::into)?;
        service.call(req).await.map_err(Into::into)
    })
    .catch_unwind()
    .map(|out| out.unwrap_or_else(|_panic| Err(Box::new(Panicked) as BoxError)));
    let span = record.span().clone();
    ServerCall {
        call: Some(call),
        guard: Some(guard),
        record,
        span,
        cancellation,
        id,
        is_listen,
        polled: false,
        grace: None,
        on_end: None,
        _response: PhantomData,
    }
}

/// What a transport runs once a request's [`Ending`] is decided (a 2025
/// session lets its id go).
pub(crate) type OnEnd = Box<dyn FnOnce(&Ending) + Send>;

pin_project! {
    /// One server request's call, from [`run`]: a future of its [`Ending`],
    /// and the one owner of the rule of the cooperative grace.
    ///
    /// On a cancel — whatever its cause: the peer's, a disconnect, a
    /// session's, a limit inside the stack, the shutdown — the request's
    /// token has fired. Without a grace the handler future is dropped at
    /// once. With one (the transport's policy, or the request's
    /// [`Cancellation::set_grace`]), the [`Ending`] is still decided at
    /// once, exactly as without (nothing for a cancelled id; a limit's
    /// error answer), and the transport writes it and ends the request's
    /// gate; the handler future is then polled on by
    /// [`poll_grace`](Self::poll_grace) until it ends or the grace is over,
    /// and dropped. The layers in the stack that would drop it on their
    /// own leave that to this call (they see
    /// [`Cancellation::grace_handed`]).
    pub(crate) struct ServerCall<F, T> {
        // Fields drop in declaration order: on an early drop the handler
        // future goes first, then the guard fires the token.
        #[pin]
        call: Option<F>,
        guard: Option<DisconnectGuard>,
        record: Record,
        // The request's span (the record's), entered at each poll.
        span: Span,
        cancellation: Cancellation,
        id: RequestId,
        is_listen: bool,
        // Whether the handler was polled: one never started gets no grace.
        polled: bool,
        // The end of the grace, while the handler is in it.
        grace: Option<Pin<Box<Sleep>>>,
        on_end: Option<OnEnd>,
        _response: PhantomData<fn() -> T>,
    }
}

impl<F, T> ServerCall<F, T>
where
    F: Future<Output = Result<T, BoxError>>,
    T: Serialize,
{
    /// Runs `on_end` once the [`Ending`] is decided (before the grace).
    #[cfg(feature = "http")]
    pub(crate) fn on_end(mut self, on_end: OnEnd) -> Self {
        self.on_end = Some(on_end);
        self
    }

    /// Whether the handler is in its grace: the ending was given, and
    /// [`poll_grace`](Self::poll_grace) must still be driven.
    pub(crate) fn in_grace(&self) -> bool {
        self.grace.is_some()
    }

    /// Drives the grace: `Ready` once the handler future ended within it
    /// or, the grace over, was dropped (`Ready` at once when there is no
    /// grace). Its output goes nowhere: the gate is closed.
    pub(crate) fn poll_grace(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(sleep) = this.grace.as_mut() else {
            return Poll::Ready(());
        };
        let _span = this.span.enter();
        // The handler wins a tie with the end of the grace.
        let finished = match this.call.as_mut().as_pin_mut() {
            Some(call) => call.poll(cx).is_ready(),
            None => true,
        };
        if !finished && sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.call.set(None);
        *this.grace = None;
        if !finished {
            tracing::debug!(request_id = %this.id, "grace over; handler future dropped");
        }
        this.record.grace_ended(finished);
        Poll::Ready(())
    }

    /// The client went away before the ending (an HTTP disconnect):
    /// cancels with [`CancelReason::ClientDisconnected`] (the token fires)
    /// and, when the request has a grace, starts it (`true`: drive
    /// [`poll_grace`](Self::poll_grace); nothing is to be written). `false`:
    /// drop the call, as without a grace.
    #[cfg(feature = "http")]
    pub(crate) fn disconnect(self: Pin<&mut Self>) -> bool {
        let this = self.project();
        let Some(guard) = this.guard.as_mut() else {
            return false;
        };
        let cancellation = guard.cancellation().clone();
        if *this.is_listen || !*this.polled || this.call.is_none() || !cancellation.grace_handed() {
            return false;
        }
        cancellation.cancel(CancelReason::ClientDisconnected);
        let Some(reason) = cancellation.reason().cloned() else {
            return false;
        };
        guard.log_cancelled(&reason, "request cancelled; handler future in its grace");
        guard.defuse();
        *this.guard = None;
        use crate::observe::Outcome;
        let outcome = Outcome::dropped(Some(&cancellation)).unwrap_or(Outcome::ClientDisconnected);
        this.record.end_keeping_span(&outcome);
        *this.grace = cancellation
            .grace()
            .map(|g| Box::pin(tokio::time::sleep(g)));
        this.grace.is_some()
    }
}

impl<F, T> Future for ServerCall<F, T>
where
    F: Future<Output = Result<T, BoxError>>,
    T: Serialize,
{
    type Output = Ending;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ending> {
        let mut this = self.project();
        let _span = this.span.enter();
        // A handler never polled gets no grace; nor does a listen.
        let grace_allowed = *this.polled && !*this.is_listen;
        assert!(this.guard.is_some(), "ServerCall polled after its ending");
        let cancellation: &Cancellation = this.cancellation;
        // The cancel is checked first: once it is processed, the handler is
        // never polled again for an answer, so none can follow it.
        let out = if let Some(reason) = cancellation.reason().cloned() {
            cancelled(
                this.call.as_mut(),
                this.guard,
                this.grace,
                grace_allowed,
                cancellation,
                reason,
            )
        } else {
            let call = this
                .call
                .as_mut()
                .as_pin_mut()
                .expect("the call is present until its ending");
            *this.polled = true;
            let grace_allowed = !*this.is_listen;
            match call.poll(cx) {
                Poll::Ready(out) => {
                    this.call.set(None);
                    if let Some(guard) = this.guard.take() {
                        guard.complete();
                    }
                    out
                }
                // A cancel that landed while the handler was being polled
                // is seen here.
                Poll::Pending => match cancellation.poll_cancelled(cx) {
                    Poll::Ready(reason) => cancelled(
                        this.call.as_mut(),
                        this.guard,
                        this.grace,
                        grace_allowed,
                        cancellation,
                        reason,
                    ),
                    Poll::Pending => return Poll::Pending,
                },
            }
        };
        let (ending, outcome) = ending(this.id, *this.is_listen, cancellation, out);
        this.record.end_keeping_span(&outcome);
        if let Some(on_end) = this.on_end.take() {
            on_end(&ending);
        }
        Poll::Ready(ending)
    }
}

/// A [`ServerCall`] whose types are erased (HTTP keeps one behind a box).
#[cfg(feature = "http")]
pub(crate) trait GracefulCall: Future<Output = Ending> + Send {
    /// See [`ServerCall::in_grace`].
    fn in_grace(&self) -> bool;
    /// See [`ServerCall::poll_grace`].
    fn poll_grace(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()>;
    /// See [`ServerCall::disconnect`].
    fn disconnect(self: Pin<&mut Self>) -> bool;
}

#[cfg(feature = "http")]
impl<F, T> GracefulCall for ServerCall<F, T>
where
    F: Future<Output = Result<T, BoxError>> + Send,
    T: Serialize,
{
    fn in_grace(&self) -> bool {
        ServerCall::in_grace(self)
    }

    fn poll_grace(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        ServerCall::poll_grace(self, cx)
    }

    fn disconnect(self: Pin<&mut Self>) -> bool {
        ServerCall::disconnect(self)
    }
}

/// Ends a cancelled request's race: the handler future is dropped, or,
/// with a grace, kept for [`ServerCall::poll_grace`]; the result is what a
/// layer dropping it would have returned (a limit's [`Elapsed`](crate::Elapsed), or
/// [`Cancelled`]).
#[cold]
fn cancelled<F, T>(
    call: Pin<&mut Option<F>>,
    guard: &mut Option<DisconnectGuard>,
    grace_end: &mut Option<Pin<Box<Sleep>>>,
    grace_allowed: bool,
    cancellation: &Cancellation,
    reason: CancelReason,
) -> Result<T, BoxError>
where
    F: Future<Output = Result<T, BoxError>>,
{
    let grace = match cancellation.grace() {
        Some(g) if grace_allowed && cancellation.grace_handed() => Some(g),
        _ => None,
    };
    if let Some(mut guard) = guard.take() {
        let what = if grace.is_some() {
            "request cancelled; handler future in its grace"
        } else {
            "request cancelled; handler future dropped"
        };
        guard.log_cancelled(&reason, what);
        guard.defuse();
    }
    match grace {
        Some(grace) => *grace_end = Some(Box::pin(tokio::time::sleep(grace))),
        None => {
            let mut call = call;
            call.set(None);
        }
    }
    match reason {
        // What the expired layer would have answered, had it dropped the
        // stack itself.
        CancelReason::Timeout(elapsed) if grace.is_some() => Err(Box::new(elapsed)),
        reason => Err(Box::new(Cancelled::new(reason))),
    }
}
