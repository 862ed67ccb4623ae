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
//! [`CancelReason::ClientDisconnected`].
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
//!         Ok::<_, tower_mcp_cancel::BoxError>(serde_json::json!({}))
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

mod body;
mod cancellation;
mod future;
mod layer;
mod reason;
mod registry;

pub use body::CancelOnDropBody;
pub use cancellation::Cancellation;
pub use future::{DisconnectGuard, ResponseFuture};
pub use layer::{
    CancelOnDisconnect, CancelOnDisconnectLayer, GuardBody, GuardResponse, Passthrough,
};
pub use reason::{
    current_drop_reason, drop_with_reason, sanitize_reason, with_drop_reason, CancelReason,
    MAX_REASON_CHARS,
};
pub use registry::{CancelOutcome, DuplicateId, InFlight, InFlightGuard};
