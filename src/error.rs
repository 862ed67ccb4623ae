//! Typed outcomes: [`Elapsed`] (a limit fired), [`Cancelled`] (the request
//! was cancelled and must not be answered) with its [`CancelReason`].
//!
//! These are the values every layer and transport shares, so they sit below
//! all of them, the wire types included: this module imports only the log
//! sanitizer. Their JSON-RPC mapping ([`Elapsed::to_error_object`]) lives
//! with the wire types, in [`jsonrpc`](crate::jsonrpc).

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::sanitize;

// The error type of the services in this crate: tower's (`tower::BoxError`).
pub(crate) use tower::BoxError;

/// Which limit fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// The fixed deadline of [`TimeoutLayer`](crate::TimeoutLayer).
    Timeout,
    /// The idle limit of [`ProgressResetLayer`](crate::ProgressResetLayer):
    /// no progress for that long.
    Idle,
    /// The hard maximum of [`ProgressResetLayer`](crate::ProgressResetLayer),
    /// which progress does not extend.
    Max,
    /// A deadline the request inherited from its caller, earlier than any
    /// local limit: a [`DeadlineCap`](crate::timeout::DeadlineCap) in its
    /// extensions or its [`Cancellation`](crate::Cancellation), or a budget
    /// a server transport read from the request's `_meta` (see
    /// [deadlines](crate::timeout#deadlines-that-travel)).
    Inherited,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Timeout => "timeout",
            Limit::Idle => "idle timeout",
            Limit::Max => "maximum timeout",
            Limit::Inherited => "inherited deadline",
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
            Limit::Inherited => write!(
                f,
                "request reached the deadline inherited from its caller, {:?} after it started",
                self.after
            ),
        }
    }
}

impl std::error::Error for Elapsed {}

/// Why a request was cancelled.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
