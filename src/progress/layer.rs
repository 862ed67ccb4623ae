use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::error::BoxError;
use crate::jsonrpc::{Method, ProgressToken};
use crate::request::RequestView;
use crate::state::{ProgressObserver, ProgressTap, RequestState, TapRequest};
use crate::timeout::DeadlineCap;

use super::future::ResponseFuture;
use super::limits::ProgressLimits;
use crate::policy::MethodPolicy;

/// Applies [`ProgressReset`] to a service. See the [module docs](crate::progress).
#[derive(Clone)]
pub struct ProgressResetLayer {
    policy: MethodPolicy<ProgressLimits>,
    tokens: Arc<TokenSource>,
}

/// Where one layer (and its clones) draws progress tokens from, unique
/// among its requests, without allocating: integers from 2^52 up, in a
/// 2^36-wide range picked by the source's address, so that two layers over
/// one transport (almost surely) draw from different ranges and stay below
/// 2^53, which JavaScript peers represent exactly. Each service draws a run
/// of [`RUN`](Self::RUN) tokens at a time ([`Tokens`]), so a request pays no
/// atomic for its token; the runs wrap within the range, reusing a token
/// only 2^30 runs later. Client transports still refuse a token that is
/// already in flight.
struct TokenSource {
    /// The offset of the next run in the range.
    next_run: AtomicU64,
    /// `BASE` and the range's place.
    range: u64,
}

impl TokenSource {
    const BASE: u64 = 1 << 52;
    const RANGE_BITS: u32 = 36;
    const RUN: u64 = 64;

    fn new() -> Arc<Self> {
        let mut src = Arc::new(TokenSource {
            next_run: AtomicU64::new(0),
            range: 0,
        });
        let place = ((Arc::as_ptr(&src) as usize as u64) >> 4) & 0xFFFF;
        if let Some(s) = Arc::get_mut(&mut src) {
            s.range = Self::BASE | (place << Self::RANGE_BITS);
        }
        src
    }

    /// The first token of a fresh run.
    fn run(&self) -> u64 {
        let offset = self.next_run.fetch_add(Self::RUN, Ordering::Relaxed);
        self.range | (offset & ((1 << Self::RANGE_BITS) - 1))
    }
}

/// One service's tokens: a run drawn from its layer's [`TokenSource`],
/// counted without atomics (`call` has `&mut self`). A clone draws a run of
/// its own, so no two services hand out the same token.
struct Tokens {
    source: Arc<TokenSource>,
    next: u64,
    end: u64,
}

impl Tokens {
    fn new(source: Arc<TokenSource>) -> Self {
        // Empty: the first call draws the first run.
        Self {
            source,
            next: 0,
            end: 0,
        }
    }

    #[inline]
    fn next(&mut self) -> ProgressToken {
        if self.next == self.end {
            self.next = self.source.run();
            self.end = self.next + TokenSource::RUN;
        }
        let token = self.next;
        self.next += 1;
        ProgressToken::Number(token as i64)
    }
}

impl Clone for Tokens {
    fn clone(&self) -> Self {
        Self::new(self.source.clone())
    }
}

impl fmt::Debug for ProgressResetLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressResetLayer")
            .field("policy", &self.policy)
            .finish()
    }
}

impl ProgressResetLayer {
    /// The default hard maximum, as a multiple of the idle limit.
    const DEFAULT_MAX_FACTOR: u32 = 10;

    /// Idle limit `idle`, restarted by progress; hard maximum
    /// `10 × idle` unless set with [`max`](Self::max) (or removed with
    /// [`without_max`](Self::without_max)); `subscriptions/listen` exempt.
    pub fn new(idle: Duration) -> Self {
        Self::with_policy(MethodPolicy::new(ProgressLimits {
            idle,
            max: Some(idle.saturating_mul(Self::DEFAULT_MAX_FACTOR)),
        }))
    }

    /// A layer with a full policy.
    pub fn with_policy(policy: MethodPolicy<ProgressLimits>) -> Self {
        Self {
            policy,
            tokens: TokenSource::new(),
        }
    }

    /// Sets the hard maximum of the default limits.
    #[must_use]
    pub fn max(mut self, max: Duration) -> Self {
        let mut limits = self.policy.default_limit();
        limits.max = Some(max);
        self.policy = self.policy.with_default(limits);
        self
    }

    /// Removes the hard maximum of the default limits. The spec says
    /// implementations SHOULD always enforce one; use this only with a
    /// [`TimeoutLayer`](crate::TimeoutLayer) outside as the cap.
    #[must_use]
    pub fn without_max(mut self) -> Self {
        let mut limits = self.policy.default_limit();
        limits.max = None;
        self.policy = self.policy.with_default(limits);
        self
    }

    /// Sets the limits for `method` (a request whose method is only claimed
    /// gets them only where they are tighter than the default).
    #[must_use]
    pub fn method(mut self, method: &str, limits: ProgressLimits) -> Self {
        self.policy = self.policy.method(method, limits);
        self
    }

    /// Sets the limits of a `tools/call` of the tool `name` (idle limit
    /// and hard maximum); they come before the `tools/call` method entry
    /// (see [`MethodPolicy`'s rules](MethodPolicy#which-entry)). The name
    /// is the request's [`tool_name`](crate::RequestView::tool_name).
    ///
    /// Why: how long a tool may stay silent depends on the tool (a search
    /// reports every second, an export every minute), which no method
    /// entry can say.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_mcp_cancel::{ProgressLimits, ProgressResetLayer};
    ///
    /// let export = ProgressLimits { idle: Duration::from_secs(120), max: Some(Duration::from_secs(3600)) };
    /// let layer = ProgressResetLayer::new(Duration::from_secs(10)).tool("export", export);
    /// assert_eq!(layer.policy().limit_for_tool("export"), Some(export));
    /// ```
    #[must_use]
    pub fn tool(mut self, name: &str, limits: ProgressLimits) -> Self {
        self.policy = self.policy.tool(name, limits);
        self
    }

    /// No limits for `method`.
    #[must_use]
    pub fn method_unlimited(mut self, method: &str) -> Self {
        self.policy = self.policy.method_unlimited(method);
        self
    }

    /// Whether `subscriptions/listen` is exempt (default: yes: a listen
    /// stream is quiet by design).
    #[must_use]
    pub fn exempt_listen(mut self, exempt: bool) -> Self {
        self.policy = self.policy.exempt_listen(exempt);
        self
    }

    /// The policy.
    pub fn policy(&self) -> &MethodPolicy<ProgressLimits> {
        &self.policy
    }
}

impl<S> Layer<S> for ProgressResetLayer {
    type Service = ProgressReset<S>;
    fn layer(&self, inner: S) -> ProgressReset<S> {
        ProgressReset {
            inner,
            policy: self.policy.clone(),
            tokens: Tokens::new(self.tokens.clone()),
        }
    }
}

/// Fails a request with [`Elapsed`](crate::Elapsed) when it goes idle (no
/// increasing progress) or reaches its hard maximum, dropping the inner
/// future.
#[derive(Clone)]
pub struct ProgressReset<S> {
    inner: S,
    policy: MethodPolicy<ProgressLimits>,
    tokens: Tokens,
}

impl<S: fmt::Debug> fmt::Debug for ProgressReset<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressReset")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish()
    }
}

impl<S> ProgressReset<S> {
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

impl<S, R> Service<R> for ProgressReset<S>
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
        let limits = match req.extensions().get::<ProgressLimits>() {
            Some(l) => *l,
            // An exempt request still gets its tap (observers see progress),
            // just no timer.
            None => self
                .policy
                .resolve(
                    &req,
                    method.as_ref().map(Method::as_str),
                    ProgressLimits::tighter,
                )
                .unwrap_or(ProgressLimits::NONE),
        };
        let token = match req.progress_token() {
            Some(t) => t.clone(),
            None => {
                let t = self.tokens.next();
                req.set_progress_token(t.clone());
                t
            }
        };
        let observer = req.extensions().get::<ProgressObserver>().cloned();
        let started = req.started_at();
        // The tap lives in the request's state, behind its `Cancellation`;
        // a request without one gets one here, as under
        // `CancelOnDisconnectLayer`, so that the handler's token fires when
        // a limit does. A `TimeoutLayer` above offered its deadline there:
        // this layer's timer takes it.
        let tap = match req.cancellation() {
            Some(c) => {
                let deadlines = c.request_state().deadlines();
                // A cap in the extensions is recorded in the request's
                // state, where this layer's timer takes it with the rest.
                if let Some(cap) = req
                    .extensions()
                    .get::<DeadlineCap>()
                    .and_then(DeadlineCap::deadline)
                {
                    deadlines.inherit(cap);
                }
                let timeout = deadlines.offered();
                let request = TapRequest::new(started, limits.idle, limits.max, timeout);
                let tap = ProgressTap::for_request(c, token, observer, request);
                if tap.lives_in(c) {
                    if let Some(stamp) = timeout {
                        deadlines.take(stamp);
                    }
                    req.set_progress_tap(tap.clone());
                } else if req.progress_tap().is_none() {
                    // Inside another progress layer, the request keeps that
                    // layer's tap: progress recorded there restarts both
                    // idle clocks (this layer's tap reads it).
                    req.set_progress_tap(tap.clone());
                }
                tap
            }
            None => {
                let c = RequestState::start(req.request_id(), method);
                let deadlines = c.request_state().deadlines();
                if let Some(cap) = req
                    .extensions()
                    .get::<DeadlineCap>()
                    .and_then(DeadlineCap::deadline)
                {
                    deadlines.inherit(cap);
                }
                let timeout = deadlines.offered();
                if let Some(stamp) = timeout {
                    deadlines.take(stamp);
                }
                let request = TapRequest::new(started, limits.idle, limits.max, timeout);
                let tap = ProgressTap::for_request(&c, token, observer, request);
                req.set_cancellation(c);
                req.set_progress_tap(tap.clone());
                tap
            }
        };
        ResponseFuture::new(self.inner.call(req), tap)
    }
}
