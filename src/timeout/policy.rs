use std::sync::Arc;
use std::time::Duration;

use crate::jsonrpc::{Method, SUBSCRIPTIONS_LISTEN};

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

/// Which deadline a request gets: a default and per-method entries.
#[derive(Clone, Debug)]
pub struct TimeoutPolicy {
    default: Option<Duration>,
    // Few entries: a linear scan beats hashing the method name.
    methods: Arc<[(Method, Option<Duration>)]>,
}

impl TimeoutPolicy {
    /// `default` for every method, `subscriptions/listen` exempt.
    pub fn new(default: Duration) -> Self {
        Self {
            default: Some(default),
            methods: Arc::new([(Method::from_static(SUBSCRIPTIONS_LISTEN), None)]),
        }
    }

    fn set(&mut self, method: &str, limit: Option<Duration>) {
        let mut v: Vec<_> = self
            .methods
            .iter()
            .filter(|(m, _)| m.as_str() != method)
            .cloned()
            .collect();
        v.push((Method::new(method), limit));
        self.methods = v.into();
    }

    /// Sets the deadline for `method`.
    pub fn method(mut self, method: &str, limit: Duration) -> Self {
        self.set(method, Some(limit));
        self
    }

    /// No deadline for `method`.
    pub fn method_unlimited(mut self, method: &str) -> Self {
        self.set(method, None);
        self
    }

    /// Whether `subscriptions/listen` is exempt (it is by default); when not,
    /// it gets the default deadline unless it has an entry of its own.
    pub fn exempt_listen(mut self, exempt: bool) -> Self {
        if exempt {
            self.set(SUBSCRIPTIONS_LISTEN, None);
        } else {
            self.methods = self
                .methods
                .iter()
                .filter(|(m, l)| !(m.as_str() == SUBSCRIPTIONS_LISTEN && l.is_none()))
                .cloned()
                .collect::<Vec<_>>()
                .into();
        }
        self
    }

    /// The deadline for a request of `method` (`None`: no deadline).
    pub fn limit_for(&self, method: Option<&str>) -> Option<Duration> {
        if let Some(method) = method {
            for (m, l) in self.methods.iter() {
                if m.as_str() == method {
                    return *l;
                }
            }
        }
        self.default
    }
}
