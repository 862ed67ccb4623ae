//! Server-side cancellation: [`CancelOnDisconnectLayer`], [`Cancellation`],
//! the per-connection [`InFlight`] registry.
//!
//! The layer races the inner (handler) future against the request's
//! [`Cancellation`]: when the transport cancels it (the peer sent
//! `notifications/cancelled`, the transport closed) the inner future is
//! dropped at once, the token fires, and the call ends with
//! [`Cancelled`](crate::Cancelled), which tells the transport to write
//! nothing for this id. When the layer's own response future is dropped
//! before it completed (the client went away), the token fires with
//! [`CancelReason::ClientDisconnected`](crate::CancelReason::ClientDisconnected).
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::{Cancellation, CancelOnDisconnectLayer, CancelReason, Cancelled, McpRequest};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut svc = ServiceBuilder::new()
//!     .layer(CancelOnDisconnectLayer::new())
//!     .service(service_fn(|req: McpRequest| async move {
//!         // The handler (and anything it spawns) sees the token.
//!         let token = req.cancellation().unwrap().token();
//!         token.cancelled().await;
//!         Ok::<_, tower::BoxError>(serde_json::json!({}))
//!     }));
//!
//! // The transport supplies the cancel signal with the request.
//! let cancellation = Cancellation::new();
//! let req = McpRequest::new(1, "tools/call").with_cancellation(cancellation.clone());
//! let call = svc.ready().await.unwrap().call(req);
//! cancellation.cancel(CancelReason::peer(Some("user pressed stop")));
//! let err = call.await.unwrap_err();
//! assert!(err.is::<Cancelled>());
//! # }
//! ```

//! The files follow tower-http's `on_early_drop`, one concept each, with
//! imports running one way: the guard that fires a
//! cancellation when dropped; the response [`future`] and the guarded body
//! that carry it; how far it reaches (the future only, or an
//! `http::Response` body too); the [`CancelOnDisconnect`] service; its
//! layer. The per-connection [`InFlight`] registry stands beside them, for
//! transports. [`Cancellation`] itself, the cancel state, is defined below
//! the request types (they carry it), with the rest of a request's shared
//! state, and re-exported here.

// The response shapes of the layer (`Passthrough`, `GuardBody`, its
// `CancelOnDropBody`) are `pub` but unnameable: they appear in the layer's
// types, a user never names them.
#[allow(unreachable_pub)]
mod body;
pub mod future;
// Crate-internal too: the request lifecycle (`transport::call`) races its
// own calls with the same guard and future.
pub(crate) mod guard;
mod layer;
mod registry;
#[allow(unreachable_pub)]
mod response;
mod service;

// Defined with the per-request state it is a handle to, below `request`.
pub use crate::state::Cancellation;
pub use layer::CancelOnDisconnectLayer;
pub use registry::{InFlight, InFlightGuard};
pub use service::CancelOnDisconnect;
