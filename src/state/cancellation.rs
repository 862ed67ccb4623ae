//! [`Cancellation`]: one request's cancellation state, reason and token.

use std::fmt;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;

use std::time::Duration;

use super::sync::{Arc, AtomicU32, AtomicU8, AtomicWaker, OnceLock, Ordering};
use super::RequestState;
use crate::error::CancelReason;

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
    // The state lives in the request's shared state (one allocation with
    // what the layers keep per request); this handle reaches only its
    // cancel part, `CancelState`.
    request: Arc<RequestState>,
}

/// The cancel state machine behind a [`Cancellation`] (see its docs for
/// the rules).
pub(super) struct CancelState {
    /// Who won: `ACTIVE` until the first of cancel / complete claims it.
    state: AtomicU8,
    /// The request's cooperative grace (see [`GraceSlot`]); in what was
    /// padding beside `state`, so the state does not grow.
    grace: GraceSlot,
    /// Set by the cancel that claimed the state, right after the claim. A
    /// `complete` that lost to that cancel waits for it, so no caller ever
    /// sees a refused completion without the reason.
    reason: OnceLock<CancelReason>,
    token: OnceLock<CancellationToken>,
    /// The one future racing the request (a layer), woken on cancel.
    waker: AtomicWaker,
}

const ACTIVE: u8 = 0;
/// Claimed by a cancel; its reason is set, or being set.
const CANCELLED: u8 = 1;
const COMPLETED: u8 = 2;

impl CancelState {
    #[inline]
    pub(super) fn new() -> Self {
        Self {
            state: AtomicU8::new(ACTIVE),
            grace: GraceSlot::new(),
            reason: OnceLock::new(),
            token: OnceLock::new(),
            waker: AtomicWaker::new(),
        }
    }

    pub(super) fn cancel(&self, reason: CancelReason) -> bool {
        if self
            .state
            .compare_exchange(ACTIVE, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // Only the claimer sets it: this cannot fail.
        let _ = self.reason.set(reason);
        // Always through `token_ref()`: a token created concurrently is then
        // either this one or cancelled by this call.
        self.token_ref().cancel();
        // After the reason is set: `poll_cancelled` registers, then reads it.
        self.waker.wake();
        true
    }

    #[inline]
    fn complete(&self) -> bool {
        // The common path is one compare-and-swap; the reason's cell is only
        // touched by a cancel.
        match self
            .state
            .compare_exchange(ACTIVE, COMPLETED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(CANCELLED) => {
                // Lost to a cancel that may still be storing its reason: wait
                // for it, so that whoever sees this `false` also sees the
                // reason (no window in which the request is neither).
                self.reason.wait();
                false
            }
            Err(_) => false,
        }
    }

    #[inline]
    fn reason(&self) -> Option<&CancelReason> {
        self.reason.get()
    }

    /// Whether a lifecycle owns the drop and the grace is not zero.
    #[inline]
    pub(super) fn grace_handed(&self) -> bool {
        self.grace.handed()
    }

    /// Whether the request was cancelled under a transport's lifecycle:
    /// whatever its handler does from then on reaches nobody.
    #[inline]
    pub(super) fn cancelled_owned(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED && self.grace.owned()
    }

    fn token_ref(&self) -> &CancellationToken {
        self.token.get_or_init(CancellationToken::new)
    }
}

/// One request's cooperative grace, in 4 bytes: the low 31 bits are the
/// grace in milliseconds ([`GraceSlot::UNSET`] when none was set), the top
/// bit says that a transport's lifecycle owns the drop of the request's
/// handler future (it set the bit when it started the request), so that
/// the layers inside hand a cancelled future to it instead of dropping it.
pub(super) struct GraceSlot(AtomicU32);

impl GraceSlot {
    const OWNED: u32 = 1 << 31;
    const UNSET: u32 = Self::OWNED - 1;
    /// The longest grace kept (about 24.8 days); a longer one is clamped.
    const MAX_MS: u32 = Self::UNSET - 1;

    fn new() -> Self {
        Self(AtomicU32::new(Self::UNSET))
    }

    /// `grace` in whole milliseconds, a fraction rounded up (a grace that
    /// was asked for is never lost to rounding), clamped to `MAX_MS`.
    fn millis(grace: Duration) -> u32 {
        let ms = grace.as_millis() + u128::from(grace.subsec_nanos() % 1_000_000 != 0);
        u32::try_from(ms).unwrap_or(u32::MAX).min(Self::MAX_MS)
    }

    /// Sets the grace, keeping the owner bit.
    fn set(&self, grace: Duration) {
        let ms = Self::millis(grace);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v & Self::OWNED) | ms)
            });
    }

    /// Marks the drop owned by a transport's lifecycle, with the grace of
    /// its policy unless one was set already.
    #[cfg(any(feature = "stdio", feature = "http", feature = "tasks"))]
    fn own(&self, policy: Duration) {
        let ms = Self::millis(policy);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let set = v & !Self::OWNED;
                Some(Self::OWNED | if set == Self::UNSET { ms } else { set })
            });
    }

    fn get(&self) -> Option<Duration> {
        let ms = self.0.load(Ordering::Acquire) & !Self::OWNED;
        (ms != Self::UNSET).then(|| Duration::from_millis(u64::from(ms)))
    }

    /// Whether a lifecycle owns the drop.
    fn owned(&self) -> bool {
        self.0.load(Ordering::Acquire) & Self::OWNED != 0
    }

    /// Whether a lifecycle owns the drop and the grace is not zero.
    fn handed(&self) -> bool {
        let v = self.0.load(Ordering::Acquire);
        v & Self::OWNED != 0 && !matches!(v & !Self::OWNED, 0 | Self::UNSET)
    }
}

impl Default for Cancellation {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancellation {
    /// A new, active cancellation.
    pub fn new() -> Self {
        Self::from_state(RequestState::new(Default::default()))
    }

    /// The handle to `request`'s cancel state.
    #[inline]
    pub(super) fn from_state(request: Arc<RequestState>) -> Self {
        Self { request }
    }

    /// The request's shared state, for the layers' per-request needs (log
    /// labels, the one-timer hand-off, the progress tap); none of it is
    /// part of the cancellation.
    #[inline]
    pub(crate) fn request_state(&self) -> &Arc<RequestState> {
        &self.request
    }

    #[inline]
    fn state(&self) -> &CancelState {
        &self.request.cancel
    }

    /// Cancels with `reason`: fires the token and wakes the layer racing this
    /// request. Returns `false` (and does nothing) if the request already
    /// completed or was already cancelled.
    pub fn cancel(&self, reason: CancelReason) -> bool {
        self.state().cancel(reason)
    }

    /// Marks the request completed: later cancels are no-ops. Returns `false`
    /// if it was already cancelled or completed; when it returns `false`
    /// because of a cancel, [`reason`](Self::reason) already returns it.
    #[inline]
    pub fn complete(&self) -> bool {
        self.state().complete()
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// Whether the request was cancelled or completed.
    pub fn is_finished(&self) -> bool {
        self.state().state.load(Ordering::Acquire) != ACTIVE
    }

    /// The reason, once cancelled.
    #[inline]
    pub fn reason(&self) -> Option<&CancelReason> {
        self.state().reason()
    }

    /// The token that fires on cancel. Hand clones (or child tokens) to work
    /// you spawn.
    pub fn token(&self) -> CancellationToken {
        let token = self.state().token_ref();
        // A cancel that is visible but has not reached the token yet: fire it
        // here rather than hand out a live token for a cancelled request.
        if self.is_cancelled() && !token.is_cancelled() {
            token.cancel();
        }
        token.clone()
    }

    /// Waits until cancelled and returns the reason. Never resolves for a
    /// request that completes.
    pub async fn cancelled(&self) -> CancelReason {
        self.state().token_ref().cancelled().await;
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
        self.state().waker.register(cx.waker());
        match self.reason() {
            Some(r) => Poll::Ready(r.clone()),
            None => Poll::Pending,
        }
    }

    /// Sets the request's cooperative grace: how long its handler future
    /// is still polled once the request is cancelled (its token fired), so
    /// that it can finish its cleanup, before it is dropped. It overrides
    /// the transport's policy ([`StdioServer::grace`],
    /// [`StreamableHttpService::grace`]) for this request; kept in whole
    /// milliseconds (a fraction rounded up), at most about 24 days.
    ///
    /// Only a server transport acts on it (see the
    /// [transport docs](crate::transport#cooperative-grace-then-drop)); a
    /// `subscriptions/listen` gets none. Returns `false`, and changes
    /// nothing, once the request was cancelled or completed: the grace is
    /// read at the cancel.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_mcp_cancel::{Cancellation, CancelReason};
    ///
    /// let c = Cancellation::new();
    /// assert_eq!(c.grace(), None);
    /// assert!(c.set_grace(Duration::from_millis(250)));
    /// assert_eq!(c.grace(), Some(Duration::from_millis(250)));
    /// c.cancel(CancelReason::Shutdown);
    /// assert!(!c.set_grace(Duration::from_secs(1)));
    /// ```
    ///
    #[cfg_attr(
        feature = "stdio",
        doc = "[`StdioServer::grace`]: crate::transport::stdio::StdioServer::grace"
    )]
    #[cfg_attr(
        not(feature = "stdio"),
        doc = "[`StdioServer::grace`]: crate::transport"
    )]
    #[cfg_attr(
        feature = "http",
        doc = "[`StreamableHttpService::grace`]: crate::transport::http::StreamableHttpService::grace"
    )]
    #[cfg_attr(
        not(feature = "http"),
        doc = "[`StreamableHttpService::grace`]: crate::transport"
    )]
    pub fn set_grace(&self, grace: Duration) -> bool {
        if self.is_finished() {
            return false;
        }
        self.state().grace.set(grace);
        true
    }

    /// The request's cooperative grace: the one
    /// [`set_grace`](Self::set_grace) set, else the one the transport's
    /// policy gave it; `None` when neither did.
    pub fn grace(&self) -> Option<Duration> {
        self.state().grace.get()
    }

    /// Marks the drop of the request's handler future owned by a
    /// transport's lifecycle (which applies the grace), with the grace of
    /// its policy unless the request has one already.
    #[cfg(any(feature = "stdio", feature = "http", feature = "tasks"))]
    pub(crate) fn own_grace(&self, policy: Duration) {
        self.state().grace.own(policy);
    }

    /// Whether a layer that would drop the request's inner future on a
    /// cancel or an expiry must leave that to the transport's lifecycle
    /// instead: one owns the drop and the request has a grace.
    #[inline]
    pub(crate) fn grace_handed(&self) -> bool {
        self.state().grace_handed()
    }

    /// Whether the request was cancelled under a transport's lifecycle.
    #[inline]
    pub(crate) fn cancelled_owned(&self) -> bool {
        self.state().cancelled_owned()
    }

    /// Whether two handles share one state.
    pub(crate) fn same_as(&self, other: &Cancellation) -> bool {
        Arc::ptr_eq(&self.request, &other.request)
    }
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state().state.load(Ordering::Acquire) {
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

#[cfg(all(test, tower_mcp_cancel_loom))]
mod loom_model;

#[cfg(all(test, not(tower_mcp_cancel_loom)))]
mod tests;
