//! [`ResponseFuture`] of [`ProgressReset`](super::ProgressReset): the inner
//! future raced against the idle limit (restarted by progress) and the hard
//! maximum.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::cancel::with_drop_reason;
use crate::cancel::Cancellation;
use crate::error::{BoxError, CancelReason, Elapsed, Limit};
use crate::jsonrpc::{Method, RequestId};

use super::limits::ProgressLimits;
use super::tap::ProgressTap;

/// Closes the tap when the request ends, however it ends.
struct CloseOnDrop(ProgressTap);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

pin_project! {
    /// Response future of [`ProgressReset`](super::ProgressReset).
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        // One timer for both limits: it is set to whichever comes first, the
        // idle deadline (moved by progress) or the hard maximum.
        // Made when the inner future first returns `Pending` (a request ready
        // at once never touches the timer wheel); both deadlines are fixed
        // from `call`. `None`: no such limit (disabled, or past what an
        // `Instant` holds, e.g. `Duration::MAX`).
        timer: Option<Pin<Box<Sleep>>>,
        tap: CloseOnDrop,
        seen: u64,
        idle_deadline: Option<Instant>,
        max_deadline: Option<Instant>,
        limits: ProgressLimits,
        id: Option<RequestId>,
        method: Option<Method>,
        cancellation: Option<Cancellation>,
    }
}

impl<F> ResponseFuture<F> {
    #[inline]
    pub(crate) fn new(
        inner: F,
        now: Instant,
        tap: ProgressTap,
        limits: ProgressLimits,
        id: Option<RequestId>,
        method: Option<Method>,
        cancellation: Option<Cancellation>,
    ) -> Self {
        let idle_deadline = now.checked_add(limits.idle);
        let max_deadline = limits.max.and_then(|m| now.checked_add(m));
        Self {
            inner: Some(inner),
            timer: None,
            tap: CloseOnDrop(tap),
            seen: 0,
            idle_deadline,
            max_deadline,
            limits,
            id,
            method,
            cancellation,
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let inner = this
            .inner
            .as_mut()
            .as_pin_mut()
            .expect("ResponseFuture polled after completion");
        // The response wins a tie with either limit.
        if let Poll::Ready(out) = inner.poll(cx) {
            this.inner.set(None);
            this.tap.0.close();
            return Poll::Ready(out.map_err(Into::into));
        }
        let tap = &this.tap.0;
        tap.register(cx);
        let epoch = tap.epoch();
        if epoch != *this.seen {
            *this.seen = epoch;
            let at = tap.last_at().unwrap_or_else(Instant::now);
            *this.idle_deadline = at.checked_add(this.limits.idle);
            let next = earlier(*this.idle_deadline, *this.max_deadline);
            if let (Some(timer), Some(next)) = (this.timer.as_mut(), next) {
                timer.as_mut().reset(next);
            }
        }
        let Some(first) = earlier(*this.idle_deadline, *this.max_deadline) else {
            // No limit at all: only the tap (for observers) is left to do.
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(first)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let elapsed = if this.max_deadline.is_some_and(|m| now >= m) {
                Elapsed::new(Limit::Max, this.limits.max.unwrap_or_default())
            } else if this.idle_deadline.is_some_and(|i| now >= i) {
                Elapsed::new(Limit::Idle, this.limits.idle)
            } else {
                // Woken for a deadline that has since moved (progress moves
                // the idle one later, never to `None` once it was `Some`).
                let Some(next) = earlier(*this.idle_deadline, *this.max_deadline) else {
                    return Poll::Pending;
                };
                timer.as_mut().reset(next);
                continue;
            };
            let reason = CancelReason::Timeout(elapsed);
            expire(
                &reason,
                tap,
                this.id.as_ref(),
                this.method.as_ref(),
                this.cancellation.as_ref(),
            );
            with_drop_reason(&reason, || this.inner.set(None));
            return Poll::Ready(Err(Box::new(elapsed)));
        }
    }
}

/// The deadline the one timer is set to: the idle one, or the hard maximum
/// when that comes first (`None`: neither limit applies).
fn earlier(idle: Option<Instant>, max: Option<Instant>) -> Option<Instant> {
    match (idle, max) {
        (Some(i), Some(m)) => Some(i.min(m)),
        (i, m) => i.or(m),
    }
}

/// The cold path of an expiry: log, close the tap, fire the token.
#[cold]
#[inline(never)]
fn expire(
    reason: &CancelReason,
    tap: &ProgressTap,
    id: Option<&RequestId>,
    method: Option<&Method>,
    cancellation: Option<&Cancellation>,
) {
    tracing::debug!(
        request_id = id.map(tracing::field::display),
        method = method.map(|m| m.as_str()).unwrap_or(""),
        %reason,
        last_progress = tap.last(),
        "request timed out; inner future dropped"
    );
    tap.close();
    if let Some(c) = cancellation {
        c.cancel(reason.clone());
    }
}
