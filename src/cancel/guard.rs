//! [`DisconnectGuard`]: fires a request's cancellation when dropped armed.
//!
//! Crate-private in name: it is `pub` only so that the sealed
//! [`GuardResponse`](super::GuardResponse) can hand it over; no public path
//! reaches it.

use crate::cancel::Cancellation;
use crate::error::CancelReason;

/// Fires a request's [`Cancellation`] with
/// [`CancelReason::ClientDisconnected`] if dropped while armed; completes it
/// when the response reached its end.
///
/// A cancellation that was already cancelled keeps its reason (the first
/// wins): a limit above this layer that fired cancels the request's
/// cancellation before it drops this guard, and that is the reason the
/// handler sees. A limit above that had no cancellation to fire (the request
/// came without one, and this layer made it) leaves the reason
/// `ClientDisconnected`.
///
/// The guard reads no clock: the timer layers log how long a request ran
/// when they end it, and a disconnect is logged with its id and method.
pub struct DisconnectGuard {
    cancellation: Cancellation,
    armed: bool,
}

impl DisconnectGuard {
    /// An armed guard for a request.
    #[inline]
    pub fn new(cancellation: Cancellation) -> Self {
        Self {
            cancellation,
            armed: true,
        }
    }

    /// The request's cancellation.
    #[inline]
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// The response reached its end: the request completed, later cancels
    /// are no-ops, and dropping the guard fires nothing.
    #[inline]
    pub fn complete(mut self) {
        self.disarm();
    }

    #[inline]
    pub(crate) fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.cancellation.complete();
        }
    }

    /// Ends the guard without touching the cancellation (it already holds
    /// the outcome: a cancel).
    #[inline]
    pub(crate) fn defuse(&mut self) {
        self.armed = false;
    }

    pub(crate) fn log_cancelled(&self, reason: &CancelReason, what: &'static str) {
        tracing::debug!(
            request_id = self.cancellation.request_state().request_id().map(tracing::field::display),
            method = self.cancellation.request_state().method().map_or("", |m| m.as_str()),
            %reason,
            "{what}"
        );
    }
}

impl Drop for DisconnectGuard {
    #[inline]
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.cancellation.cancel(CancelReason::ClientDisconnected) {
            self.log_cancelled(
                &CancelReason::ClientDisconnected,
                "request dropped before completion; token fired",
            );
        }
    }
}

impl std::fmt::Debug for DisconnectGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DisconnectGuard")
            .field("cancellation", &self.cancellation)
            .field("armed", &self.armed)
            .finish()
    }
}
