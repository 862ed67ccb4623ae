//! [`DisconnectGuard`]: fires a request's cancellation when dropped armed.
//!
//! Crate-private in name: it is `pub` only so that the sealed
//! [`GuardResponse`](super::GuardResponse) can hand it over; no public path
//! reaches it.

use crate::cancel::drop_reason::current_drop_reason;
use crate::cancel::Cancellation;
use crate::error::CancelReason;

/// Fires a request's [`Cancellation`] with
/// [`CancelReason::ClientDisconnected`] if dropped while armed; completes it
/// when the response reached its end.
///
/// If the drop happens inside a [`drop_with_reason`](crate::cancel::drop_with_reason) scope (a limit fired
/// above), that reason is used instead.
///
/// The guard reads no clock: the timer layers log how long a request ran
/// when they end it, and a disconnect is logged with its id and method.
pub struct DisconnectGuard {
    cancellation: Cancellation,
    armed: bool,
}

impl DisconnectGuard {
    /// An armed guard for a request.
    pub fn new(cancellation: Cancellation) -> Self {
        Self {
            cancellation,
            armed: true,
        }
    }

    /// The request's cancellation.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// The response reached its end: the request completed, later cancels
    /// are no-ops, and dropping the guard fires nothing.
    pub fn complete(mut self) {
        self.disarm();
    }

    pub(crate) fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.cancellation.complete();
        }
    }

    /// Ends the guard without touching the cancellation (it already holds
    /// the outcome: a cancel).
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
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let reason = current_drop_reason().unwrap_or(CancelReason::ClientDisconnected);
        if self.cancellation.cancel(reason.clone()) {
            self.log_cancelled(&reason, "request dropped before completion; token fired");
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
