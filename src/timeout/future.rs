//! [`ResponseFuture`] of [`Timeout`](super::Timeout): the inner future
//! raced against the request's deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};

use crate::cancel::Cancellation;
use crate::error::{BoxError, CancelReason, Elapsed, Limit};

pin_project! {
    /// Response future of [`Timeout`](super::Timeout).
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        // The deadline is fixed at `call`; the timer behind it is made (and
        // registered) only when the inner future first returns `Pending`, so
        // a request that is ready at once never touches the timer wheel, and
        // the future stays small.
        deadline: Option<Instant>,
        sleep: Option<Pin<Box<Sleep>>>,
        limit: Duration,
        // Which limit the deadline is: the layer's own, or inherited.
        kind: Limit,
        // Fired on expiry; its id and method are what the log event names.
        cancellation: Option<Cancellation>,
        // The deadline is enforced by the progress layer below whose tap
        // lives in the request state behind `cancellation`, for as long as
        // that tap is open.
        handed_off: bool,
    }
}

impl<F> ResponseFuture<F> {
    #[inline]
    pub(crate) fn new(
        inner: F,
        deadline: Instant,
        kind: Limit,
        limit: Duration,
        cancellation: Option<Cancellation>,
    ) -> Self {
        Self {
            inner: Some(inner),
            deadline: Some(deadline),
            sleep: None,
            limit,
            kind,
            cancellation,
            handed_off: false,
        }
    }

    /// A deadline that the progress layer whose tap lives in the request
    /// state behind `cancellation` took into its timer; this future arms its own only if the request
    /// goes on once that tap closed.
    #[inline]
    pub(crate) fn handed_off(
        inner: F,
        deadline: Instant,
        kind: Limit,
        limit: Duration,
        cancellation: Cancellation,
    ) -> Self {
        Self {
            handed_off: true,
            ..Self::new(inner, deadline, kind, limit, Some(cancellation))
        }
    }

    #[inline]
    pub(crate) fn unlimited(inner: F) -> Self {
        Self {
            inner: Some(inner),
            deadline: None,
            sleep: None,
            limit: Duration::ZERO,
            kind: Limit::Timeout,
            cancellation: None,
            handed_off: false,
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
        // The response wins a tie with the timer.
        if let Poll::Ready(out) = inner.poll(cx) {
            this.inner.set(None);
            return Poll::Ready(out.map_err(Into::into));
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if *this.handed_off {
            // The progress layer enforcing the deadline closes its tap when
            // it ends, in a poll of `inner`: if the request goes on (work
            // after its answer, a retry), this timer takes over from here.
            let enforced = this
                .cancellation
                .as_ref()
                .is_some_and(|c| !c.request_state().progress_closed());
            if enforced {
                return Poll::Pending;
            }
            *this.handed_off = false;
        }
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let elapsed = Elapsed::new(*this.kind, *this.limit);
        let reason = CancelReason::Timeout(elapsed);
        // Cancelled first: a client transport below, whose future is
        // dropped next, reads the reason from the request's cancellation.
        expire(&reason, this.cancellation.as_ref());
        if this
            .cancellation
            .as_ref()
            .is_some_and(Cancellation::grace_handed)
        {
            // A transport's lifecycle owns the drop and grants a grace: it
            // answers the timeout now and drops the stack after the grace;
            // the inner future is polled on until then.
            *this.deadline = None;
            return Poll::Pending;
        }
        this.inner.set(None);
        Poll::Ready(Err(Box::new(elapsed)))
    }
}

/// The cold path of an expiry: log and fire the token.
#[cold]
#[inline(never)]
fn expire(reason: &CancelReason, cancellation: Option<&Cancellation>) {
    let CancelReason::Timeout(elapsed) = reason else {
        return;
    };
    tracing::debug!(
        request_id = cancellation
            .and_then(|c| c.request_state().request_id())
            .map(tracing::field::display),
        method = cancellation
            .and_then(|c| c.request_state().method())
            .map_or("", |m| m.as_str()),
        %reason,
        elapsed_ms = elapsed.after().as_millis() as u64,
        "request timed out; inner future dropped"
    );
    if let Some(c) = cancellation {
        c.cancel(reason.clone());
    }
}
