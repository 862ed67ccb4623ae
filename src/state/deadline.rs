//! [`DeadlineHandOff`]: how a `TimeoutLayer` and a `ProgressResetLayer`
//! below it share one timer per request.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The one-timer hand-off: a `TimeoutLayer` offers its deadline here, and a
/// `ProgressResetLayer` below it, which runs a timer anyway, takes it into
/// that timer, so that the request runs one timer rather than two.
///
/// It records *which* deadline, not only that one was taken: each is a
/// limit from the request's start (every layer measures from
/// `RequestView::started_at`), in nanoseconds, `NONE` for none. A
/// `TimeoutLayer` does without its own timer only when the progress layer
/// whose tap lives in this request's state took, within the offering
/// layer's `call`, a deadline no later than its own, and only while that
/// tap is open; then it arms its own (work after the progress layer's
/// answer, a retry). A shorter deadline further down (a `TimeoutLayer`
/// below the progress layer) is therefore still armed, and a tie is still
/// named by the innermost limit, as with nested timers. The deadlines taken
/// are all `Limit::Timeout` ones: a progress layer's own limits never pass
/// through here. A progress layer whose tap lives elsewhere (inside
/// another progress layer, or called again for the same request) neither
/// takes nor enforces an offered deadline: the taker or the offering layer
/// does, and a third timer at that instant would name a tie between the
/// deadline and an outer layer's limit by the deadline.
///
/// Plain atomics, outside the loom model too: the offers and takes of a
/// stack called directly happen on the thread that calls it, before the
/// futures run. Across a `Buffer` a take can happen on its worker while the
/// offering layer settles; either order is sound, because a taker enforces
/// every deadline it took.
pub(crate) struct DeadlineHandOff {
    /// The earliest deadline offered so far (kept, so that a layer that
    /// calls its inner service again for the same request finds it again).
    offered: AtomicU64,
    /// The earliest deadline taken since the innermost offer still
    /// settling began.
    taken: AtomicU64,
}

/// An offer to settle with [`DeadlineHandOff::settle`].
#[must_use]
pub(crate) struct DeadlineOffer {
    limit: u64,
    /// What `taken` held before the offer: restored (merged) on settling,
    /// for the layers above.
    taken_before: u64,
}

impl DeadlineHandOff {
    const NONE: u64 = u64::MAX;

    #[inline]
    /// `limit` in nanoseconds, if it fits a `u64` (computed in `u64`:
    /// `as_nanos` goes through `u128`).
    fn nanos(limit: Duration) -> Option<u64> {
        limit
            .as_secs()
            .checked_mul(1_000_000_000)?
            .checked_add(u64::from(limit.subsec_nanos()))
    }

    pub(super) fn new() -> Self {
        Self {
            offered: AtomicU64::new(Self::NONE),
            taken: AtomicU64::new(Self::NONE),
        }
    }

    /// Offers `limit` (from the request's start) to a timer further down
    /// the stack, which [takes](Self::take) it into its own. Of several
    /// offers the earliest is kept: it fires first, and its error passes
    /// through the layers that offered the others. A limit too long to
    /// count in nanoseconds is not offered (`None`: the offering layer
    /// keeps its own timer).
    ///
    /// Call the inner service, then [settle](Self::settle).
    #[inline]
    pub(crate) fn offer(&self, limit: Duration) -> Option<DeadlineOffer> {
        let limit = Self::nanos(limit).filter(|&n| n != Self::NONE)?;
        if limit < self.offered.load(Relaxed) {
            self.offered.store(limit, Relaxed);
        }
        // Only what is taken from here on counts for this offer (a load and
        // a store rather than a swap: no locked instruction).
        let taken_before = self.taken.load(Relaxed);
        self.taken.store(Self::NONE, Relaxed);
        Some(DeadlineOffer {
            limit,
            taken_before,
        })
    }

    /// The earliest deadline offered (as a limit from the request's
    /// start), for a timer further down to enforce too.
    #[inline]
    pub(crate) fn offered(&self) -> Option<Duration> {
        let offered = self.offered.load(Relaxed);
        (offered != Self::NONE).then(|| Duration::from_nanos(offered))
    }

    /// Records that `limit` ([`offered`](Self::offered)) is enforced by the
    /// timer of the progress layer whose tap lives in this request's state,
    /// for as long as that tap is open.
    #[inline]
    pub(crate) fn take(&self, limit: Duration) {
        let limit = Self::nanos(limit).unwrap_or(Self::NONE);
        if limit < self.taken.load(Relaxed) {
            self.taken.store(limit, Relaxed);
        }
    }

    /// Settles `offer` once the inner service was called: whether a timer
    /// called meanwhile took a deadline no later than the offered one (then
    /// the offering layer needs no timer of its own while that timer's tap,
    /// the one in the same request's state, is open).
    #[inline]
    pub(crate) fn settle(&self, offer: DeadlineOffer) -> bool {
        let taken = self.taken.load(Relaxed);
        // The layers above count what was taken below them, here included.
        self.taken.store(taken.min(offer.taken_before), Relaxed);
        taken <= offer.limit
    }
}
