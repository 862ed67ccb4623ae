//! [`RequestTimeout`] and the layer's policy: what `TimeoutLayer` enforces,
//! per request and per method.

use std::time::Duration;

/// A per-request deadline override, set by the caller in the request's
/// extensions; it takes precedence over the policy. A duration past what an
/// `Instant` can hold from now (`Duration::MAX`) means no deadline.
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::{McpRequest, RequestTimeout};
/// let req = McpRequest::new(1, "tools/call").with_extension(RequestTimeout::after(Duration::from_secs(5)));
/// let unlimited = McpRequest::new(2, "tools/call").with_extension(RequestTimeout::none());
/// # let _ = (req, unlimited);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<Duration>);

impl RequestTimeout {
    /// Time out after `d`.
    pub fn after(d: Duration) -> Self {
        Self(Some(d))
    }

    /// No deadline for this request.
    pub fn none() -> Self {
        Self(None)
    }
}
