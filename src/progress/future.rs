//! [`ResponseFuture`] of [`ProgressReset`](super::ProgressReset): the inner
//! future raced against the idle limit (restarted by progress) and the hard
//! maximum.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::error::{BoxError, CancelReason};
use crate::state::ProgressTap;

/// Closes the tap when the request ends, however it ends; emptied when the
/// future closes it on completion, so that it is closed once.
struct CloseOnDrop(Option<ProgressTap>);

impl Drop for CloseOnDrop {
    #[inline]
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
    /// request's limits live with its tap, in its shared state
    /// ([`TapRequest`](crate::state::TapRequest)), and both
    /// deadlines are computed from them only once the inner future waits.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        // One timer for every limit: it is set to whichever comes first, the
        // idle deadline, the hard maximum, or a timeout taken from a
        // `TimeoutLayer` above. Made when the inner future first returns
        // `Pending` (a request ready at once never touches the timer wheel).
        // Progress does not wake this future: deadlines only ever move
        // later, so the timer is re-armed when it fires early, at most once
        // per idle period however often progress is reported.
        timer: Option<Pin<Box<Sleep>>>,
        tap: CloseOnDrop,
    }
}

impl<F> ResponseFuture<F> {
    /// `tap` carries the request's [`TapRequest`](crate::state::TapRequest)
    /// (without one, no limit applies).
    #[inline]
    pub(crate) fn new(inner: F, tap: ProgressTap) -> Self {
        Self {
            inner: Some(inner),
            timer: None,
            tap: CloseOnDrop(Some(tap)),
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
        let Some(tap) = this.tap.0.as_ref() else {
            // Expired, in the grace a transport's lifecycle grants: only
            // the inner future is left to poll.
            return Poll::Pending;
        };
        let timer = match this.timer {
            Some(timer) => timer,
            None => {
                let Some(first) = tap.deadlines().and_then(|due| due.first()) else {
                    // No limit at all: only the tap (for observers) is left.
                    return Poll::Pending;
                };
                this.timer.insert(Box::pin(sleep_until(first)))
            }
        };
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = tap.deadlines().expect("a tap with a timer has limits");
            let Some(elapsed) = due.elapsed_at(Instant::now()) else {
                // The timer was set to a deadline that progress has since
                // moved later: re-arm it (never to `None`: a deadline that
                // was set stays set).
                let Some(next) = due.first() else {
                    return Poll::Pending;
                };
                timer.as_mut().reset(next);
                continue;
            };
            let reason = CancelReason::Timeout(elapsed);
            // Cancelled first: a client transport below, whose future is
            // dropped next, reads the reason from the request's
            // cancellation.
            expire(&reason, tap);
            if tap.grace_handed() {
                // A transport's lifecycle owns the drop and grants a grace:
                // it answers the timeout now and drops the stack after the
                // grace; the inner future is polled on until then, with no
                // limit left here (the tap, closed, goes).
                this.tap.0 = None;
                *this.timer = None;
                return Poll::Pending;
            }
            this.inner.set(None);
            return Poll::Ready(Err(Box::new(elapsed)));
        }
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
