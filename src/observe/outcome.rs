//! [`Outcome`]: how one MCP request ended, told apart so that a
//! cancellation is never counted as a failure.

use std::fmt;

use crate::error::{BoxError, CancelReason, Cancelled, Elapsed, Limit};
use crate::jsonrpc::ErrorObject;
use crate::Cancellation;

/// How one MCP request ended, on either side.
///
/// The transports record it on the request's span (field
/// `mcp.request.outcome`) and, with the `metrics`
/// feature, count it. A layer of your own reads the same classification
/// with [`Outcome::of`] (the result of the inner service),
/// [`Outcome::from_reason`] (a [`CancelReason`]) and
/// [`Outcome::dropped`] (a future dropped before its end), in the spirit of
/// tower-http's `trace` classifiers:
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::observe::Outcome;
/// use tower::BoxError;
/// use tower_mcp_cancel::{CancelReason, Cancelled, Elapsed, Limit};
/// use tower_mcp_cancel::jsonrpc::ErrorObject;
///
/// let ok: Result<(), BoxError> = Ok(());
/// assert_eq!(Outcome::of(&ok), Outcome::Completed);
///
/// let idle: Result<(), BoxError> = Err(Elapsed::new(Limit::Idle, Duration::from_secs(30)).into());
/// assert_eq!(Outcome::of(&idle), Outcome::TimedOut(Limit::Idle));
/// assert_eq!(Outcome::of(&idle).kind(), "timeout_idle");
/// assert!(Outcome::of(&idle).is_failure());
///
/// let peer: Result<(), BoxError> =
///     Err(Cancelled::new(CancelReason::peer(Some("user pressed stop"))).into());
/// assert_eq!(Outcome::of(&peer).kind(), "cancelled");
/// assert!(!Outcome::of(&peer).is_failure()); // a cancellation is not a failure
///
/// let not_found: Result<(), BoxError> = Err(ErrorObject::new(-32601, "Method not found").into());
/// assert_eq!(Outcome::of(&not_found), Outcome::Error { code: Some(-32601) });
/// assert_eq!(Outcome::of(&not_found).error_type().as_deref(), Some("-32601"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The request was answered with a result.
    Completed,
    /// The request was answered with a JSON-RPC error (`code`), or failed
    /// without one (`None`: a client whose connection or HTTP exchange
    /// failed).
    Error {
        /// The JSON-RPC error code.
        code: Option<i64>,
    },
    /// The peer cancelled it with `notifications/cancelled`, with the reason
    /// it gave (sanitized: truncated, control characters blanked).
    CancelledByPeer {
        /// The peer's reason, sanitized.
        reason: Option<String>,
    },
    /// The client went away: it closed the HTTP response stream (or the
    /// connection), so the server dropped the handler.
    ClientDisconnected,
    /// The connection closed under the request (stdin EOF on the server, the
    /// server's stdout or the connection lost on the client).
    TransportClosed,
    /// A limit fired: the deadline ([`Limit::Timeout`]), the idle limit
    /// ([`Limit::Idle`]), the hard maximum ([`Limit::Max`]) or a deadline
    /// inherited from the caller ([`Limit::Inherited`]).
    TimedOut(Limit),
    /// The server shut down (after its drain grace, if any).
    ShutDown,
    /// The caller dropped the request's future (client side), without a
    /// limit of this crate firing.
    CallerDropped,
    /// Cancelled for a reason of the application's own
    /// ([`CancelReason::Other`]).
    Cancelled {
        /// The reason given.
        reason: String,
    },
}

impl Outcome {
    /// The outcome of a service call's result: `Ok` is [`Completed`](Self::Completed);
    /// an error is classified by [`of_error`](Self::of_error).
    pub fn of<T>(result: &Result<T, BoxError>) -> Self {
        match result {
            Ok(_) => Outcome::Completed,
            Err(e) => Self::of_error(&**e),
        }
    }

    /// The outcome of an error: an [`Elapsed`] is [`TimedOut`](Self::TimedOut)
    /// with its limit, a [`Cancelled`] is its reason's outcome
    /// ([`from_reason`](Self::from_reason)), an [`ErrorObject`] an
    /// [`Error`](Self::Error) with its code; the error's sources are
    /// searched for those, and anything else is an `Error` without a code.
    pub fn of_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = cur {
            if let Some(e) = e.downcast_ref::<Elapsed>() {
                return Outcome::TimedOut(e.limit());
            }
            if let Some(c) = e.downcast_ref::<Cancelled>() {
                return Self::from_reason(c.reason());
            }
            if let Some(o) = e.downcast_ref::<ErrorObject>() {
                return Outcome::Error { code: Some(o.code) };
            }
            cur = e.source();
        }
        Outcome::Error { code: None }
    }

    /// The outcome of a request cancelled for `reason`.
    pub fn from_reason(reason: &CancelReason) -> Self {
        match reason {
            CancelReason::Peer(r) => Outcome::CancelledByPeer { reason: r.clone() },
            CancelReason::ClientDisconnected => Outcome::ClientDisconnected,
            CancelReason::TransportClosed => Outcome::TransportClosed,
            CancelReason::Timeout(e) => Outcome::TimedOut(e.limit()),
            CancelReason::CallerDropped => Outcome::CallerDropped,
            CancelReason::Shutdown => Outcome::ShutDown,
            CancelReason::Other(r) => Outcome::Cancelled {
                reason: r.to_string(),
            },
        }
    }

    /// The outcome of a request's future dropped before its end, as the
    /// request's [`Cancellation`] tells it: the reason it was cancelled with
    /// (a limit that gave up on the request cancels it before dropping the
    /// future; a caller who drops a call for a reason of their own cancels
    /// it first too), or `None` when the request has none or it was not
    /// cancelled: its owner just dropped it (a client's caller:
    /// [`CallerDropped`](Self::CallerDropped); a server's response:
    /// [`ClientDisconnected`](Self::ClientDisconnected)). Call it from a
    /// `Drop` implementation, with the cancellation the request carried.
    pub fn dropped(cancellation: Option<&Cancellation>) -> Option<Self> {
        cancellation
            .and_then(Cancellation::reason)
            .map(Self::from_reason)
    }

    /// A short, fixed name of the outcome's kind, for logs and metric
    /// labels: `completed`, `error`, `cancelled`, `client_disconnected`,
    /// `transport_closed`, `timeout_deadline`, `timeout_idle`, `timeout_max`,
    /// `timeout_inherited`, `shutdown`, `caller_dropped`, `cancelled_other`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Error { .. } => "error",
            Outcome::CancelledByPeer { .. } => "cancelled",
            Outcome::ClientDisconnected => "client_disconnected",
            Outcome::TransportClosed => "transport_closed",
            Outcome::TimedOut(Limit::Timeout) => "timeout_deadline",
            Outcome::TimedOut(Limit::Idle) => "timeout_idle",
            Outcome::TimedOut(Limit::Max) => "timeout_max",
            Outcome::TimedOut(Limit::Inherited) => "timeout_inherited",
            Outcome::ShutDown => "shutdown",
            Outcome::CallerDropped => "caller_dropped",
            Outcome::Cancelled { .. } => "cancelled_other",
        }
    }

    /// Whether the request failed: an [`Error`](Self::Error) or a
    /// [`TimedOut`](Self::TimedOut). Cancellations, disconnects and a
    /// shutdown are not failures: nobody is waiting for an answer that did
    /// not come.
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Error { .. } | Outcome::TimedOut(_))
    }

    /// The OpenTelemetry `error.type` of a failure: the JSON-RPC error code
    /// as a string (the MCP conventions' rule), `timeout` for a limit,
    /// `transport_error` for a failure without a code; `None` for anything
    /// that is not a [failure](Self::is_failure).
    pub fn error_type(&self) -> Option<String> {
        match self {
            Outcome::Error { code: Some(c) } => Some(c.to_string()),
            Outcome::Error { code: None } => Some("transport_error".to_owned()),
            Outcome::TimedOut(_) => Some("timeout".to_owned()),
            _ => None,
        }
    }

    /// The JSON-RPC error code of an [`Error`](Self::Error), for
    /// `rpc.response.status_code`.
    pub fn error_code(&self) -> Option<i64> {
        match self {
            Outcome::Error { code } => *code,
            _ => None,
        }
    }

    /// The cancel reason worth recording: the peer's (sanitized) or the
    /// application's.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Outcome::CancelledByPeer { reason } => reason.as_deref(),
            Outcome::Cancelled { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Error { code: Some(c) } => write!(f, "error {c}"),
            Outcome::CancelledByPeer { reason: Some(r) } => write!(f, "cancelled by peer: {r}"),
            Outcome::Cancelled { reason } => write!(f, "cancelled: {reason}"),
            other => f.write_str(other.kind()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_reason_has_its_outcome() {
        let cases = [
            (CancelReason::peer(Some("a\nb")), "cancelled"),
            (CancelReason::ClientDisconnected, "client_disconnected"),
            (CancelReason::TransportClosed, "transport_closed"),
            (
                CancelReason::Timeout(Elapsed::new(Limit::Timeout, Duration::from_secs(1))),
                "timeout_deadline",
            ),
            (
                CancelReason::Timeout(Elapsed::new(Limit::Max, Duration::from_secs(1))),
                "timeout_max",
            ),
            (CancelReason::CallerDropped, "caller_dropped"),
            (CancelReason::Shutdown, "shutdown"),
            (CancelReason::Other("mine".into()), "cancelled_other"),
        ];
        for (reason, kind) in cases {
            assert_eq!(Outcome::from_reason(&reason).kind(), kind, "{reason}");
        }
        assert_eq!(
            Outcome::from_reason(&CancelReason::peer(Some("a\nb"))).reason(),
            Some("a b"),
            "the peer's reason is sanitized"
        );
    }

    #[test]
    fn errors_are_found_behind_sources_and_unknown_ones_have_no_code() {
        #[derive(Debug)]
        struct Wrap(Elapsed);
        impl fmt::Display for Wrap {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped = Wrap(Elapsed::new(Limit::Idle, Duration::from_secs(1)));
        assert_eq!(Outcome::of_error(&wrapped), Outcome::TimedOut(Limit::Idle));
        let io = std::io::Error::other("broken");
        assert_eq!(Outcome::of_error(&io), Outcome::Error { code: None });
        assert_eq!(
            Outcome::of_error(&io).error_type().as_deref(),
            Some("transport_error")
        );
        assert_eq!(Outcome::ShutDown.error_type(), None);
    }

    #[test]
    fn the_cancellations_reason_is_the_outcome_of_a_drop() {
        assert_eq!(Outcome::dropped(None), None);
        let c = Cancellation::new();
        assert_eq!(Outcome::dropped(Some(&c)), None, "not cancelled");
        c.cancel(CancelReason::Shutdown);
        assert_eq!(Outcome::dropped(Some(&c)), Some(Outcome::ShutDown));
    }
}
