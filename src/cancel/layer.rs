//! [`CancelOnDisconnectLayer`]: builds [`CancelOnDisconnect`] services.

use std::fmt;
use std::marker::PhantomData;

use tower_layer::Layer;

use crate::cancel::response::{GuardBody, Passthrough};
use crate::cancel::service::CancelOnDisconnect;

/// Applies [`CancelOnDisconnect`] to a service. See the [module docs](crate::cancel).
///
/// `G` decides how far the guard reaches: by default ([`new`](Self::new)) it
/// ends with the response future; [`CancelOnDisconnectLayer::http`] carries
/// it into an `http::Response` body, so that a body dropped before its end
/// fires the token. (`G` is never named: it comes from the constructor.)
pub struct CancelOnDisconnectLayer<G = Passthrough> {
    _guard: PhantomData<fn() -> G>,
}

impl CancelOnDisconnectLayer {
    /// The layer for MCP request services (any [`RequestView`](crate::RequestView) request).
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
        CancelOnDisconnect::new(inner)
    }
}
