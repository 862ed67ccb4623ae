//! [`ResponseFuture`] of [`ProgressReset`](super::ProgressReset): the inner
//! future raced against the idle limit (restarted by progress) and the hard
//! maximum.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::cancel::with_drop_reason;
use crate::error::{BoxError, CancelReason, Elapsed, Limit};

use super::tap::ProgressTap;

/// Closes the tap when the request ends, however it ends; emptied when the
/// future closes it on completion, so that it is closed once.
struct CloseOnDrop(Option<ProgressTap>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Some(tap) = &self.0 {
            tap.close();
        }
    }
}

pin_project! {
    /// Response future of [`ProgressReset`](super::ProgressReset).
    ///
    /// Small on purpose (it is moved with every layer around it): the
    /// request's limits live with its tap, in its `Cancellation`
    /// ([`TapRequest`](super::tap::TapRequest)), and both
    /// deadlines are computed from them only once the inner future waits.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        // One timer for both limits: it is set to whichever comes first, the
        // idle deadline (moved by progress) or the hard maximum. Made when
        // the inner future first returns `Pending` (a request ready at once
        // never touches the timer wheel).
        timer: Option<Pin<Box<Sleep>>>,
        tap: CloseOnDrop,
        seen: u64,
    }
}

impl<F> ResponseFuture<F> {
    /// `tap` carries the request's [`TapRequest`](super::tap::TapRequest)
    /// (without one, no limit applies).
    #[inline]
    pub(crate) fn new(inner: F, tap: ProgressTap) -> Self {
        Self {
            inner: Some(inner),
            timer: None,
            tap: CloseOnDrop(Some(tap)),
            seen: 0,
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
            if let Some(tap) = this.tap.0.take() {
                tap.close();
            }
            return Poll::Ready(out.map_err(Into::into));
        }
        let tap = this
            .tap
            .0
            .as_ref()
            .expect("the tap is present until completion");
        tap.register(cx);
        // Read before the deadlines: a report in between is seen again.
        let epoch = tap.epoch();
        let Some((limits, mut idle, mut max)) = tap.deadlines() else {
            return Poll::Pending;
        };
        // Progress since the last poll moved the idle deadline.
        let moved = std::mem::replace(this.seen, epoch) != epoch;
        let Some(first) = earlier(idle, max) else {
            // No limit at all: only the tap (for observers) is left to do.
            return Poll::Pending;
        };
        let timer = match this.timer {
            Some(timer) => {
                if moved {
                    timer.as_mut().reset(first);
                }
                timer
            }
            None => this.timer.insert(Box::pin(sleep_until(first))),
        };
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let elapsed = if max.is_some_and(|m| now >= m) {
                Elapsed::new(Limit::Max, limits.max.unwrap_or_default())
            } else if idle.is_some_and(|i| now >= i) {
                Elapsed::new(Limit::Idle, limits.idle)
            } else {
                // Woken for a deadline that has since moved (progress moves
                // the idle one later, never to `None` once it was `Some`).
                (_, idle, max) = tap.deadlines().expect("a tap with limits keeps them");
                let Some(next) = earlier(idle, max) else {
                    return Poll::Pending;
                };
                timer.as_mut().reset(next);
                continue;
            };
            let reason = CancelReason::Timeout(elapsed);
            expire(&reason, tap);
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
fn expire(reason: &CancelReason, tap: &ProgressTap) {
    let (id, method) = tap.label();
    tracing::debug!(
        request_id = id.map(tracing::field::display),
        method = method.map_or("", |m| m.as_str()),
        %reason,
        last_progress = tap.last(),
        "request timed out; inner future dropped"
    );
    tap.close();
    tap.cancel(reason);
}
