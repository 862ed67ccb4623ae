//! [`ResponseFuture`] of [`CancelOnDisconnect`](super::CancelOnDisconnect):
//! races the handler's future against the request's cancellation.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::cancel::guard::DisconnectGuard;
use crate::cancel::response::GuardResponse;
use crate::error::{BoxError, CancelReason, Cancelled};

pin_project! {
    /// Response future of [`CancelOnDisconnect`](super::CancelOnDisconnect).
    #[project = Projection]
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F, G> {
        #[pin]
        inner: Option<F>,
        // Fields drop in declaration order: on an early drop the handler
        // future goes first, then the guard fires the token, in one drop.
        guard: Option<DisconnectGuard>,
        _g: PhantomData<fn() -> G>,
    }
}

impl<F, G> ResponseFuture<F, G> {
    #[inline]
    pub(crate) fn new(inner: F, guard: DisconnectGuard) -> Self {
        Self {
            inner: Some(inner),
            guard: Some(guard),
            _g: PhantomData,
        }
    }
}

impl<F, G> Projection<'_, F, G> {
    /// Ends a cancelled request: the handler future is dropped (a client
    /// transport below reads why from the request's cancellation, which
    /// already holds the reason), logged, and the guard disarmed.
    #[cold]
    fn cancelled(&mut self, reason: CancelReason) -> BoxError {
        self.inner.set(None);
        let mut guard = self.guard.take().expect("guard present");
        guard.log_cancelled(&reason, "request cancelled; handler future dropped");
        guard.defuse();
        Box::new(Cancelled::new(reason))
    }
}

impl<F, G> Projection<'_, F, G> {
    /// A cancelled request whose drop a transport's lifecycle owns, with a
    /// grace: the handler future is polled on (its token fired, so that it
    /// can clean up) until it ends or the lifecycle drops the stack; its
    /// output is the cancel, whatever the handler returned.
    #[cold]
    fn in_grace<O, T, E>(
        &mut self,
        reason: CancelReason,
        cx: &mut Context<'_>,
    ) -> Poll<Result<O, BoxError>>
    where
        F: Future<Output = Result<T, E>>,
    {
        let Some(inner) = self.inner.as_mut().as_pin_mut() else {
            return Poll::Pending;
        };
        if inner.poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Err(self.cancelled(reason)))
    }
}

impl<F, G, T, E> Future for ResponseFuture<F, G>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    G: GuardResponse<T>,
{
    type Output = Result<G::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(guard) = this.guard.as_ref() else {
            panic!("ResponseFuture polled after completion");
        };
        // The cancel is checked first: once it is processed, the handler is
        // never polled again, so it cannot produce a response after it.
        if let Some(reason) = guard.cancellation().reason().cloned() {
            if guard.cancellation().grace_handed() {
                return this.in_grace(reason, cx);
            }
            return Poll::Ready(Err(this.cancelled(reason)));
        }
        let inner = this
            .inner
            .as_mut()
            .as_pin_mut()
            .expect("inner present while guard is");
        let out = match inner.poll(cx) {
            Poll::Ready(out) => out,
            Poll::Pending => {
                // Only a request that is still running needs waking on a
                // cancel; a cancel that landed while the handler was being
                // polled is seen here.
                return match guard.cancellation().poll_cancelled(cx) {
                    Poll::Ready(_) if guard.cancellation().grace_handed() => Poll::Pending,
                    Poll::Ready(reason) => Poll::Ready(Err(this.cancelled(reason))),
                    Poll::Pending => Poll::Pending,
                };
            }
        };
        this.inner.set(None);
        let guard = this.guard.take().expect("guard present");
        Poll::Ready(match out {
            Ok(res) => Ok(G::guard(res, guard)),
            Err(e) => {
                guard.complete();
                Err(e.into())
            }
        })
    }
}
