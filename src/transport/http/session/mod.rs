//! Sessions of the 2025-era Streamable HTTP transport (revisions
//! 2025-03-26 … 2025-11-25), kept only as far as cancellation needs them:
//! opt in with [`StreamableHttpService::stateful_sessions`](super::StreamableHttpService::stateful_sessions).
//!
//! * `initialize` from a 2025-era client (no `MCP-Protocol-Version` header,
//!   or a 2025 one; no modern `_meta`) mints a session: a random
//!   `Mcp-Session-Id` (256 bits from the operating system, as 64 hex
//!   digits) returned on its answer.
//! * Every later request of that client carries the id: it is a legacy
//!   request of that session, registered in the session's [`InFlight`](crate::cancel::InFlight)
//!   registry while it runs.
//! * A POSTed `notifications/cancelled` carrying the session id cancels the
//!   request of **that session** with that id: the handler future is
//!   dropped and its token fired, as a 2026 disconnect does (reason:
//!   [`CancelReason::Peer`](crate::CancelReason::Peer)). An id of another
//!   session, or one not in flight, changes nothing.
//! * `DELETE` with the id ends the session and cancels what it has in
//!   flight ([`CancelReason::TransportClosed`](crate::CancelReason::TransportClosed)).
//! * An unknown, ended or expired id gets `404` (the client then
//!   initializes again, as that revision says).
//!
//! The store belongs to one adapter (its clones share it): nothing is
//! process-wide. It is bounded: at most [`SessionLimits::max_sessions`]
//! sessions, each ending after [`SessionLimits::idle_timeout`] without a
//! request and with nothing in flight. At the bound, expired sessions are
//! swept first; if all are live, the new `initialize` is refused with `503`
//! and a JSON-RPC error saying so — a live session is never evicted to make
//! room, since that would silently break a client that is using it.
//!
//! ```
//! use std::time::Duration;
//! use tower::service_fn;
//! use tower_mcp_cancel::transport::http::{SessionLimits, StreamableHttpService};
//! use tower::BoxError;
//! use tower_mcp_cancel::McpRequest;
//!
//! let mcp = service_fn(|_req: McpRequest| async { Ok::<_, BoxError>(serde_json::json!({})) });
//! let endpoint = StreamableHttpService::new(mcp).stateful_sessions(
//!     SessionLimits::new()
//!         .max_sessions(1_000)
//!         .idle_timeout(Duration::from_secs(600)),
//! );
//! # let _ = endpoint;
//! ```

mod store;

use std::time::Duration;

pub(crate) use store::{CreateError, JoinError, Session, Sessions};

/// The default of [`SessionLimits::max_sessions`].
const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// The default of [`SessionLimits::idle_timeout`]: 30 minutes.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The bounds of the sessions of stateful (2025-era) clients of a
/// [`StreamableHttpService`](super::StreamableHttpService) (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    pub(crate) max_sessions: usize,
    pub(crate) idle_timeout: Duration,
}

impl SessionLimits {
    /// The defaults: at most 10 000 sessions, each ending after 30 minutes
    /// idle.
    pub fn new() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// At most this many sessions at once (default 10 000; at least 1); a new `initialize`
    /// beyond it is refused with `503` unless an idle session has expired.
    #[must_use]
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max.max(1);
        self
    }

    /// A session with nothing in flight ends this long after its last
    /// request (or the end of its last call); later requests with its id
    /// get `404` (default 30 minutes).
    #[must_use]
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self::new()
    }
}
