//! [`MethodPolicy`]: which limit a request gets, by method; the one policy
//! type of both timer layers.
//!
//! Below the layers that use it (`timeout`, `progress`), which re-export it,
//! so that neither layer imports the other.

use std::sync::Arc;

use crate::jsonrpc::{Method, SUBSCRIPTIONS_LISTEN};
use crate::request::RequestView;

/// Which limit a request gets, by method: a default, and per-method entries
/// (an entry of `None`: no limit for that method). `subscriptions/listen` is
/// exempt unless configured otherwise.
///
/// One policy type serves both timer layers: `MethodPolicy<Duration>` for
/// [`TimeoutLayer`](crate::TimeoutLayer), and
/// `MethodPolicy<`[`ProgressLimits`](crate::ProgressLimits)`>` for
/// [`ProgressResetLayer`](crate::ProgressResetLayer).
///
/// # Which method
///
/// The layers look the request's method up with
/// [`RequestView::mcp_method`]. When that method is only *claimed*
/// ([`RequestView::mcp_method_checked`] is `false`: an `http::Request`'s
/// `Mcp-Method` header that nothing has compared with the body), its entry
/// may make the limit shorter than the default, never longer or absent: a
/// client that labels a `tools/call` as `subscriptions/listen` gets the
/// default limit, not an exemption.
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::MethodPolicy;
///
/// let policy = MethodPolicy::new(Duration::from_secs(60))
///     .method("tools/call", Duration::from_secs(600))
///     .method_unlimited("tasks/wait");
/// assert_eq!(policy.limit_for(Some("tools/list")), Some(Duration::from_secs(60)));
/// assert_eq!(policy.limit_for(Some("tools/call")), Some(Duration::from_secs(600)));
/// assert_eq!(policy.limit_for(Some("subscriptions/listen")), None);
/// assert_eq!(policy.limit_for(Some("tasks/wait")), None);
/// ```
#[derive(Clone, Debug)]
pub struct MethodPolicy<T> {
    default: T,
    // Few entries: a linear scan beats hashing the method name, and the
    // lookup allocates nothing.
    methods: Arc<[(Method, Option<T>)]>,
}

impl<T: Copy> MethodPolicy<T> {
    /// `default` for every method, `subscriptions/listen` exempt.
    pub fn new(default: T) -> Self {
        Self {
            default,
            methods: Arc::new([(Method::from_static(SUBSCRIPTIONS_LISTEN), None)]),
        }
    }

    fn set(&mut self, method: &str, limit: Option<T>) {
        let mut v: Vec<_> = self
            .methods
            .iter()
            .filter(|(m, _)| m.as_str() != method)
            .cloned()
            .collect();
        v.push((Method::new(method), limit));
        self.methods = v.into();
    }

    /// Sets the limit for `method`.
    #[must_use]
    pub fn method(mut self, method: &str, limit: T) -> Self {
        self.set(method, Some(limit));
        self
    }

    /// No limit for `method`.
    #[must_use]
    pub fn method_unlimited(mut self, method: &str) -> Self {
        self.set(method, None);
        self
    }

    /// Whether `subscriptions/listen` is exempt (it is by default); when not,
    /// it gets the default limit unless it has an entry of its own.
    #[must_use]
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

    /// The default limit.
    pub fn default_limit(&self) -> T {
        self.default
    }

    /// Sets the default limit (the progress layer's `max` / `without_max`).
    #[must_use]
    pub(crate) fn with_default(mut self, default: T) -> Self {
        self.default = default;
        self
    }

    /// The limit for a request of `method`, a method known to be the
    /// request's (`None`: no limit).
    pub fn limit_for(&self, method: Option<&str>) -> Option<T> {
        match method.and_then(|m| self.entry(m)) {
            Some(entry) => entry,
            None => Some(self.default),
        }
    }

    /// The limit for a request whose method is only claimed (not checked
    /// against the body): its entry counts only where it is tighter than the
    /// default, as `tighter` decides.
    pub(crate) fn limit_for_claimed(&self, method: Option<&str>, tighter: fn(T, T) -> T) -> T {
        match method.and_then(|m| self.entry(m)) {
            Some(Some(entry)) => tighter(entry, self.default),
            Some(None) | None => self.default,
        }
    }

    /// The limit for a request, by the rules in the [type docs](Self).
    #[inline]
    pub(crate) fn resolve<R: RequestView>(
        &self,
        req: &R,
        method: Option<&str>,
        tighter: fn(T, T) -> T,
    ) -> Option<T> {
        if req.mcp_method_checked() {
            self.limit_for(method)
        } else {
            Some(self.limit_for_claimed(method, tighter))
        }
    }

    fn entry(&self, method: &str) -> Option<Option<T>> {
        self.methods
            .iter()
            .find(|(m, _)| m.as_str() == method)
            .map(|(_, l)| *l)
    }
}
