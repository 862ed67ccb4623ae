//! [`TimeoutLayer`]: a deadline per request, by policy.
//!
//! The deadline comes from, in order: a [`RequestTimeout`] the caller put in
//! the request's extensions; the policy's entry for the request's method;
//! the policy's default. `subscriptions/listen` is long-lived by design and
//! exempt unless configured otherwise. `Duration::MAX` (or any duration past
//! what an `Instant` can hold) means no deadline. The timer starts at `call`; a response
//! that is ready in the same poll as the timer wins, as in tower's `Timeout`.
//!
//! On expiry the request's [`Cancellation`](crate::Cancellation), if it has
//! one, is cancelled with the timeout's reason, the inner future is then
//! dropped at once, and the call fails with [`Elapsed`](crate::Elapsed).
//!
//! # The reason of the drop travels in the request's `Cancellation`
//!
//! A client transport below (the stdio and HTTP clients, the rmcp
//! integration's client) tells the peer why its call was dropped by reading
//! the request's `Cancellation`, which this layer cancelled first: the
//! reason holds however the call is driven (a layer between that spawns it,
//! another thread). A request that carries no `Cancellation` has nowhere to
//! hold the reason: **a client stack with only this layer, and no
//! `Cancellation` in the request, tells the peer the generic reason**
//! (`caller dropped`). This layer makes none itself (an allocation per call,
//! needed only when the deadline passes); put one in the request
//! ([`McpRequest::with_cancellation`](crate::McpRequest::with_cancellation))
//! for the peer to hear "timed out". A
//! [`ProgressResetLayer`](crate::ProgressResetLayer) gives a request one, and
//! [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) and the
//! server transports do, so the layers below them are told the reason too.
//!
//! ```
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::{Cancellation, McpRequest, TimeoutLayer};
//! # async fn run<C>(client: C)
//! # where C: tower::Service<McpRequest, Error = tower::BoxError> {
//! // `client`: a `StdioClient`, an `HttpClient`, …
//! let req = McpRequest::new(1, "tools/call").with_cancellation(Cancellation::new());
//! let r = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_secs(30)))
//!     .service(client)
//!     .oneshot(req) // on expiry: notifications/cancelled, "request timed out after 30s"
//!     .await;
//! # let _ = r; }
//! ```
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

mod budget;
pub mod future;
mod layer;
mod policy;

pub use crate::policy::MethodPolicy;
#[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(unused_imports))]
pub(crate) use budget::{inherit_budget, wire_params, BudgetKey};
pub use layer::{Timeout, TimeoutLayer};
pub(crate) use policy::inherited_deadline;
pub use policy::{DeadlineCap, RequestTimeout};
