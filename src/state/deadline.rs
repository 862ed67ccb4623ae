//! [`DeadlineHandOff`]: how a `TimeoutLayer` and a `ProgressResetLayer`
//! below it share one timer per request, and where the request's earliest
//! known deadline (its own or one it inherited) is kept for the handler and
//! for the layers below.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// A deadline as one `u64`: the instant, in nanoseconds from a process-wide
/// anchor (offset so that instants before the anchor, such as a paused test
/// clock's, fit too), shifted left by one, and in the low bit whether it
/// was *inherited* (a [`DeadlineCap`](crate::timeout::DeadlineCap) or a
/// budget from the wire) rather than a local `TimeoutLayer`'s. Ordered by
/// instant first, so the minimum of two stamps is the earlier deadline and,
/// on a tie, the local one: a local limit is named when it binds as much
/// as an inherited one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

impl Stamp {
    const NONE: u64 = u64::MAX;
    /// Instants up to 2^62 ns (146 years) either side of the anchor.
    const BIAS: u64 = 1 << 62;

    fn anchor() -> std::time::Instant {
        static ANCHOR: OnceLock<std::time::Instant> = OnceLock::new();
        *ANCHOR.get_or_init(std::time::Instant::now)
    }

    /// `d` in nanoseconds, saturating (in `u64`: `as_nanos` goes through
    /// `u128`).
    #[inline]
    fn nanos(d: Duration) -> u64 {
        d.as_secs()
            .checked_mul(1_000_000_000)
            .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
            .unwrap_or(u64::MAX)
    }

    #[inline]
    pub(crate) fn new(at: Instant, inherited: bool) -> Self {
        let (at, anchor) = (at.into_std(), Self::anchor());
        // Clamped short of `NONE`; 146 years out is no deadline in practice.
        let biased = match at.checked_duration_since(anchor) {
            Some(after) => Self::BIAS + Self::nanos(after).min(Self::BIAS - 2),
            None => Self::BIAS - Self::nanos(anchor - at).min(Self::BIAS),
        };
        Self(biased << 1 | u64::from(inherited))
    }

    #[inline]
    pub(crate) fn get(raw: u64) -> Option<Self> {
        (raw != Self::NONE).then_some(Self(raw))
    }

    /// The raw value, for a field that keeps "no deadline" as
    /// [`NONE_RAW`](Self::NONE_RAW).
    #[inline]
    pub(crate) fn raw(stamp: Option<Self>) -> u64 {
        stamp.map_or(Self::NONE, |s| s.0)
    }

    /// What [`raw`](Self::raw) keeps for no deadline.
    pub(crate) const NONE_RAW: u64 = Self::NONE;

    /// The instant.
    pub(crate) fn at(self) -> Instant {
        let biased = self.0 >> 1;
        let anchor = Self::anchor();
        let at = if biased >= Self::BIAS {
            anchor.checked_add(Duration::from_nanos(biased - Self::BIAS))
        } else {
            anchor.checked_sub(Duration::from_nanos(Self::BIAS - biased))
        };
        // Out of an `Instant`'s range on this platform: the anchor's side of it.
        Instant::from_std(at.unwrap_or(anchor))
    }

    /// Whether the deadline was inherited rather than set by a local layer.
    pub(crate) fn inherited(self) -> bool {
        self.0 & 1 == 1
    }

    /// Whether `self` comes no later than `other`, whatever their kinds.
    #[inline]
    pub(crate) fn no_later_than(self, other: Self) -> bool {
        self.0 >> 1 <= other.0 >> 1
    }
}

/// The one-timer hand-off: a `TimeoutLayer` offers its deadline here, and a
/// `ProgressResetLayer` below it, which runs a timer anyway, takes it into
/// that timer, so that the request runs one timer rather than two.
///
/// It records *which* deadline, not only that one was taken: each is an
/// instant (a [`Stamp`]), `NONE` for none. A `TimeoutLayer` does without
/// its own timer only when the progress layer whose tap lives in this
/// request's state took, within the offering layer's `call`, a deadline no
/// later than its own, and only while that tap is open; then it arms its
/// own (work after the progress layer's answer, a retry). A shorter
/// deadline further down (a `TimeoutLayer` below the progress layer) is
/// therefore still armed, and a tie is still named by the innermost limit,
/// as with nested timers. The deadlines taken are local `Limit::Timeout`
/// ones or inherited ones (named `Limit::Inherited`): a progress layer's
/// own limits never pass through here. A progress layer whose tap lives
/// elsewhere (inside another progress layer, or called again for the same
/// request) neither takes nor enforces an offered deadline: the taker or
/// the offering layer does, and a third timer at that instant would name a
/// tie between the deadline and an outer layer's limit by the deadline.
///
/// The earliest deadline offered is also the request's earliest known
/// deadline (with the progress layer's hard maximum, which its tap holds):
/// what the handler sees ([`RequestContext::deadline`](crate::RequestContext::deadline)),
/// and, when it was inherited, a cap every timer layer of the request
/// enforces too, in whatever order they are stacked.
///
/// Plain atomics, outside the loom model too: the offers and takes of a
/// stack called directly happen on the thread that calls it, before the
/// futures run. Across a `Buffer` a take can happen on its worker while the
/// offering layer settles; either order is sound, because a taker enforces
/// every deadline it took.
pub(crate) struct DeadlineHandOff {
    /// The earliest deadline offered or inherited so far (kept, so that a
    /// layer that calls its inner service again for the same request finds
    /// it again).
    offered: AtomicU64,
    /// The earliest deadline taken since the innermost offer still
    /// settling began.
    taken: AtomicU64,
}

/// An offer to settle with [`DeadlineHandOff::settle`].
#[must_use]
pub(crate) struct DeadlineOffer {
    stamp: Stamp,
    /// What `taken` held before the offer: restored (merged) on settling,
    /// for the layers above.
    taken_before: u64,
}

impl DeadlineHandOff {
    pub(super) fn new() -> Self {
        Self {
            offered: AtomicU64::new(Stamp::NONE),
            taken: AtomicU64::new(Stamp::NONE),
        }
    }

    /// Keeps `stamp` if it is earlier than what is kept (a load and a
    /// store rather than a `fetch_min`: no locked instruction, see above).
    #[inline]
    fn narrow(&self, stamp: Stamp) {
        if stamp.0 < self.offered.load(Relaxed) {
            self.offered.store(stamp.0, Relaxed);
        }
    }

    /// Offers `stamp` to a timer further down the stack, which
    /// [takes](Self::take) it into its own. Of several offers the earliest
    /// is kept: it fires first, and its error passes through the layers
    /// that offered the others.
    ///
    /// Call the inner service, then [settle](Self::settle).
    #[inline]
    pub(crate) fn offer(&self, stamp: Stamp) -> DeadlineOffer {
        self.narrow(stamp);
        // Only what is taken from here on counts for this offer.
        let taken_before = self.taken.load(Relaxed);
        self.taken.store(Stamp::NONE, Relaxed);
        DeadlineOffer {
            stamp,
            taken_before,
        }
    }

    /// Records a deadline the request inherited (a cap from its caller, a
    /// budget from the wire): from here on every timer layer of the request
    /// enforces it, and the handler sees it.
    #[inline]
    pub(crate) fn inherit(&self, deadline: Instant) {
        self.narrow(Stamp::new(deadline, true));
    }

    /// The earliest deadline offered or inherited, for a timer further
    /// down to enforce too, and for the handler to see.
    #[inline]
    pub(crate) fn offered(&self) -> Option<Stamp> {
        Stamp::get(self.offered.load(Relaxed))
    }

    /// The earliest deadline kept, when it is an inherited one (a local
    /// layer's deadline is that layer's to enforce).
    #[inline]
    pub(crate) fn inherited(&self) -> Option<Stamp> {
        self.offered().filter(|s| s.inherited())
    }

    /// Records that `stamp` ([`offered`](Self::offered)) is enforced by the
    /// timer of the progress layer whose tap lives in this request's state,
    /// for as long as that tap is open.
    #[inline]
    pub(crate) fn take(&self, stamp: Stamp) {
        if stamp.0 < self.taken.load(Relaxed) {
            self.taken.store(stamp.0, Relaxed);
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
        Stamp::get(taken).is_some_and(|t| t.no_later_than(offer.stamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_order_by_instant_then_kind() {
        let now = Instant::now();
        for at in [
            now,
            now + Duration::from_nanos(1),
            now + Duration::from_secs(86_400 * 365),
            now.checked_sub(Duration::from_secs(3600)).unwrap_or(now),
        ] {
            for inherited in [false, true] {
                let s = Stamp::new(at, inherited);
                assert_eq!(s.at(), at);
                assert_eq!(s.inherited(), inherited);
            }
        }
        let (local, inherited) = (Stamp::new(now, false), Stamp::new(now, true));
        assert!(local < inherited, "a tie is named by the local limit");
        assert!(inherited < Stamp::new(now + Duration::from_nanos(1), false));
    }

    #[test]
    fn the_earliest_is_kept_and_only_an_inherited_one_is_a_cap() {
        let h = DeadlineHandOff::new();
        let now = Instant::now();
        assert_eq!(h.inherited(), None);
        h.inherit(now + Duration::from_secs(5));
        assert_eq!(
            h.inherited().map(Stamp::at),
            Some(now + Duration::from_secs(5))
        );
        let offer = h.offer(Stamp::new(now + Duration::from_secs(1), false));
        assert!(!h.settle(offer), "nothing took it");
        assert_eq!(h.inherited(), None, "a local deadline is earlier");
        assert_eq!(
            h.offered().map(Stamp::at),
            Some(now + Duration::from_secs(1))
        );
    }
}
