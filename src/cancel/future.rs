use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::{Method, RequestId};

use super::layer::GuardResponse;
use super::{current_drop_reason, with_drop_reason, CancelReason, Cancellation};

/// Fires a request's [`Cancellation`] with
/// [`CancelReason::ClientDisconnected`] if dropped while armed; completes it
/// when the response reached its end.
///
/// If the drop happens inside a [`drop_with_reason`](super::drop_with_reason) scope (a limit fired
/// above), that reason is used instead.
///
/// The guard reads no clock: the timer layers log how long a request ran
/// when they end it, and a disconnect is logged with its id and method.
pub struct DisconnectGuard {
    cancellation: Cancellation,
    id: Option<RequestId>,
    method: Option<Method>,
    armed: bool,
}

impl DisconnectGuard {
    /// An armed guard for a request.
    pub fn new(cancellation: Cancellation, id: Option<RequestId>, method: Option<Method>) -> Self {
        Self {
            cancellation,
            id,
            method,
            armed: true,
        }
    }

    /// The request's cancellation.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// The response reached its end: the request completed, later cancels
    /// are no-ops, and dropping the guard fires nothing.
    pub fn complete(mut self) {
        self.disarm();
    }

    pub(crate) fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            self.cancellation.complete();
        }
    }

    pub(crate) fn log_cancelled(&self, reason: &CancelReason, what: &'static str) {
        tracing::info!(
            request_id = self.id.as_ref().map(tracing::field::display),
            method = self.method.as_deref().unwrap_or(""),
            %reason,
            "{what}"
        );
    }
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let reason = current_drop_reason().unwrap_or(CancelReason::ClientDisconnected);
        if self.cancellation.cancel(reason.clone()) {
            self.log_cancelled(&reason, "request dropped before completion; token fired");
        }
    }
}

impl std::fmt::Debug for DisconnectGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DisconnectGuard")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("armed", &self.armed)
            .finish()
    }
}

pin_project! {
    /// Response future of [`CancelOnDisconnect`](super::CancelOnDisconnect).
    #[project = Projection]
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
    /// Ends a cancelled request: the handler future is dropped (inside the
    /// reason's scope, so a client transport below knows why), logged, and
    /// the guard disarmed (the cancellation already holds the outcome).
    #[cold]
    fn cancelled(&mut self, reason: CancelReason) -> BoxError {
        with_drop_reason(&reason, || self.inner.set(None));
        let mut guard = self.guard.take().expect("guard present");
        guard.log_cancelled(&reason, "request cancelled; handler future dropped");
        guard.armed = false;
        Box::new(Cancelled::new(reason))
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
