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

use tokio::sync::mpsc::Permit;

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

/// What the lock guards: whether the request is still open, and the last
/// progress value queued for it (progress MUST increase, whoever sends it).
struct State {
    open: bool,
    last_progress: Option<f64>,
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
                }),
                cancellation,
            }),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
