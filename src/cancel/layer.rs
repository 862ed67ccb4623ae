use std::fmt;
use std::marker::PhantomData;
use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use crate::error::BoxError;
use crate::request::RequestView;

use super::future::{DisconnectGuard, ResponseFuture};
use super::{CancelOnDropBody, Cancellation};

/// Applies [`CancelOnDisconnect`] to a service. See the [module docs](crate::cancel).
///
/// `G` decides how far the guard reaches: [`Passthrough`] (the default) ends
/// it with the response future; [`GuardBody`] (from
/// [`CancelOnDisconnectLayer::http`]) carries it into an `http::Response`
/// body, so that a body dropped before its end fires the token.
pub struct CancelOnDisconnectLayer<G = Passthrough> {
    _guard: PhantomData<fn() -> G>,
}

impl CancelOnDisconnectLayer {
    /// The layer for MCP request services (any [`RequestView`] request).
    pub fn new() -> Self {
        Self {
            _guard: PhantomData,
        }
    }

    /// The layer for HTTP services (`http::Request<B>` → `http::Response<B>`):
    /// the token also fires when the response body is dropped before its end.
    ///
    /// ```
    /// use tower::{service_fn, ServiceBuilder};
    /// use tower_mcp_cancel::{Cancellation, CancelOnDisconnectLayer};
    ///
    /// let svc = ServiceBuilder::new()
    ///     .layer(CancelOnDisconnectLayer::http())
    ///     .service(service_fn(|req: http::Request<String>| async move {
    ///         let token = req.extensions().get::<Cancellation>().unwrap().token();
    ///         tokio::spawn(async move { token.cancelled().await; /* stop work */ });
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
    ///     }));
    /// # let _ = svc;
    /// ```
    pub fn http() -> CancelOnDisconnectLayer<GuardBody> {
        CancelOnDisconnectLayer {
            _guard: PhantomData,
        }
    }
}

impl Default for CancelOnDisconnectLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<G> Clone for CancelOnDisconnectLayer<G> {
    fn clone(&self) -> Self {
        Self {
            _guard: PhantomData,
        }
    }
}

impl<G> fmt::Debug for CancelOnDisconnectLayer<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelOnDisconnectLayer").finish()
    }
}

impl<S, G> Layer<S> for CancelOnDisconnectLayer<G> {
    type Service = CancelOnDisconnect<S, G>;
    fn layer(&self, inner: S) -> Self::Service {
        CancelOnDisconnect {
            inner,
            _guard: PhantomData,
        }
    }
}

/// Races the inner future against the request's [`Cancellation`], and fires
/// it when the response (future, or body with [`GuardBody`]) is dropped early.
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
                let c = Cancellation::new();
                req.set_cancellation(c.clone());
                c
            }
        };
        let guard = DisconnectGuard::new(cancellation, req.request_id(), req.mcp_method());
        ResponseFuture::new(self.inner.call(req), guard)
    }
}

/// How [`CancelOnDisconnect`] hands its guard to the response.
pub trait GuardResponse<T> {
    /// The response type after guarding.
    type Output;
    /// Takes over (or ends) the guard for a response that is ready.
    fn guard(response: T, guard: DisconnectGuard) -> Self::Output;
}

/// The response is complete when the future is: the request is marked
/// completed and the response passes through unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Passthrough;

impl<T> GuardResponse<T> for Passthrough {
    type Output = T;
    fn guard(response: T, guard: DisconnectGuard) -> T {
        guard.complete();
        response
    }
}

/// An `http::Response` is complete when its body reached its end: the body is
/// wrapped in a [`CancelOnDropBody`] that fires the token if dropped before.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardBody;

impl<B: http_body::Body> GuardResponse<http::Response<B>> for GuardBody {
    type Output = http::Response<CancelOnDropBody<B>>;
    fn guard(response: http::Response<B>, guard: DisconnectGuard) -> Self::Output {
        response.map(|body| CancelOnDropBody::new(body, guard))
    }
}
