//! [`Cancellation`]: one request's cancellation state, reason and token.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio_util::sync::CancellationToken;

use super::CancelReason;

const ACTIVE: u8 = 0;
const CANCELLING: u8 = 1;
const CANCELLED: u8 = 2;
const COMPLETED: u8 = 3;

/// One request's cancellation: a one-shot state (active → cancelled with a
/// reason, or active → completed), and a [`CancellationToken`] that fires on
/// cancel, for the handler and for work it spawned.
///
/// Clones share the state.
///
/// * The first of [`cancel`](Self::cancel) and [`complete`](Self::complete)
///   wins; the other is a no-op that returns `false`. A cancel after
///   completion therefore changes nothing, and of two racing cancels the first
///   reason is the one kept.
/// * The token is created on first use of [`token`](Self::token), so a
///   request whose handler never asks for it pays nothing for it; a token
///   asked for after the cancel is already cancelled.
/// * Dropping a `Cancellation` does nothing: it neither cancels nor completes.
///
/// ```
/// use tower_mcp_cancel::{Cancellation, CancelReason};
///
/// let c = Cancellation::new();
/// let token = c.token();
/// assert!(c.cancel(CancelReason::ClientDisconnected));
/// assert!(token.is_cancelled());
/// assert!(!c.cancel(CancelReason::Shutdown)); // first reason wins
/// assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
/// assert!(!c.complete());
/// ```
#[derive(Clone)]
pub struct Cancellation {
    inner: Arc<Inner>,
}

struct Inner {
    state: AtomicU8,
    reason: OnceLock<CancelReason>,
    token: OnceLock<CancellationToken>,
    waker: AtomicWaker,
}

impl Default for Cancellation {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancellation {
    /// A new, active cancellation.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: AtomicU8::new(ACTIVE),
                reason: OnceLock::new(),
                token: OnceLock::new(),
                waker: AtomicWaker::new(),
            }),
        }
    }

    /// Cancels with `reason`: fires the token and wakes the layer racing this
    /// request. Returns `false` (and does nothing) if the request already
    /// completed or was already cancelled.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        if self
            .inner
            .state
            .compare_exchange(ACTIVE, CANCELLING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let _ = self.inner.reason.set(reason);
        self.inner.state.store(CANCELLED, Ordering::Release);
        // Always through `token()`: a token created concurrently is then
        // either this one or cancelled by this call.
        self.token_ref().cancel();
        self.inner.waker.wake();
        true
    }

    /// Marks the request completed: later cancels are no-ops. Returns `false`
    /// if it was already cancelled or completed.
    pub fn complete(&self) -> bool {
        self.inner
            .state
            .compare_exchange(ACTIVE, COMPLETED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) == CANCELLED
    }

    /// Whether the request was cancelled or completed.
    pub fn is_finished(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) >= CANCELLING
    }

    /// The reason, once cancelled.
    pub fn reason(&self) -> Option<&CancelReason> {
        if self.is_cancelled() {
            self.inner.reason.get()
        } else {
            None
        }
    }

    /// The token that fires on cancel. Hand clones (or child tokens) to work
    /// you spawn.
    pub fn token(&self) -> CancellationToken {
        self.token_ref().clone()
    }

    fn token_ref(&self) -> &CancellationToken {
        self.inner.token.get_or_init(CancellationToken::new)
    }

    /// Waits until cancelled and returns the reason. Never resolves for a
    /// request that completes.
    pub async fn cancelled(&self) -> CancelReason {
        self.token_ref().cancelled().await;
        self.inner
            .reason
            .get()
            .cloned()
            .unwrap_or(CancelReason::Other("cancelled".into()))
    }

    /// Polls for cancellation, for the one future racing this request (a
    /// layer); it is woken on cancel. Other waiters use [`token`](Self::token).
    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<CancelReason> {
        if let Some(r) = self.reason() {
            return Poll::Ready(r.clone());
        }
        self.inner.waker.register(cx.waker());
        match self.reason() {
            Some(r) => Poll::Ready(r.clone()),
            None => Poll::Pending,
        }
    }

    /// Whether two handles share one state.
    pub fn same_as(&self, other: &Cancellation) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.inner.state.load(Ordering::Acquire) {
            ACTIVE => "active",
            CANCELLING | CANCELLED => "cancelled",
            _ => "completed",
        };
        f.debug_struct("Cancellation")
            .field("state", &state)
            .field("reason", &self.reason())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_created_after_cancel_is_cancelled() {
        let c = Cancellation::new();
        assert!(c.cancel(CancelReason::TransportClosed));
        assert!(c.token().is_cancelled());
    }

    #[test]
    fn complete_then_cancel_is_noop() {
        let c = Cancellation::new();
        let t = c.token();
        assert!(c.complete());
        assert!(!c.cancel(CancelReason::Shutdown));
        assert!(!t.is_cancelled());
        assert!(c.reason().is_none());
        assert!(c.is_finished());
    }

    #[test]
    fn concurrent_cancel_and_token_always_fire() {
        for _ in 0..2000 {
            let c = Cancellation::new();
            let c2 = c.clone();
            let h = std::thread::spawn(move || c2.token());
            c.cancel(CancelReason::Shutdown);
            assert!(h.join().unwrap().is_cancelled());
        }
    }

    #[tokio::test]
    async fn cancelled_future_yields_reason() {
        let c = Cancellation::new();
        let c2 = c.clone();
        let w = tokio::spawn(async move { c2.cancelled().await });
        tokio::task::yield_now().await;
        c.cancel(CancelReason::ClientDisconnected);
        assert_eq!(w.await.unwrap(), CancelReason::ClientDisconnected);
    }
}
