//! [`CancelOnDisconnect`]: the service that races its inner service's
//! future against the request's [`Cancellation`](crate::Cancellation).

use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use tower_service::Service;

use crate::cancel::future::ResponseFuture;
use crate::cancel::guard::DisconnectGuard;
use crate::cancel::response::{GuardResponse, Passthrough};
use crate::error::BoxError;
use crate::request::RequestView;
use crate::state::RequestState;

/// Races the inner future against the request's [`Cancellation`](crate::Cancellation), and fires
/// it when the response (future, or body with
/// [`CancelOnDisconnectLayer::http`](super::CancelOnDisconnectLayer::http))
/// is dropped early.
pub struct CancelOnDisconnect<S, G = Passthrough> {
    inner: S,
    _guard: PhantomData<fn() -> G>,
}

impl<S: Clone, G> Clone for CancelOnDisconnect<S, G> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _guard: PhantomData,
        }
    }
}

impl<S: fmt::Debug, G> fmt::Debug for CancelOnDisconnect<S, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelOnDisconnect")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, G> CancelOnDisconnect<S, G> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            _guard: PhantomData,
        }
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

impl<S, G, R> Service<R> for CancelOnDisconnect<S, G>
where
    R: RequestView,
    S: Service<R>,
    S::Error: Into<BoxError>,
    G: GuardResponse<S::Response>,
{
    type Response = G::Output;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, G>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, mut req: R) -> Self::Future {
        let cancellation = match req.cancellation() {
            Some(c) => c.clone(),
            None => {
                let c = RequestState::start(req.request_id(), req.mcp_method());
                req.set_cancellation(c.clone());
                c
            }
        };
        let guard = DisconnectGuard::new(cancellation);
        ResponseFuture::new(self.inner.call(req), guard)
    }
}
