//! The response side of one MCP request over HTTP: the [`Exchange`] that owns
//! the request's call (first inside the response future, then inside the SSE
//! body), and [`ResponseBody`], the body type of the server adapter.
//!
//! Dropping an [`Exchange`] before the call ended drops the handler future
//! and fires its [`Cancellation`](crate::Cancellation) with
//! [`CancelReason::ClientDisconnected`] — unless the request is a legacy one
//! whose disconnect does not cancel, in which case the call is detached and
//! runs to its end, answered to nobody.

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

use crate::error::BoxError;
use crate::jsonrpc::RequestId;
use crate::transport::call::outbox::{Outgoing, Scope};
use crate::transport::call::server::Ending;
use crate::CancelReason;

/// One request's call, from [`call::server::run`](crate::transport::call::server::run).
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = Ending> + Send>>;

/// What the first poll phase of an exchange yields.
pub(crate) enum First {
    /// The call ended before any notification: answer with JSON (or a
    /// status, for nothing).
    Done(Ending),
    /// A notification came first: switch to SSE, starting with it.
    Stream,
}

/// One request's call, its notification queue, and its outgoing gate.
pub(crate) struct Exchange {
    call: Option<CallFuture>,
    rx: mpsc::Receiver<Outgoing>,
    scope: Scope,
    id: RequestId,
    /// The server-wide shutdown signal: it cancels the request.
    shutdown: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// A notification taken in the first phase, to send first.
    front: Option<Vec<u8>>,
    /// The final message, once the call ended, after the queued ones.
    last: Option<Vec<u8>>,
    done: bool,
    /// A legacy request whose disconnect must not cancel: detach on drop.
    detach_on_drop: bool,
}

impl Exchange {
    pub(crate) fn new(
        call: CallFuture,
        rx: mpsc::Receiver<Outgoing>,
        scope: Scope,
        id: RequestId,
        shutdown: Option<tokio_util::sync::CancellationToken>,
        detach_on_drop: bool,
    ) -> Self {
        Self {
            call: Some(call),
            rx,
            scope,
            id,
            shutdown: shutdown.map(|t| Box::pin(t.cancelled_owned())),
            front: None,
            last: None,
            done: false,
            detach_on_drop,
        }
    }

    /// Polls the call (and shutdown); `Ready` once it ended. The request's
    /// gate is closed then, so every message of it is already queued.
    fn poll_call(&mut self, cx: &mut Context<'_>) -> Poll<Ending> {
        if let Some(shutdown) = self.shutdown.as_mut() {
            if shutdown.as_mut().poll(cx).is_ready() {
                // The call sees the cancel first thing and ends as the
                // lifecycle says (a listen stream: its graceful result).
                self.shutdown = None;
                self.scope.cancellation().cancel(CancelReason::Shutdown);
            }
        }
        let Some(call) = self.call.as_mut() else {
            return Poll::Ready(Ending::Silent(CancelReason::ClientDisconnected));
        };
        let ending = std::task::ready!(call.as_mut().poll(cx));
        self.call = None;
        self.scope.end();
        // Senders waiting for queue space learn that the request is over.
        self.rx.close();
        Poll::Ready(ending)
    }

    fn next_notification(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        loop {
            match std::task::ready!(self.rx.poll_recv(cx)) {
                Some(msg) => match msg.into_live_bytes() {
                    Some(bytes) => return Poll::Ready(Some(bytes)),
                    None => continue,
                },
                None => return Poll::Ready(None),
            }
        }
    }

    /// A notification queued before the call ended, without waiting.
    fn queued_notification(&mut self) -> Option<Vec<u8>> {
        while let Ok(msg) = self.rx.try_recv() {
            if let Some(bytes) = msg.into_live_bytes() {
                return Some(bytes);
            }
        }
        None
    }

    /// The first phase, inside the response future.
    pub(crate) fn poll_first(&mut self, cx: &mut Context<'_>) -> Poll<First> {
        if let Poll::Ready(Some(n)) = self.next_notification(cx) {
            self.front = Some(n);
            return Poll::Ready(First::Stream);
        }
        let ending = std::task::ready!(self.poll_call(cx));
        // Notifications queued before the end still go first.
        if let Some(n) = self.queued_notification() {
            self.front = Some(n);
            self.last = last_message(ending);
            return Poll::Ready(First::Stream);
        }
        self.done = true;
        Poll::Ready(First::Done(ending))
    }

    /// The request's id.
    pub(crate) fn id(&self) -> &RequestId {
        &self.id
    }
}

/// What an SSE stream sends last: the response, or nothing (a listen torn
/// down by the server, or a request the transport cancelled: the stream
/// just ends).
fn last_message(ending: Ending) -> Option<Vec<u8>> {
    match ending {
        Ending::Respond { bytes, .. } => Some(bytes),
        Ending::TearDown(_) | Ending::Silent(_) => None,
    }
}

impl Stream for Exchange {
    type Item = Result<Sse, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(front) = this.front.take() {
                return Poll::Ready(Some(Ok(event(front))));
            }
            if this.call.is_none() {
                // Drain what was queued before the end, then the answer.
                if let Some(n) = this.queued_notification() {
                    return Poll::Ready(Some(Ok(event(n))));
                }
                this.done = true;
                return Poll::Ready(this.last.take().map(|b| Ok(event(b))));
            }
            if let Poll::Ready(Some(n)) = this.next_notification(cx) {
                return Poll::Ready(Some(Ok(event(n))));
            }
            let ending = std::task::ready!(this.poll_call(cx));
            this.last = last_message(ending);
        }
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else { return };
        if self.detach_on_drop {
            // Legacy request (2025-xx): disconnection is not cancellation.
            // Let the handler run to its end; its answer goes nowhere.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                tracing::info!(request_id = %self.id, "legacy client disconnected; handler left running (disconnect is not cancellation before 2026-07-28)");
                let scope = self.scope.clone();
                handle.spawn(async move {
                    let _ = call.await;
                    scope.end();
                });
                return;
            }
        }
        // Dropping the call drops the handler, then fires its token.
        drop(call);
        self.scope.end();
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
