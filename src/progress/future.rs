use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{sleep, Instant, Sleep};

use crate::cancel::with_drop_reason;
use crate::error::{BoxError, Elapsed, Limit};
use crate::jsonrpc::{Method, RequestId};
use crate::{CancelReason, Cancellation};

use super::{ProgressLimits, ProgressTap};

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
        #[pin]
        idle: Sleep,
        #[pin]
        max: Option<Sleep>,
        tap: CloseOnDrop,
        seen: u64,
        limits: ProgressLimits,
        id: Option<RequestId>,
        method: Option<Method>,
        cancellation: Option<Cancellation>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(
        inner: F,
        tap: ProgressTap,
        limits: ProgressLimits,
        id: Option<RequestId>,
        method: Option<Method>,
        cancellation: Option<Cancellation>,
    ) -> Self {
        Self {
            inner: Some(inner),
            idle: sleep(limits.idle),
            max: limits.max.map(sleep),
            tap: CloseOnDrop(tap),
            seen: 0,
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
        // The response wins a tie with either timer.
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
            this.idle.as_mut().reset(at + this.limits.idle);
        }
        let fired = match this.max.as_pin_mut().map(|m| m.poll(cx)) {
            Some(Poll::Ready(())) => Some(Elapsed::new(
                Limit::Max,
                this.limits.max.unwrap_or_default(),
            )),
            _ => match this.idle.poll(cx) {
                Poll::Ready(()) => Some(Elapsed::new(Limit::Idle, this.limits.idle)),
                Poll::Pending => None,
            },
        };
        let Some(elapsed) = fired else {
            return Poll::Pending;
        };
        let reason = CancelReason::Timeout(elapsed);
        tracing::info!(
            request_id = this.id.as_ref().map(tracing::field::display),
            method = this.method.as_deref().unwrap_or(""),
            reason = %reason,
            last_progress = tap.last(),
            "request timed out; inner future dropped"
        );
        tap.close();
        if let Some(c) = this.cancellation.as_ref() {
            c.cancel(reason.clone());
        }
        with_drop_reason(&reason, || this.inner.set(None));
        Poll::Ready(Err(Box::new(elapsed)))
    }
}
