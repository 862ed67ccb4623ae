use std::fmt;
use std::task::{Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::error::{BoxError, Limit};
use crate::jsonrpc::Method;
use crate::request::RequestView;
use crate::state::Stamp;

use super::future::ResponseFuture;
use super::RequestTimeout;
use crate::policy::MethodPolicy;

/// Applies [`Timeout`] to a service. See the [module docs](crate::timeout);
/// over `http::Request`, an unchecked `Mcp-Method` header can shorten the
/// deadline, never lengthen or lift it.
#[derive(Clone, Debug)]
pub struct TimeoutLayer {
    policy: MethodPolicy<Duration>,
}

impl TimeoutLayer {
    /// Every request times out after `default` (`subscriptions/listen`
    /// exempt).
    pub fn new(default: Duration) -> Self {
        Self {
            policy: MethodPolicy::new(default),
        }
    }

    /// A layer with a full policy.
    pub fn with_policy(policy: MethodPolicy<Duration>) -> Self {
        Self { policy }
    }

    /// Sets the deadline for `method` (a request whose method is only
    /// claimed gets it only when it is shorter than the default).
    #[must_use]
    pub fn method(mut self, method: &str, limit: Duration) -> Self {
        self.policy = self.policy.method(method, limit);
        self
    }

    /// Sets the deadline of a `tools/call` of the tool `name`; it comes
    /// before the `tools/call` method entry (see
    /// [`MethodPolicy`'s rules](MethodPolicy#which-entry); `Duration::MAX`:
    /// no deadline). The name is the request's
    /// [`tool_name`](crate::RequestView::tool_name).
    ///
    /// Why: the per-tool deadline users ask for ("`slow` gets 2 s, every
    /// other tool 60 s") in one line, as [`method`](Self::method) is per
    /// method.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_mcp_cancel::TimeoutLayer;
    ///
    /// let layer = TimeoutLayer::new(Duration::from_secs(60))
    ///     .tool("slow", Duration::from_secs(2));
    /// assert_eq!(layer.policy().limit_for_tool("slow"), Some(Duration::from_secs(2)));
    /// assert_eq!(layer.policy().limit_for_tool("echo"), Some(Duration::from_secs(60)));
    /// ```
    #[must_use]
    pub fn tool(mut self, name: &str, limit: Duration) -> Self {
        self.policy = self.policy.tool(name, limit);
        self
    }

    /// No deadline for `method`.
    #[must_use]
    pub fn method_unlimited(mut self, method: &str) -> Self {
        self.policy = self.policy.method_unlimited(method);
        self
    }

    /// Whether `subscriptions/listen` is exempt (default: yes).
    #[must_use]
    pub fn exempt_listen(mut self, exempt: bool) -> Self {
        self.policy = self.policy.exempt_listen(exempt);
        self
    }

    /// The policy.
    pub fn policy(&self) -> &MethodPolicy<Duration> {
        &self.policy
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// Fails a request with [`Elapsed`](crate::Elapsed) when its deadline
/// passes, dropping the inner future.
#[derive(Clone)]
pub struct Timeout<S> {
    inner: S,
    policy: MethodPolicy<Duration>,
}

impl<S: fmt::Debug> fmt::Debug for Timeout<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<S> Timeout<S> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: S, policy: MethodPolicy<Duration>) -> Self {
        Self { inner, policy }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the middleware, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R> Service<R> for Timeout<S>
where
    R: RequestView,
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, mut req: R) -> Self::Future {
        let method = req.mcp_method();
        let limit = match req.extensions().get::<RequestTimeout>() {
            Some(t) => t.0,
            None => self
                .policy
                .resolve(&req, method.as_ref().map(Method::as_str), Duration::min),
        };
        let inherited = super::inherited_deadline(&req);
        // A limit past what an `Instant` holds (`Duration::MAX`) is no limit.
        let own = limit.and_then(|l| req.started_at().checked_add(l).map(|d| (l, d)));
        let (kind, limit, deadline) = match (own, inherited) {
            (Some((limit, deadline)), None) => (Limit::Timeout, limit, deadline),
            (None, None) => return ResponseFuture::unlimited(self.inner.call(req)),
            // With an inherited deadline, the earlier of the two (a tie is
            // the own limit's).
            (own, Some(cap)) => {
                let cap = cap.at();
                match own {
                    Some((limit, deadline)) if deadline <= cap => (Limit::Timeout, limit, deadline),
                    _ => {
                        let limit = cap.saturating_duration_since(req.started_at());
                        (Limit::Inherited, limit, cap)
                    }
                }
            }
        };
        let Some(cancellation) = req.cancellation().cloned() else {
            return ResponseFuture::new(self.inner.call(req), deadline, kind, limit, None);
        };
        // One timer per request: a `ProgressResetLayer` below runs a timer
        // anyway, and takes this deadline into it when it can; this layer
        // needs no timer when one below took a deadline no later than this.
        let deadlines = cancellation.request_state().deadlines();
        let offer = deadlines.offer(Stamp::new(deadline, kind == Limit::Inherited));
        let inner = self.inner.call(req);
        if deadlines.settle(offer) {
            return ResponseFuture::handed_off(inner, deadline, kind, limit, cancellation);
        }
        ResponseFuture::new(inner, deadline, kind, limit, Some(cancellation))
    }
}
