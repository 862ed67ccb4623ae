//! [`TimeoutLayer`]: a deadline per request, by policy.
//!
//! The deadline comes from, in order: a [`RequestTimeout`] the caller put in
//! the request's extensions; the policy's entry for the request's method;
//! the policy's default. `subscriptions/listen` is long-lived by design and
//! exempt unless configured otherwise. `Duration::MAX` (or any duration past
//! what an `Instant` can hold) means no deadline. The timer starts at `call`; a response
//! that is ready in the same poll as the timer wins, as in tower's `Timeout`.
//!
//! On expiry the inner future is dropped at once (with the reason visible to
//! it, so a client transport below sends `notifications/cancelled` saying
//! "timeout"), the request's [`Cancellation`](crate::Cancellation), if it has
//! one, fires, and the call fails with [`Elapsed`](crate::Elapsed).
//!
//! # One timer per request
//!
//! A [`ProgressResetLayer`](crate::ProgressResetLayer) below this layer runs
//! a timer for its own limits anyway. When the request has a
//! [`Cancellation`](crate::Cancellation) (under
//! [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer), or from a
//! transport), this layer offers its deadline there and the progress layer
//! takes it into its timer: the request in flight runs one timer, and the
//! outcome is the same `Elapsed` (limit [`Limit::Timeout`](crate::Limit))
//! and cancel reason, passed up through this layer. The hand-off records
//! which deadline was taken: this layer does without its own timer only
//! when a progress layer called within its `call` took a deadline no later
//! than its own, so a shorter deadline further down (another `TimeoutLayer`
//! below the progress layer) is still enforced, and a tie is named by the
//! innermost limit, as with separate timers. If the request goes on after
//! that progress layer ended (a layer between works on after its answer,
//! or calls again, as a retry does), this layer's own timer takes over, at
//! the same deadline. When nothing below takes it (no progress layer, one
//! above this layer, or a layer between that calls its inner service
//! later, such as a `Buffer`), this layer runs its own timer.
//!
//! # Over `http::Request`: the method must be checked to earn more time
//!
//! The deadline is chosen at `call`, before anything has read the body. Over
//! an `http::Request` the method then is a [`Method`](crate::jsonrpc::Method)
//! in the extensions, if server code that read the body put one there, or
//! else the `Mcp-Method` header, which is only the client's claim. A claimed
//! method may pick a *shorter* per-method deadline than the default, never a
//! longer one or an exemption: a `tools/call` labelled
//! `subscriptions/listen` gets the default deadline, around
//! [`StreamableHttpService`](crate::transport::http::StreamableHttpService)
//! as around a plain axum handler. For deadlines by the method the body
//! really carries, put the layer inside the adapter, over
//! [`McpRequest`](crate::McpRequest), where the method comes from the
//! checked body. (Around the adapter, the deadline covers the response head;
//! an SSE body that follows is not timed.)
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::{Elapsed, Limit, McpRequest, RequestTimeout, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let mut svc = ServiceBuilder::new()
//!     .layer(
//!         TimeoutLayer::new(Duration::from_secs(10))
//!             .method("tools/call", Duration::from_secs(300)),
//!     )
//!     .service(service_fn(|_req: McpRequest| async {
//!         tokio::time::sleep(Duration::from_secs(60)).await;
//!         Ok::<_, tower::BoxError>(serde_json::json!({}))
//!     }));
//!
//! // tools/list gets the 10 s default.
//! let err = svc.ready().await.unwrap().call(McpRequest::new(1, "tools/list")).await.unwrap_err();
//! let elapsed = err.downcast_ref::<Elapsed>().unwrap();
//! assert_eq!((elapsed.limit(), elapsed.after()), (Limit::Timeout, Duration::from_secs(10)));
//!
//! // This one call allows 1 s only.
//! let req = McpRequest::new(2, "tools/call").with_extension(RequestTimeout::after(Duration::from_secs(1)));
//! let err = svc.ready().await.unwrap().call(req).await.unwrap_err();
//! assert_eq!(err.downcast_ref::<Elapsed>().unwrap().after(), Duration::from_secs(1));
//! # }
//! ```

pub mod future;
mod layer;
mod policy;

pub use crate::policy::MethodPolicy;
pub use layer::{Timeout, TimeoutLayer};
pub use policy::RequestTimeout;
