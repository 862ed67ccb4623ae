//! The response side of one MCP request over HTTP: the [`Exchange`] that owns
//! the handler future (first inside the response future, then inside the SSE
//! body), and [`ResponseBody`], the body type of the server adapter.
//!
//! Dropping an [`Exchange`] before it produced the final response drops the
//! handler future and fires its [`Cancellation`] with
//! [`CancelReason::ClientDisconnected`](crate::CancelReason::ClientDisconnected)
//! — unless the request is a legacy one whose disconnect does not cancel, in
//! which case the handler is detached and runs to its end, answered to nobody.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;
use sse_stream::{KeepAlive, Sse, SseBody, Timer};
use tokio::sync::mpsc;
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::cancel::{with_drop_reason, DisconnectGuard};
use crate::error::BoxError;
use crate::jsonrpc::RequestId;
use crate::notify::Outgoing;
use crate::transport::dispatch;
use crate::{CancelReason, Cancellation};

/// The boxed outcome of the MCP stack for one request: the encoded answer,
/// or `None` when nothing must be written (the request was cancelled).
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = CallOutcome> + Send>>;

/// What a finished call produced.
pub(crate) struct CallOutcome {
    /// The encoded response (`None`: write nothing).
    pub(crate) bytes: Option<Vec<u8>>,
    /// The JSON-RPC error code, when the answer is an error.
    pub(crate) error_code: Option<i64>,
}

/// What the first poll phase of an exchange yields.
pub(crate) enum First {
    /// The call finished before any notification: answer with JSON.
    Done(CallOutcome),
    /// A notification came first: switch to SSE, starting with it.
    Stream,
}

/// One request's handler future, its notification queue, and its guard.
pub(crate) struct Exchange {
    // Field order matters: on drop the handler future goes first, then the
    // guard fires the token (see `Drop`).
    fut: Option<CallFuture>,
    guard: Option<DisconnectGuard>,
    rx: mpsc::Receiver<Outgoing>,
    cancellation: Cancellation,
    id: RequestId,
    /// The server-wide shutdown signal: it cancels the request (a listen
    /// stream gets its graceful result).
    shutdown: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    is_listen: bool,
    /// A notification taken in the first phase, to send first.
    front: Option<Vec<u8>>,
    /// The final response, once produced, waiting for queued notifications.
    last: Option<Vec<u8>>,
    done: bool,
    /// A legacy request whose disconnect must not cancel: detach on drop.
    detach_on_drop: bool,
}

impl Exchange {
    pub(crate) fn new(
        fut: CallFuture,
        rx: mpsc::Receiver<Outgoing>,
        cancellation: Cancellation,
        guard: Option<DisconnectGuard>,
        id: RequestId,
        shutdown: Option<tokio_util::sync::CancellationToken>,
        is_listen: bool,
    ) -> Self {
        Self {
            is_listen,
            fut: Some(fut),
            detach_on_drop: guard.is_none(),
            guard,
            rx,
            cancellation,
            id,
            shutdown: shutdown.map(|t| Box::pin(t.cancelled_owned())),
            front: None,
            last: None,
            done: false,
        }
    }

    fn finish(&mut self) {
        self.fut = None;
        match self.guard.take() {
            Some(g) => g.complete(),
            None => {
                self.cancellation.complete();
            }
        }
    }

    /// Polls the handler (and shutdown); `Ready` once the final answer is
    /// known (stored in `last`, or `None` for nothing).
    fn poll_call(&mut self, cx: &mut Context<'_>) -> Poll<CallOutcome> {
        if let Some(shutdown) = self.shutdown.as_mut() {
            if self.fut.is_some() && shutdown.as_mut().poll(cx).is_ready() {
                // The server shuts down: drop the handler with that reason.
                // A listen stream then gets its graceful result; any other
                // request gets nothing (the response ends without an answer).
                self.shutdown = None;
                let reason = CancelReason::Shutdown;
                self.cancellation.cancel(reason.clone());
                let fut = self.fut.take();
                with_drop_reason(&reason, move || drop(fut));
                if let Some(mut g) = self.guard.take() {
                    g.disarm();
                }
                if !self.is_listen {
                    tracing::info!(request_id = %self.id, %reason, "request cancelled: server shutting down");
                    return Poll::Ready(CallOutcome {
                        bytes: None,
                        error_code: None,
                    });
                }
                tracing::info!(request_id = %self.id, "server shutting down: subscriptions/listen ended gracefully");
                let result = dispatch::listen_result(&self.id, serde_json::json!({}));
                return Poll::Ready(CallOutcome {
                    bytes: Some(crate::jsonrpc::encode_response(Some(&self.id), Ok(&result))),
                    error_code: None,
                });
            }
        }
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Ready(CallOutcome {
                bytes: None,
                error_code: None,
            });
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(out) => {
                self.finish();
                Poll::Ready(out)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn next_notification(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(msg)) if msg.is_live() => return Poll::Ready(Some(msg.bytes)),
                Poll::Ready(Some(_)) => continue,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// The first phase, inside the response future.
    pub(crate) fn poll_first(&mut self, cx: &mut Context<'_>) -> Poll<First> {
        if let Poll::Ready(Some(n)) = self.next_notification(cx) {
            self.front = Some(n);
            return Poll::Ready(First::Stream);
        }
        match self.poll_call(cx) {
            Poll::Ready(out) => {
                // Notifications queued before the answer still go first.
                while let Ok(msg) = self.rx.try_recv() {
                    if msg.is_live() {
                        self.front = Some(msg.bytes);
                        self.last = out.bytes;
                        return Poll::Ready(First::Stream);
                    }
                }
                self.done = true;
                Poll::Ready(First::Done(out))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether the handler has finished (answer produced, or nothing to answer).
    pub(crate) fn call_finished(&self) -> bool {
        self.fut.is_none()
    }

    /// The request's id.
    pub(crate) fn id(&self) -> &RequestId {
        &self.id
    }
}

impl Stream for Exchange {
    type Item = Result<Sse, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(front) = this.front.take() {
            return Poll::Ready(Some(Ok(event(front))));
        }
        if this.call_finished() {
            // Drain what was queued before the answer, then the answer.
            while let Ok(msg) = this.rx.try_recv() {
                if msg.is_live() {
                    return Poll::Ready(Some(Ok(event(msg.bytes))));
                }
            }
            this.done = true;
            return Poll::Ready(this.last.take().map(|b| Ok(event(b))));
        }
        if let Poll::Ready(Some(n)) = this.next_notification(cx) {
            return Poll::Ready(Some(Ok(event(n))));
        }
        match this.poll_call(cx) {
            Poll::Ready(out) => {
                this.last = out.bytes;
                // Loop once more through the drain branch.
                Pin::new(this).poll_next(cx)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let Some(fut) = self.fut.take() else { return };
        if self.detach_on_drop {
            // Legacy request (2025-xx): disconnection is not cancellation.
            // Let the handler run to its end; its answer goes nowhere.
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    tracing::info!(request_id = %self.id, "legacy client disconnected; handler left running (disconnect is not cancellation before 2026-07-28)");
                    let cancellation = self.cancellation.clone();
                    handle.spawn(async move {
                        let _ = fut.await;
                        cancellation.complete();
                    });
                }
                Err(_) => drop(fut),
            }
            return;
        }
        // The handler future first, then the guard fires the token and logs.
        drop(fut);
        drop(self.guard.take());
    }
}

fn event(bytes: Vec<u8>) -> Sse {
    // JSON never contains raw newlines inside strings, and serde_json writes
    // no newlines between tokens: one data line per message.
    Sse::default()
        .event("message")
        .data(String::from_utf8_lossy(&bytes).into_owned())
}

/// A [`sse_stream::Timer`] on tokio's clock, for keep-alive comments.
pub struct TokioTimer {
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl std::fmt::Debug for TokioTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioTimer")
            .field("deadline", &self.sleep.deadline())
            .finish()
    }
}

impl Future for TokioTimer {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().sleep.as_mut().poll(cx)
    }
}

impl Timer for TokioTimer {
    fn reset(self: Pin<&mut Self>, instant: std::time::Instant) {
        // sse-stream speaks std's clock; keep the same distance on tokio's.
        let delay = instant.saturating_duration_since(std::time::Instant::now());
        self.get_mut()
            .sleep
            .as_mut()
            .reset(tokio::time::Instant::now() + delay);
    }
    fn from_duration(duration: Duration) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(duration)),
        }
    }
}

pin_project! {
    /// The response body of [`StreamableHttpService`](super::StreamableHttpService):
    /// a complete JSON body, or an SSE stream that owns the request's handler.
    ///
    /// Dropping an SSE body before its end (the client went away) drops the
    /// handler future and fires its cancellation token.
    pub struct ResponseBody {
        // An SSE comment sent before anything else (the switch to SSE of a
        // silent handler).
        prelude: Option<Bytes>,
        #[pin]
        kind: Kind,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind {
        Full { #[pin] body: Full<Bytes> },
        Sse { #[pin] body: SseBody<Exchange, TokioTimer> },
        SseNoKeepAlive { #[pin] body: SseBody<Exchange> },
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Full { .. } => "json",
            _ => "sse",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

impl ResponseBody {
    /// A complete body.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            prelude: None,
            kind: Kind::Full {
                body: Full::new(bytes.into()),
            },
        }
    }

    /// An empty body.
    pub fn empty() -> Self {
        Self::full(Bytes::new())
    }

    pub(crate) fn sse(exchange: Exchange, keep_alive: Option<Duration>) -> Self {
        let kind = match keep_alive {
            Some(interval) => Kind::Sse {
                body: SseBody::new_keep_alive(exchange, KeepAlive::new().interval(interval)),
            },
            None => Kind::SseNoKeepAlive {
                body: SseBody::new(exchange),
            },
        };
        Self {
            prelude: None,
            kind,
        }
    }

    /// Starts the body with an SSE comment line (`:` and a blank line).
    pub(crate) fn comment_first(&mut self) {
        self.prelude = Some(Bytes::from_static(b":\n\n"));
    }
}

impl From<Full<Bytes>> for ResponseBody {
    fn from(body: Full<Bytes>) -> Self {
        Self {
            prelude: None,
            kind: Kind::Full { body },
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(comment) = this.prelude.take() {
            return Poll::Ready(Some(Ok(Frame::data(comment))));
        }
        match this.kind.project() {
            KindProj::Full { body } => body.poll_frame(cx).map_err(|e| match e {}),
            KindProj::Sse { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::SseNoKeepAlive { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.prelude.is_some() {
            return false;
        }
        match &self.kind {
            Kind::Full { body } => body.is_end_stream(),
            Kind::Sse { body } => body.is_end_stream(),
            Kind::SseNoKeepAlive { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { body } if self.prelude.is_none() => body.size_hint(),
            _ => SizeHint::default(),
        }
    }
}
