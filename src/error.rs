//! Typed outcomes: [`Elapsed`] (a limit fired) and [`Cancelled`] (the request
//! was cancelled and must not be answered), and their JSON-RPC mapping.

use std::fmt;
use std::time::Duration;

use crate::jsonrpc::ErrorObject;
use crate::CancelReason;

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
