//! The [`Exchange`]: one MCP request's call, its notification queue and its
//! outgoing gate, owned first by the response future, then by the SSE body.
//!
//! Dropping an [`Exchange`] before the call ended drops the handler future
//! and fires its [`Cancellation`](crate::Cancellation) with
//! [`CancelReason::ClientDisconnected`] (with a
//! [grace](crate::transport#cooperative-grace-then-drop): fires it at once,
//! and drops the handler future after the grace, on a task of its own
//! that holds what the request holds) — unless the request is a legacy one
//! whose disconnect does not cancel, in which case the call is detached and
//! runs on, answered to nobody: still cancelled by the shutdown (after the
//! drain grace) as an attached one would be, and still holding what the
//! request holds ([`Hold`]: its place under the in-flight bound, and
//! `serve`'s wait for it) until it ends.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use sse_stream::Sse;

use super::drain::ShutdownSignal;
use super::serve::Running;
use crate::jsonrpc::RequestId;
use crate::notify::outbox::{OwnQueue, Scope};
use crate::transport::admission::Place;
use crate::transport::call::server::{Ending, GracefulCall};
use crate::CancelReason;

/// One request's call, from [`call::server::run`](crate::transport::call::server::run).
pub(crate) type CallFuture = Pin<Box<dyn GracefulCall>>;

/// What the first poll phase of an exchange yields.
pub(crate) enum First {
    /// The call ended before any notification: answer with JSON (or a
    /// status, for nothing).
    Done(Ending),
    /// A notification came first: switch to SSE, starting with it.
    Stream,
}

/// What a request holds until its call ended, also when it runs on
/// detached after its client hung up; only its drop matters.
#[derive(Debug, Default)]
pub(crate) struct Hold {
    /// Under [`serve`](super::serve): `serve` does not return while it lives.
    pub(crate) _running: Option<Running>,
    /// Its place under the adapter's in-flight bound.
    pub(crate) _place: Option<Place>,
}

/// One request's call, its notification queue, and its outgoing gate.
pub(crate) struct Exchange {
    call: Option<CallFuture>,
    queue: OwnQueue,
    scope: Scope,
    id: RequestId,
    is_listen: bool,
    /// The server-wide shutdown signal (after the drain grace): it cancels
    /// the request.
    shutdown: Option<ShutdownSignal>,
    /// Whether the shutdown is waited on: from the call's first `Pending`
    /// on (see [`poll_call`](Self::poll_call)).
    watching: bool,
    /// A notification taken in the first phase, to send first.
    front: Option<Vec<u8>>,
    /// The final message, once the call ended, after the queued ones.
    last: Option<Vec<u8>>,
    done: bool,
    /// A legacy request whose disconnect must not cancel: detach on drop.
    detach_on_drop: bool,
    hold: Hold,
}

impl Exchange {
    pub(crate) fn new(
        call: CallFuture,
        queue: OwnQueue,
        scope: Scope,
        id: RequestId,
        is_listen: bool,
        shutdown: Option<ShutdownSignal>,
        detach_on_drop: bool,
    ) -> Self {
        Self {
            call: Some(call),
            queue,
            scope,
            id,
            is_listen,
            shutdown,
            watching: false,
            front: None,
            last: None,
            done: false,
            detach_on_drop,
            hold: Hold::default(),
        }
    }

    /// Gives the exchange what its request holds until the call ended.
    pub(crate) fn holding(mut self, hold: Hold) -> Self {
        self.hold = hold;
        self
    }

    /// Polls the call (and shutdown); `Ready` once it ended. The request's
    /// gate is closed then, so every message of it is already queued.
    ///
    /// The shutdown is waited on from the call's first `Pending` on, and
    /// then polled first, so that a fired shutdown cancels before the
    /// call's next poll. A call that ends in its first poll (the request
    /// was not refused for the shutdown a moment before, in the same poll
    /// of the task) never takes the server-wide token: see
    /// [`ShutdownSignal`].
    fn poll_call(&mut self, cx: &mut Context<'_>) -> Poll<Ending> {
        if self.watching {
            poll_shutdown(&mut self.shutdown, &self.scope, cx);
        }
        let Some(call) = self.call.as_mut() else {
            return Poll::Ready(Ending::Silent(CancelReason::ClientDisconnected));
        };
        let ending = match call.as_mut().poll(cx) {
            Poll::Ready(ending) => ending,
            Poll::Pending => {
                if !std::mem::replace(&mut self.watching, true)
                    && poll_shutdown(&mut self.shutdown, &self.scope, cx)
                {
                    // Fired already: the call sees the cancel at its next poll.
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
        };
        if let Some(call) = self.call.take() {
            if call.in_grace() {
                in_grace(call, std::mem::take(&mut self.hold));
            }
        }
        self.scope.end();
        // Senders waiting for queue space learn that the request is over.
        self.queue.close();
        Poll::Ready(ending)
    }

    fn next_notification(&mut self, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        loop {
            match std::task::ready!(self.queue.poll_recv(cx)) {
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
        while let Some(msg) = self.queue.try_recv() {
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
            self.last = last_message(&self.id, ending);
            return Poll::Ready(First::Stream);
        }
        self.done = true;
        Poll::Ready(First::Done(ending))
    }

    /// The request's id.
    pub(crate) fn id(&self) -> &RequestId {
        &self.id
    }

    /// Whether the request is a `subscriptions/listen` stream.
    pub(crate) fn is_listen(&self) -> bool {
        self.is_listen
    }
}

/// What an SSE stream sends last: the response; for a listen the server
/// tore down, the `notifications/cancelled` naming it (cancellation.md: the
/// one message a server cancels with, so that the client does not take the
/// end for a dropped connection); nothing for a request the transport
/// cancelled (the stream just ends).
fn last_message(id: &RequestId, ending: Ending) -> Option<Vec<u8>> {
    match ending {
        Ending::Respond { bytes, .. } => Some(bytes),
        Ending::TearDown(reason) => crate::jsonrpc::encode_cancelled(id, reason).ok(),
        Ending::Silent(_) => None,
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
            this.last = last_message(&this.id, ending);
        }
    }
}

/// Fires the request's cancellation with [`CancelReason::Shutdown`] once
/// the shutdown signal (after the drain grace) is ready: the call then sees
/// the cancel first thing and ends as the lifecycle says (a listen stream:
/// its graceful result).
/// Whether it fired the cancellation now.
fn poll_shutdown(
    shutdown: &mut Option<ShutdownSignal>,
    scope: &Scope,
    cx: &mut Context<'_>,
) -> bool {
    if let Some(signal) = shutdown.as_mut() {
        if signal.poll_fire(cx).is_ready() {
            *shutdown = None;
            scope.cancellation().cancel(CancelReason::Shutdown);
            return true;
        }
    }
    false
}

/// A call whose client hung up, run to its end — or until the shutdown
/// cancels it, as it would cancel the call attached — then its hold let go.
async fn detached(
    mut call: CallFuture,
    scope: Scope,
    mut shutdown: Option<ShutdownSignal>,
    hold: Hold,
) {
    std::future::poll_fn(|cx| {
        poll_shutdown(&mut shutdown, &scope, cx);
        call.as_mut().poll(cx)
    })
    .await;
    scope.end();
    std::future::poll_fn(|cx| call.as_mut().poll_grace(cx)).await;
    drop(hold);
}

/// Drives the cooperative grace of a call whose ending was decided (or
/// whose client went away), on a task of its own, holding what its request
/// holds until it ended. Without a runtime (not reached under one), the
/// call is dropped: no grace.
fn in_grace(mut call: CallFuture, hold: Hold) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            std::future::poll_fn(|cx| call.as_mut().poll_grace(cx)).await;
            drop(hold);
        });
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else { return };
        if self.detach_on_drop {
            // Legacy request (2025-xx): disconnection is not cancellation.
            // Let the handler run on; its answer goes nowhere.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                tracing::info!(request_id = %self.id, "legacy client disconnected; handler left running (disconnect is not cancellation before 2026-07-28)");
                handle.spawn(detached(
                    call,
                    self.scope.clone(),
                    self.shutdown.take(),
                    std::mem::take(&mut self.hold),
                ));
                return;
            }
        }
        let mut call = call;
        // With a grace, the token fires now and the handler goes on in it;
        // without, dropping the call drops the handler, then fires its
        // token.
        if call.as_mut().disconnect() {
            self.scope.end();
            in_grace(call, std::mem::take(&mut self.hold));
            return;
        }
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
