//! Typed outcomes: [`Elapsed`] (a limit fired), [`Cancelled`] (the request
//! was cancelled and must not be answered) with its [`CancelReason`], and
//! their JSON-RPC mapping.
//!
//! These are the values every layer and transport shares, so they sit below
//! all of them: this module imports only the wire types and the log
//! sanitizer (the wire types import nothing from here: the mappings between
//! the two, `ErrorObject::of_error` and `RawNotification::cancel_request`,
//! are implemented at the end of this file).

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::jsonrpc::ErrorObject;
#[cfg(any(feature = "stdio", feature = "http"))]
use crate::jsonrpc::{CancelledParams, RawNotification, RequestId, CANCELLED};
use crate::sanitize;

/// The error type of the services in this crate, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which limit fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// The fixed deadline of [`TimeoutLayer`](crate::TimeoutLayer).
    Timeout,
    /// The idle limit of [`ProgressResetLayer`](crate::ProgressResetLayer):
    /// no progress for that long.
    Idle,
    /// The hard maximum of [`ProgressResetLayer`](crate::ProgressResetLayer),
    /// which progress does not extend.
    Max,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Timeout => "timeout",
            Limit::Idle => "idle timeout",
            Limit::Max => "maximum timeout",
        })
    }
}

/// A limit fired before the inner service answered; the inner future has
/// been dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Elapsed {
    limit: Limit,
    after: Duration,
}

impl Elapsed {
    /// An expiry of `limit`, set to `after`.
    pub fn new(limit: Limit, after: Duration) -> Self {
        Self { limit, after }
    }

    /// Which limit fired.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The configured duration of that limit.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// The JSON-RPC error a server answers with when its own limit fires.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(ErrorObject::INTERNAL_ERROR, self.to_string()).with_data(
            serde_json::json!({ "limit": self.limit.to_string(), "afterMs": self.after.as_millis() as u64 }),
        )
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.limit {
            Limit::Timeout => write!(f, "request timed out after {:?}", self.after),
            Limit::Idle => write!(f, "request timed out: no progress for {:?}", self.after),
            Limit::Max => write!(
                f,
                "request exceeded its maximum time of {:?} (progress does not extend it)",
                self.after
            ),
        }
    }
}

impl std::error::Error for Elapsed {}

/// Why a request was cancelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The peer sent `notifications/cancelled` (the reason text it gave, sanitized).
    Peer(Option<String>),
    /// The client closed the response (HTTP stream closed, response future dropped).
    ClientDisconnected,
    /// The transport closed (stdin EOF, connection lost).
    TransportClosed,
    /// A limit fired.
    Timeout(Elapsed),
    /// The caller dropped the request's future (client side).
    CallerDropped,
    /// The server is shutting down.
    Shutdown,
    /// Anything else.
    Other(Cow<'static, str>),
}

impl CancelReason {
    /// A peer-supplied reason, truncated and stripped of control characters.
    pub fn peer(reason: Option<&str>) -> Self {
        CancelReason::Peer(reason.map(sanitize::for_log))
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Peer(Some(r)) => write!(f, "cancelled by peer: {r}"),
            CancelReason::Peer(None) => f.write_str("cancelled by peer"),
            CancelReason::ClientDisconnected => f.write_str("client disconnected"),
            CancelReason::TransportClosed => f.write_str("transport closed"),
            CancelReason::Timeout(e) => fmt::Display::fmt(e, f),
            CancelReason::CallerDropped => f.write_str("caller dropped the request"),
            CancelReason::Shutdown => f.write_str("server shutting down"),
            CancelReason::Other(s) => f.write_str(s),
        }
    }
}

/// The request was cancelled; its inner future has been dropped.
///
/// A transport that sees this error writes nothing for the request: no
/// response, no further notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    reason: CancelReason,
}

impl Cancelled {
    /// A cancellation with a reason.
    pub fn new(reason: CancelReason) -> Self {
        Self { reason }
    }

    /// Why.
    pub fn reason(&self) -> &CancelReason {
        &self.reason
    }
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request cancelled: {}", self.reason)
    }
}

impl std::error::Error for Cancelled {}

// The two mappings between these outcomes and the wire live here, above
// `jsonrpc`, so that the wire types import nothing of the layers'.

#[cfg(any(
    feature = "stdio",
    feature = "http",
    feature = "rmcp",
    feature = "tower-mcp"
))]
impl ErrorObject {
    /// The error a server answers for a failed call: an [`ErrorObject`] as
    /// it is, an [`Elapsed`] with its limit, a
    /// [`Cancelled`] nobody asked for (the handler's own,
    /// or a layer inside the stack) as an internal error that says so,
    /// anything else as an internal error carrying its message. The one
    /// mapping for every transport and SDK integration.
    pub(crate) fn of_error(error: &(dyn std::error::Error + 'static)) -> ErrorObject {
        if let Some(e) = error.downcast_ref::<ErrorObject>() {
            return e.clone();
        }
        if let Some(e) = error.downcast_ref::<Elapsed>() {
            return e.to_error_object();
        }
        let message = match error.downcast_ref::<Cancelled>() {
            Some(c) => format!("request cancelled by the server: {}", c.reason()),
            None => error.to_string(),
        };
        ErrorObject::new(ErrorObject::INTERNAL_ERROR, message)
    }
}

#[cfg(any(feature = "stdio", feature = "http"))]
impl RawNotification {
    /// For a `notifications/cancelled`: the request it names and the peer's
    /// reason (sanitized by [`CancelReason::peer`]).
    /// `None` for any other notification, and for a cancel whose params are
    /// missing or malformed (logged at debug: it changes nothing).
    pub(crate) fn cancel_request(&self) -> Option<(RequestId, CancelReason)> {
        if self.method != CANCELLED {
            tracing::debug!(method = ?self.method, "notification carries no cancel: nothing to do");
            return None;
        }
        let Some(params) = self.params.as_deref() else {
            tracing::debug!("notifications/cancelled without params ignored");
            return None;
        };
        match serde_json::from_str::<CancelledParams>(params.get()) {
            Ok(p) => Some((p.request_id, CancelReason::peer(p.reason.as_deref()))),
            Err(e) => {
                tracing::debug!(error = %sanitize::for_log(&e.to_string()), "malformed notifications/cancelled ignored");
                None
            }
        }
    }
}
