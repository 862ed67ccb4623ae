//! [`Scope`]: the gate through which one request's messages leave.
//!
//! Every message that belongs to a request (progress, a log notification)
//! enters the transport's queue through its request's scope, and the
//! request's final message (its response, or the teardown of a listen
//! stream) closes the scope as it is queued, under the same lock. So, in
//! queue order, nothing of a request can follow its end: a reporter that
//! was waiting for queue space when the request ended is refused, and is
//! told so (`false`). A message already queued when the request is
//! cancelled is dropped unsent by the writer ([`Outgoing::is_live`]).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::sync::mpsc::{self, Permit};

use crate::Cancellation;

/// One encoded message on its way to the peer (no trailing newline).
#[derive(Debug)]
pub(crate) struct Outgoing {
    bytes: Vec<u8>,
    /// The request this message belongs to; `None` for a request's final
    /// message and for messages that belong to no request.
    scope: Option<Scope>,
    /// `bytes` are several final messages, each with its newline (a stdio
    /// batch), instead of one message without it.
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    lines: bool,
}

impl Outgoing {
    /// A message that belongs to no request (or is a request's final one).
    pub(crate) fn unscoped(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            scope: None,
            lines: false,
        }
    }

    /// Final messages of requests, each followed by a newline (stdio).
    #[cfg(feature = "stdio")]
    pub(crate) fn lines(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            scope: None,
            lines: true,
        }
    }

    /// Whether this is [`lines`](Self::lines) rather than one message.
    #[cfg(feature = "stdio")]
    pub(crate) fn is_lines(&self) -> bool {
        self.lines
    }

    /// The encoded message, if it must still be written: `None` when its
    /// request was cancelled after it was queued.
    pub(crate) fn into_live_bytes(self) -> Option<Vec<u8>> {
        match &self.scope {
            Some(scope) if scope.cancellation().is_cancelled() => None,
            _ => Some(self.bytes),
        }
    }
}

/// One request's outgoing gate: open while the request runs, closed by its
/// end. Clones share the gate.
#[derive(Clone)]
pub(crate) struct Scope {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    cancellation: Cancellation,
}

/// What the lock guards: whether the request is still open, the last
/// progress value queued for it (progress MUST increase, whoever sends it),
/// and its own queue when it has one.
struct State {
    open: bool,
    last_progress: Option<f64>,
    own: Option<Own>,
}

/// A request's own queue (HTTP: the request's SSE stream), made when its
/// first message is sent: most requests send none, and a tokio channel
/// costs an allocation of its block, and locks on its close, that a
/// request answered at its first poll has no use for.
struct Own {
    capacity: usize,
    tx: Option<mpsc::Sender<Outgoing>>,
    /// Made, not yet taken by the [`OwnQueue`].
    rx: Option<mpsc::Receiver<Outgoing>>,
    /// The [`OwnQueue`] waiting for the queue to be made.
    waker: Option<Waker>,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("open", &self.is_open())
            .finish()
    }
}

impl Scope {
    /// An open scope for the request whose cancellation is `cancellation`.
    pub(crate) fn new(cancellation: Cancellation) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    open: true,
                    last_progress: None,
                    own: None,
                }),
                cancellation,
            }),
        }
    }

    /// An open scope whose messages go to a queue of its own of
    /// `capacity`, made when the first is sent; [`OwnQueue`] receives them.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn with_own_queue(cancellation: Cancellation, capacity: usize) -> (Self, OwnQueue) {
        let scope = Self::new(cancellation);
        scope.lock().own = Some(Own {
            capacity,
            tx: None,
            rx: None,
            waker: None,
        });
        let queue = OwnQueue {
            scope: scope.clone(),
            rx: None,
        };
        (scope, queue)
    }

    /// The sender of this scope's own queue, made now if it is the first
    /// message; `None` once the request ended (or without a queue of its
    /// own).
    pub(crate) fn own_sender(&self) -> Option<mpsc::Sender<Outgoing>> {
        let mut state = self.lock();
        if !state.open {
            return None;
        }
        let own = state.own.as_mut()?;
        if let Some(tx) = &own.tx {
            return Some(tx.clone());
        }
        let (tx, rx) = mpsc::channel(own.capacity.max(1));
        own.tx = Some(tx.clone());
        own.rx = Some(rx);
        let waiting = own.waker.take();
        // Woken after the lock is let go: it takes the lock to receive.
        drop(state);
        if let Some(waker) = waiting {
            waker.wake();
        }
        Some(tx)
    }

    /// The request's cancellation.
    pub(crate) fn cancellation(&self) -> &Cancellation {
        &self.inner.cancellation
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The lock guards plain values and a synchronous `Permit::send`: a
        // poisoned lock still holds a consistent state.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether messages may still be sent: the request neither ended nor
    /// was cancelled. A cheap early check; [`send`](Self::send) decides.
    pub(crate) fn is_open(&self) -> bool {
        self.lock().open && !self.inner.cancellation.is_cancelled()
    }

    /// Queues `bytes` as a message of this request, if it is still open.
    /// Returns whether it was queued.
    pub(crate) fn send(&self, permit: Permit<'_, Outgoing>, bytes: Vec<u8>) -> bool {
        self.send_if(permit, bytes, |_| true)
    }

    /// Queues `bytes`, a progress notification with the value `progress`,
    /// if the request is still open and `progress` is greater than every
    /// value queued before it. Checked and queued under one lock, so that
    /// concurrent reporters cannot put a smaller value after a larger one.
    pub(crate) fn send_progress(
        &self,
        permit: Permit<'_, Outgoing>,
        progress: f64,
        bytes: Vec<u8>,
    ) -> bool {
        self.send_if(permit, bytes, |state| {
            let increases =
                progress.is_finite() && state.last_progress.is_none_or(|last| progress > last);
            if increases {
                state.last_progress = Some(progress);
            }
            increases
        })
    }

    fn send_if(
        &self,
        permit: Permit<'_, Outgoing>,
        bytes: Vec<u8>,
        allow: impl FnOnce(&mut State) -> bool,
    ) -> bool {
        let mut state = self.lock();
        if !state.open || self.inner.cancellation.is_cancelled() || !allow(&mut state) {
            return false;
        }
        permit.send(Outgoing {
            bytes,
            scope: Some(self.clone()),
            lines: false,
        });
        true
    }

    /// Ends the request: closes the scope and queues its final message (if
    /// any) in the same step, so that nothing of it can be queued after.
    pub(crate) fn end_with(&self, permit: Option<Permit<'_, Outgoing>>, last: Option<Vec<u8>>) {
        let mut state = self.lock();
        state.open = false;
        if let (Some(permit), Some(bytes)) = (permit, last) {
            permit.send(Outgoing::unscoped(bytes));
        }
    }

    /// Ends the request without a final message through the queue (the
    /// transport writes it itself, or writes nothing).
    pub(crate) fn end(&self) {
        self.end_with(None, None);
    }
}

/// The receiving end of a scope's own queue (see
/// [`Scope::with_own_queue`]): nothing until the first message is sent.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct OwnQueue {
    scope: Scope,
    rx: Option<mpsc::Receiver<Outgoing>>,
}

#[cfg_attr(not(feature = "http"), allow(dead_code))]
impl OwnQueue {
    /// Takes the queue from the scope once it is made; while it is not,
    /// leaves `cx`'s waker (when given) to be woken when it is, and says
    /// whether the request is still open.
    fn take_made(&mut self, cx: Option<&Context<'_>>) -> bool {
        if self.rx.is_some() {
            return true;
        }
        let mut state = self.scope.lock();
        let open = state.open;
        let Some(own) = state.own.as_mut() else {
            return false;
        };
        if let Some(rx) = own.rx.take() {
            self.rx = Some(rx);
            return true;
        }
        if let Some(cx) = cx {
            match &own.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => own.waker = Some(cx.waker().clone()),
            }
        }
        open
    }

    /// The next message; `Ready(None)` once the queue is closed and empty.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Outgoing>> {
        let open = self.take_made(Some(cx));
        match self.rx.as_mut() {
            Some(rx) => rx.poll_recv(cx),
            // Not made yet: nothing was sent; nothing will be once the
            // request ended.
            None if open => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    /// A message queued already, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Outgoing> {
        self.take_made(None);
        self.rx.as_mut()?.try_recv().ok()
    }

    /// Closes the queue after the request's end (the scope is closed
    /// first): a sender waiting for space is refused; what is queued stays
    /// to be received.
    pub(crate) fn close(&mut self) {
        self.take_made(None);
        if let Some(rx) = self.rx.as_mut() {
            rx.close();
        }
        if let Some(own) = self.scope.lock().own.as_mut() {
            own.waker = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake_count::WakeCount;
    use crate::CancelReason;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn nothing_is_queued_after_the_end() {
        let (tx, mut rx) = mpsc::channel(8);
        let scope = Scope::new(Cancellation::new());
        assert!(scope.send(tx.reserve().await.unwrap(), b"a".to_vec()));
        // A sender that got its queue slot before the end is refused after it.
        let late = tx.reserve().await.unwrap();
        scope.end_with(Some(tx.reserve().await.unwrap()), Some(b"end".to_vec()));
        assert!(!scope.send(late, b"b".to_vec()));
        assert!(!scope.is_open());
        let got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(Outgoing::into_live_bytes)
            .collect();
        assert_eq!(got, vec![b"a".to_vec(), b"end".to_vec()]);
    }

    #[tokio::test]
    async fn only_increasing_progress_is_queued() {
        let (tx, mut rx) = mpsc::channel(8);
        let scope = Scope::new(Cancellation::new());
        for (p, queued) in [
            (5.0, true),
            (3.0, false),
            (5.0, false),
            (f64::NAN, false),
            (6.0, true),
        ] {
            let permit = tx.reserve().await.unwrap();
            assert_eq!(scope.send_progress(permit, p, vec![]), queued, "{p}");
        }
        // Other messages are not progress: they do not count.
        assert!(scope.send(tx.reserve().await.unwrap(), b"log".to_vec()));
        assert_eq!(std::iter::from_fn(|| rx.try_recv().ok()).count(), 3);
    }

    #[tokio::test]
    async fn queued_messages_of_a_cancelled_request_are_not_live() {
        let (tx, mut rx) = mpsc::channel(8);
        let scope = Scope::new(Cancellation::new());
        assert!(scope.send(tx.reserve().await.unwrap(), b"a".to_vec()));
        scope.cancellation().cancel(CancelReason::peer(None));
        assert!(!scope.send(tx.reserve().await.unwrap(), b"b".to_vec()));
        assert!(rx.try_recv().unwrap().into_live_bytes().is_none());
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn an_own_queue_is_made_by_the_first_message_and_wakes_its_receiver() {
        let (scope, mut queue) = Scope::with_own_queue(Cancellation::new(), 4);
        let (count, waker) = WakeCount::new();
        let mut cx = Context::from_waker(&waker);
        // Nothing sent: no queue, the receiver waits.
        assert!(queue.poll_recv(&mut cx).is_pending());
        assert!(queue.try_recv().is_none());
        assert!(
            scope.lock().own.as_ref().unwrap().tx.is_none(),
            "made before a message"
        );
        let tx = scope.own_sender().expect("an open scope makes its queue");
        assert_eq!(count.get(), 1, "the receiver is woken");
        assert!(scope.send(tx.reserve().await.unwrap(), b"a".to_vec()));
        let Poll::Ready(Some(msg)) = queue.poll_recv(&mut cx) else {
            panic!("the message is received");
        };
        assert_eq!(msg.into_live_bytes().unwrap(), b"a");
        // One queue: a second sender gets the same one.
        assert!(scope.send(
            scope.own_sender().unwrap().reserve().await.unwrap(),
            b"b".to_vec()
        ));
        assert_eq!(queue.try_recv().unwrap().into_live_bytes().unwrap(), b"b");
    }

    #[tokio::test]
    async fn after_the_end_no_queue_is_made_and_a_waiting_sender_is_refused() {
        // Ended before any message: nothing is made, the receiver is done.
        let (scope, mut queue) = Scope::with_own_queue(Cancellation::new(), 1);
        scope.end();
        queue.close();
        assert!(scope.own_sender().is_none());
        let (_, waker) = WakeCount::new();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(queue.poll_recv(&mut cx), Poll::Ready(None)));

        // A sender waiting for space when the request ends is refused.
        let (scope, mut queue) = Scope::with_own_queue(Cancellation::new(), 1);
        let tx = scope.own_sender().unwrap();
        assert!(scope.send(tx.reserve().await.unwrap(), b"a".to_vec()));
        let waiting = tokio::spawn(async move { tx.reserve().await.is_ok() });
        tokio::task::yield_now().await;
        scope.end();
        queue.close();
        assert!(!waiting.await.unwrap(), "no space after the end");
        // What was queued before the end is still received.
        assert_eq!(queue.try_recv().unwrap().into_live_bytes().unwrap(), b"a");
    }
}
