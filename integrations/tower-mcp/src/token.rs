//! Firing tower-mcp's cancellation token when a call ends early.

use tower_mcp::context::CancellationToken;

/// Fires a handler's token (`ctx.cancellation_token()`) when dropped
/// armed: the call it guards ended without its answer (dropped, cancelled,
/// cut by a layer's limit), so the work the handler spawned with the token
/// stops too. Disarmed once the call has its answer.
pub(crate) struct FireOnDrop(Option<CancellationToken>);

impl FireOnDrop {
    /// A guard that fires `token` unless [disarmed](Self::disarm).
    pub(crate) fn armed(token: CancellationToken) -> Self {
        Self(Some(token))
    }

    /// The call has its answer: dropping the guard fires nothing.
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for FireOnDrop {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}
