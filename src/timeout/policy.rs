//! [`RequestTimeout`] and the layer's policy: what `TimeoutLayer` enforces,
//! per request and per method.

use std::time::Duration;

use crate::state::Stamp;

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

/// A cap on a request's deadlines, inherited from its caller: every timer
/// layer the request passes ([`TimeoutLayer`](crate::TimeoutLayer),
/// [`ProgressResetLayer`](crate::ProgressResetLayer)) enforces
/// `min(own limit, cap)`, and an expiry at the cap is named
/// [`Limit::Inherited`](crate::Limit::Inherited). Unlike
/// [`RequestTimeout`], a cap never lengthens a deadline.
///
/// A handler passes its own deadline to a call it makes downstream with
/// one line ([`RequestContext::deadline_cap`](crate::RequestContext::deadline_cap);
/// a handler without a deadline passes an uncapped value, which changes
/// nothing). See [deadlines that travel](crate::timeout#deadlines-that-travel).
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::{timeout::DeadlineCap, McpRequest, RequestContext};
/// # fn f(ctx: &RequestContext) {
/// let downstream = McpRequest::new(1, "tools/call").with_extension(ctx.deadline_cap());
/// let capped = McpRequest::new(2, "tools/call").with_extension(DeadlineCap::after(Duration::from_secs(2)));
/// # let _ = (downstream, capped); }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadlineCap(Option<tokio::time::Instant>);

impl DeadlineCap {
    /// A cap at `deadline`.
    pub fn at(deadline: tokio::time::Instant) -> Self {
        Self(Some(deadline))
    }

    /// A cap `remaining` from now (none if that is past what an `Instant`
    /// holds).
    pub fn after(remaining: Duration) -> Self {
        Self(tokio::time::Instant::now().checked_add(remaining))
    }

    /// No cap: what a handler without a deadline passes on.
    pub fn none() -> Self {
        Self(None)
    }

    /// The capped deadline, if any.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.0
    }
}

/// The deadline `req` inherited: the earlier of a [`DeadlineCap`] in its
/// extensions and an inherited deadline in its state (its `Cancellation`).
/// A cap from the extensions is recorded in the state, so that the layers
/// below and the handler see it too. The one place the timer layers read
/// an inherited deadline.
// Always inlined: on a request without a cap it is two lookups and a
// load, cheaper than the call.
#[inline(always)]
pub(crate) fn inherited_deadline<R: crate::RequestView>(req: &R) -> Option<Stamp> {
    let capped = req.extensions().get::<DeadlineCap>().and_then(|c| c.0);
    let Some(state) = req.cancellation().map(|c| c.request_state().deadlines()) else {
        return capped.map(|cap| Stamp::new(cap, true));
    };
    if let Some(cap) = capped {
        state.inherit(cap);
    }
    state.inherited()
}
