//! [`Cancellation`]: one request's cancellation state, reason and token.

use std::fmt;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use self::sync::{Arc, AtomicU8, AtomicWaker, OnceLock, Ordering};
use crate::error::CancelReason;
use crate::jsonrpc::{Method, RequestId};
use crate::progress::tap::ProgressState;

/// One request's cancellation: a one-shot state (active → cancelled with a
/// reason, or active → completed), and a [`CancellationToken`] that fires on
/// cancel, for the handler and for work it spawned.
///
/// Clones share the state.
///
/// * The first of [`cancel`](Self::cancel) and [`complete`](Self::complete)
///   wins; the other is a no-op that returns `false`. A cancel after
///   completion therefore changes nothing, and of two racing cancels the first
///   reason is the one kept. The reason is set in the same step as the state:
///   when `complete` returns `false` because of a cancel, [`reason`](Self::reason)
///   already returns it, on every thread.
/// * The token is created on first use of [`token`](Self::token), so a
///   request whose handler never asks for it pays nothing for it; a token
///   asked for once the cancel is visible is already cancelled.
/// * Dropping a `Cancellation` does nothing: it neither cancels nor completes.
/// * Its allocation also holds the request's progress state: the
///   [`ProgressTap`](crate::ProgressTap) that `ProgressResetLayer` makes
///   lives there, so a request pays one allocation for both.
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
    /// Who won: `ACTIVE` until the first of cancel / complete claims it.
    state: AtomicU8,
    /// Set by the cancel that claimed the state, right after the claim. A
    /// `complete` that lost to that cancel waits for it, so no caller ever
    /// sees a refused completion without the reason.
    reason: OnceLock<CancelReason>,
    token: OnceLock<CancellationToken>,
    waker: AtomicWaker,
    /// The request's id and method, for the layers' log events (read only
    /// when one is written, so the futures need not carry copies).
    id: Option<RequestId>,
    method: Option<Method>,
    /// The request's progress tap, once one is made here.
    progress: ProgressState,
    /// The one-timer hand-off between the request's timer layers.
    deadlines: DeadlineHandOff,
}

/// The one-timer hand-off: a `TimeoutLayer` offers its deadline here, and a
/// `ProgressResetLayer` below it, which runs a timer anyway, takes it into
/// that timer, so that the request runs one timer rather than two.
///
/// It records *which* deadline, not only that one was taken: each is a
/// limit from the request's start (every layer measures from
/// `RequestView::started_at`), in nanoseconds, `NONE` for none. A
/// `TimeoutLayer` does without its own timer only when the progress layer
/// whose tap lives in this `Cancellation` took, within the offering layer's
/// `call`, a deadline no later than its own, and only while that tap is
/// open; then it arms its own (work after the progress layer's answer, a
/// retry). A shorter deadline further down (a `TimeoutLayer` below the
/// progress layer) is therefore still armed, and a tie is still named by
/// the innermost limit, as with nested timers. The deadlines taken are all
/// `Limit::Timeout` ones: a progress layer's own limits never pass through
/// here. A progress layer inside another enforces the offered deadline too
/// but records nothing (its tap lives elsewhere).
///
/// Plain atomics outside the loom model: the offers and takes of a stack
/// called directly happen on the thread that calls it, before the futures
/// run. Across a `Buffer` a take can happen on its worker while the offering
/// layer settles; either order is sound, because a taker enforces every
/// deadline it took.
struct DeadlineHandOff {
    /// The earliest deadline offered so far (kept, so that a layer that
    /// calls its inner service again for the same request finds it again).
    offered: StdAtomicU64,
    /// The earliest deadline taken since the innermost offer still
    /// settling began.
    taken: StdAtomicU64,
}

/// An offer to settle with [`Cancellation::settle_deadline`].
#[must_use]
pub(crate) struct DeadlineOffer {
    limit: u64,
    /// What `taken` held before the offer: restored (merged) on settling,
    /// for the layers above.
    taken_before: u64,
}

impl DeadlineHandOff {
    const NONE: u64 = u64::MAX;

    fn new() -> Self {
        Self {
            offered: StdAtomicU64::new(Self::NONE),
            taken: StdAtomicU64::new(Self::NONE),
        }
    }
}

const ACTIVE: u8 = 0;
/// Claimed by a cancel; its reason is set, or being set.
const CANCELLED: u8 = 1;
const COMPLETED: u8 = 2;

impl Default for Cancellation {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancellation {
    /// A new, active cancellation.
    pub fn new() -> Self {
        Self::for_request(None, None)
    }

    /// A new, active cancellation of the request `id` / `method` (which the
    /// layers' log events then name).
    pub(crate) fn for_request(id: Option<RequestId>, method: Option<Method>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: AtomicU8::new(ACTIVE),
                reason: OnceLock::new(),
                token: OnceLock::new(),
                waker: AtomicWaker::new(),
                id,
                method,
                progress: ProgressState::new(),
                deadlines: DeadlineHandOff::new(),
            }),
        }
    }

    /// The id of the request, when it was made for one.
    pub(crate) fn request_id(&self) -> Option<&RequestId> {
        self.inner.id.as_ref()
    }

    /// The method of the request, when it was made for one.
    pub(crate) fn method(&self) -> Option<&Method> {
        self.inner.method.as_ref()
    }

    /// The request's progress state (see the type's docs).
    pub(crate) fn progress(&self) -> &ProgressState {
        &self.inner.progress
    }

    /// Offers `limit` (from the request's start) to a timer further down
    /// the stack, which [takes](Self::deadline_taken) it into its own. Of
    /// several offers the earliest is kept: it fires first, and its error
    /// passes through the layers that offered the others. A limit too long
    /// to count in nanoseconds is not offered (`None`: the offering layer
    /// keeps its own timer).
    ///
    /// Call the inner service, then [settle](Self::settle_deadline).
    pub(crate) fn offer_deadline(&self, limit: Duration) -> Option<DeadlineOffer> {
        let h = &self.inner.deadlines;
        let limit = u64::try_from(limit.as_nanos())
            .ok()
            .filter(|&n| n != DeadlineHandOff::NONE)?;
        if limit < h.offered.load(Relaxed) {
            h.offered.store(limit, Relaxed);
        }
        // Only what is taken from here on counts for this offer (a load and
        // a store rather than a swap: no locked instruction).
        let taken_before = h.taken.load(Relaxed);
        h.taken.store(DeadlineHandOff::NONE, Relaxed);
        Some(DeadlineOffer {
            limit,
            taken_before,
        })
    }

    /// The earliest deadline offered (as a limit from the request's
    /// start), for a timer further down to enforce too.
    pub(crate) fn offered_deadline(&self) -> Option<Duration> {
        let offered = self.inner.deadlines.offered.load(Relaxed);
        (offered != DeadlineHandOff::NONE).then(|| Duration::from_nanos(offered))
    }

    /// Records that `limit` ([`offered_deadline`](Self::offered_deadline))
    /// is enforced by the timer of the progress layer whose tap lives here,
    /// for as long as that tap is open.
    pub(crate) fn deadline_taken(&self, limit: Duration) {
        let h = &self.inner.deadlines;
        let limit = u64::try_from(limit.as_nanos()).unwrap_or(DeadlineHandOff::NONE);
        if limit < h.taken.load(Relaxed) {
            h.taken.store(limit, Relaxed);
        }
    }

    /// Settles `offer` once the inner service was called: whether a timer
    /// called meanwhile took a deadline no later than the offered one (then
    /// the offering layer needs no timer of its own while that timer's tap,
    /// the one in [`progress`](Self::progress), is open).
    pub(crate) fn settle_deadline(&self, offer: DeadlineOffer) -> bool {
        let h = &self.inner.deadlines;
        let taken = h.taken.load(Relaxed);
        // The layers above count what was taken below them, here included.
        h.taken.store(taken.min(offer.taken_before), Relaxed);
        taken <= offer.limit
    }

    /// Cancels with `reason`: fires the token and wakes the layer racing this
    /// request. Returns `false` (and does nothing) if the request already
    /// completed or was already cancelled.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        if self
            .inner
            .state
            .compare_exchange(ACTIVE, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // Only the claimer sets it: this cannot fail.
        let _ = self.inner.reason.set(reason);
        // Always through `token_ref()`: a token created concurrently is then
        // either this one or cancelled by this call.
        self.token_ref().cancel();
        // After the reason is set: `poll_cancelled` registers, then reads it.
        self.inner.waker.wake();
        true
    }

    /// Marks the request completed: later cancels are no-ops. Returns `false`
    /// if it was already cancelled or completed; when it returns `false`
    /// because of a cancel, [`reason`](Self::reason) already returns it.
    pub fn complete(&self) -> bool {
        // The common path is one compare-and-swap; the reason's cell is only
        // touched by a cancel.
        match self.inner.state.compare_exchange(
            ACTIVE,
            COMPLETED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(CANCELLED) => {
                // Lost to a cancel that may still be storing its reason: wait
                // for it, so that whoever sees this `false` also sees the
                // reason (no window in which the request is neither).
                self.inner.reason.wait();
                false
            }
            Err(_) => false,
        }
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// Whether the request was cancelled or completed.
    pub fn is_finished(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) != ACTIVE
    }

    /// The reason, once cancelled.
    pub fn reason(&self) -> Option<&CancelReason> {
        self.inner.reason.get()
    }

    /// The token that fires on cancel. Hand clones (or child tokens) to work
    /// you spawn.
    pub fn token(&self) -> CancellationToken {
        let token = self.token_ref();
        // A cancel that is visible but has not reached the token yet: fire it
        // here rather than hand out a live token for a cancelled request.
        if self.is_cancelled() && !token.is_cancelled() {
            token.cancel();
        }
        token.clone()
    }

    fn token_ref(&self) -> &CancellationToken {
        self.inner.token.get_or_init(CancellationToken::new)
    }

    /// Waits until cancelled and returns the reason. Never resolves for a
    /// request that completes.
    pub async fn cancelled(&self) -> CancelReason {
        self.token_ref().cancelled().await;
        // A holder of the token may have cancelled it directly, without a reason.
        self.reason()
            .cloned()
            .unwrap_or(CancelReason::Other("cancelled".into()))
    }

    /// Polls for cancellation, for the one future racing this request (a
    /// layer); it is woken on cancel. Other waiters use [`token`](Self::token).
    pub(crate) fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<CancelReason> {
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
    pub(crate) fn same_as(&self, other: &Cancellation) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.inner.state.load(Ordering::Acquire) {
            ACTIVE => "active",
            CANCELLED => "cancelled",
            _ => "completed",
        };
        f.debug_struct("Cancellation")
            .field("state", &state)
            .field("reason", &self.reason())
            .finish()
    }
}

/// The primitives the state is built from: std's (and futures') normally,
/// loom's under `--cfg tower_mcp_cancel_loom`, so the loom model below checks this file's
/// orderings and not copies of them.
mod sync {
    #[cfg(not(all(test, tower_mcp_cancel_loom)))]
    pub(super) use futures_util::task::AtomicWaker;
    #[cfg(not(all(test, tower_mcp_cancel_loom)))]
    pub(super) use std::sync::atomic::{AtomicU8, Ordering};
    #[cfg(not(all(test, tower_mcp_cancel_loom)))]
    pub(super) use std::sync::{Arc, OnceLock};

    #[cfg(all(test, tower_mcp_cancel_loom))]
    pub(super) use self::model::{AtomicWaker, OnceLock};
    #[cfg(all(test, tower_mcp_cancel_loom))]
    pub(super) use loom::sync::atomic::{AtomicU8, Ordering};
    #[cfg(all(test, tower_mcp_cancel_loom))]
    pub(super) use loom::sync::Arc;

    #[cfg(all(test, tower_mcp_cancel_loom))]
    mod model {
        use std::task::Waker;

        /// `std::sync::OnceLock` as loom sees it: a cell behind a loom mutex.
        /// It models what std documents and this file relies on: `set` and
        /// `get_or_init` are linearizable, and when `set` returns (won or
        /// lost) the cell holds a value. Values are leaked (`&'static`), which
        /// gives `get` a plain reference without `unsafe`; tests only.
        pub(in super::super) struct OnceLock<T: 'static> {
            slot: loom::sync::Mutex<Option<&'static T>>,
        }

        impl<T> OnceLock<T> {
            pub(in super::super) fn new() -> Self {
                Self {
                    slot: loom::sync::Mutex::new(None),
                }
            }

            pub(in super::super) fn get(&self) -> Option<&T> {
                *self.slot.lock().unwrap()
            }

            pub(in super::super) fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
                let mut slot = self.slot.lock().unwrap();
                slot.get_or_insert_with(|| Box::leak(Box::new(f())))
            }

            /// Blocks until the cell holds a value (loom: yields until then).
            pub(in super::super) fn wait(&self) -> &T {
                loop {
                    if let Some(v) = *self.slot.lock().unwrap() {
                        return v;
                    }
                    loom::thread::yield_now();
                }
            }

            pub(in super::super) fn set(&self, value: T) -> Result<(), T> {
                let mut slot = self.slot.lock().unwrap();
                match *slot {
                    Some(_) => Err(value),
                    None => {
                        *slot = Some(Box::leak(Box::new(value)));
                        Ok(())
                    }
                }
            }
        }

        /// `futures`' `AtomicWaker` with its signature, on loom's mock.
        pub(in super::super) struct AtomicWaker(loom::future::AtomicWaker);

        impl AtomicWaker {
            pub(in super::super) fn new() -> Self {
                Self(loom::future::AtomicWaker::new())
            }

            pub(in super::super) fn register(&self, waker: &Waker) {
                self.0.register_by_ref(waker)
            }

            pub(in super::super) fn wake(&self) {
                self.0.wake()
            }
        }
    }
}

#[cfg(all(test, tower_mcp_cancel_loom))]
mod loom_model {
    //! Exhaustive interleavings of the cancel state machine (run with
    //! `RUSTFLAGS="--cfg tower_mcp_cancel_loom" cargo test --lib loom_model`, see `.ci/run`).
    //!
    //! Covered: the one-shot outcome (who wins between cancel, cancel and
    //! complete), the publication of the reason with it, the token's
    //! creation racing a cancel, and the registration of the layer's waker
    //! against the wake on cancel (a lost wake-up is a loom deadlock).
    //! Not covered: the insides of `std`'s `OnceLock` and of `futures`'
    //! `AtomicWaker` (modelled by their documented contracts, see `sync`) nor
    //! of tokio's `CancellationToken` (a real one, whose calls loom sees as
    //! atomic steps; only the order in which this file calls it is checked).

    use std::future::poll_fn;

    use loom::thread;

    use super::*;

    /// A driver that gets `complete() == false` must already see the reason:
    /// otherwise it would write a response for a request it counts cancelled.
    #[test]
    fn complete_refused_by_cancel_sees_reason() {
        loom::model(|| {
            let c = Cancellation::new();
            let c2 = c.clone();
            let canceller = thread::spawn(move || c2.cancel(CancelReason::Shutdown));
            let completed = c.complete();
            if !completed {
                assert!(c.is_cancelled(), "complete() refused, not cancelled");
                assert_eq!(c.reason(), Some(&CancelReason::Shutdown));
            }
            let cancelled = canceller.join().unwrap();
            assert_ne!(completed, cancelled, "exactly one of them wins");
            assert_eq!(c.reason().is_some(), cancelled);
        });
    }

    /// Of two cancels and a complete, one wins, and a loser sees the
    /// winner's outcome as soon as it lost.
    #[test]
    fn first_of_cancel_cancel_complete_wins() {
        loom::model(|| {
            let c = Cancellation::new();
            let (c1, c2) = (c.clone(), c.clone());
            let a = thread::spawn(move || {
                let won = c1.cancel(CancelReason::Shutdown);
                assert!(c1.is_finished());
                won
            });
            let b = thread::spawn(move || {
                let won = c2.cancel(CancelReason::TransportClosed);
                assert!(c2.is_finished());
                won
            });
            let completed = c.complete();
            if !completed {
                assert!(c.reason().is_some(), "complete() refused, no reason");
            }
            let (a, b) = (a.join().unwrap(), b.join().unwrap());
            assert_eq!(u8::from(a) + u8::from(b) + u8::from(completed), 1);
            let expected = match (a, b) {
                (true, _) => Some(&CancelReason::Shutdown),
                (_, true) => Some(&CancelReason::TransportClosed),
                _ => None,
            };
            assert_eq!(c.reason(), expected);
        });
    }

    /// A token asked for while (or after) a cancel is seen is cancelled at
    /// once; one asked for before it is cancelled by the time `cancel()`
    /// returns.
    #[test]
    fn token_fires_on_cancel_whenever_created() {
        loom::model(|| {
            let c = Cancellation::new();
            let c2 = c.clone();
            let asker = thread::spawn(move || {
                let seen = c2.is_cancelled();
                let token = c2.token();
                if seen {
                    assert!(token.is_cancelled(), "token of a cancelled request");
                }
                token
            });
            assert!(c.cancel(CancelReason::Shutdown));
            assert!(c.token().is_cancelled());
            assert!(asker.join().unwrap().is_cancelled());
        });
    }

    /// The layer's waker, registered by `poll_cancelled`, is woken by a
    /// concurrent cancel (if the wake-up were lost, `block_on` would never
    /// return and loom reports a deadlock).
    #[test]
    fn cancel_wakes_registered_poller() {
        loom::model(|| {
            let c = Cancellation::new();
            let c2 = c.clone();
            let poller =
                thread::spawn(move || loom::future::block_on(poll_fn(|cx| c2.poll_cancelled(cx))));
            assert!(c.cancel(CancelReason::ClientDisconnected));
            assert_eq!(poller.join().unwrap(), CancelReason::ClientDisconnected);
        });
    }
}

#[cfg(all(test, not(tower_mcp_cancel_loom)))]
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

    /// The same rule as `loom_model::complete_refused_by_cancel_sees_reason`,
    /// on real threads: the driver waits until the request is finished, then
    /// a refused `complete()` must come with the reason.
    #[test]
    fn complete_refused_by_cancel_sees_reason_across_threads() {
        for _ in 0..20_000 {
            let c = Cancellation::new();
            let c2 = c.clone();
            let h = std::thread::spawn(move || c2.cancel(CancelReason::Shutdown));
            while !c.is_finished() {
                std::thread::yield_now();
            }
            if !c.complete() {
                assert!(c.reason().is_some(), "complete() refused, reason() None");
            }
            assert!(h.join().unwrap());
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
