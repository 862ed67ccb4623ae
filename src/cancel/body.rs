//! [`CancelOnDropBody`]: a response body that fires its request's
//! cancellation when dropped before its end.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::cancel::guard::DisconnectGuard;

pin_project! {
    /// A response body that fires its request's
    /// [`Cancellation`](super::Cancellation) with
    /// [`CancelReason::ClientDisconnected`](crate::CancelReason::ClientDisconnected)
    /// when dropped before its end (hyper drops the body when the client
    /// goes away). A body that reached its end fires nothing.
    pub struct CancelOnDropBody<B> {
        #[pin]
        body: B,
        guard: Option<DisconnectGuard>,
    }
}

impl<B> CancelOnDropBody<B> {
    /// Wraps `body` with `guard`.
    pub(crate) fn new(body: B, guard: DisconnectGuard) -> Self
    where
        B: Body,
    {
        // An empty body is never polled: it is complete already.
        let guard = if body.is_end_stream() {
            guard.complete();
            None
        } else {
            Some(guard)
        };
        Self { body, guard }
    }

    fn finish(guard: &mut Option<DisconnectGuard>) {
        if let Some(g) = guard.take() {
            g.complete();
        }
    }
}

impl<B: Body> Body for CancelOnDropBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let out = this.body.as_mut().poll_frame(cx);
        match &out {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => Self::finish(this.guard),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => Self::finish(this.guard),
            _ => {}
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
