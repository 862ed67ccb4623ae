//! [`TimeoutLayer`]: a deadline per request, by policy.
//!
//! The deadline comes from, in order: a [`RequestTimeout`] the caller put in
//! the request's extensions; for a `tools/call`, the policy's entry for its
//! tool ([`TimeoutLayer::tool`]); the policy's entry for the request's
//! method; the policy's default. `subscriptions/listen` is long-lived by design and
//! exempt unless configured otherwise. `Duration::MAX` (or any duration past
//! what an `Instant` can hold) means no deadline. A deadline the request
//! inherited (a [`DeadlineCap`], a budget from the wire; see
//! [below](#deadlines-that-travel)) caps the result. The timer starts at `call`; a response
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
//! # Deadlines that travel
//!
//! A request's **effective deadline** is the earliest of its
//! `TimeoutLayer` deadlines, its [`ProgressResetLayer`](crate::ProgressResetLayer)
//! hard maximum and a deadline it **inherited** from its caller. Its
//! handler reads it with [`RequestContext::deadline`](crate::RequestContext::deadline)
//! (and [`remaining`](crate::RequestContext::remaining)); it is kept in
//! the request's shared state, behind its [`Cancellation`](crate::Cancellation),
//! so reading it costs no allocation, and a request without any deadline
//! pays nothing for it. (The idle limit, which progress moves, is not a
//! deadline.)
//!
//! **In process, a cap.** A handler that calls another MCP server passes its
//! deadline on with one line: a [`DeadlineCap`] in the downstream
//! request's extensions,
//! [`RequestContext::deadline_cap`](crate::RequestContext::deadline_cap).
//! Every timer layer the downstream request passes enforces
//! `min(own limit, cap)`: unlike [`RequestTimeout`], which replaces the
//! policy and may lengthen it, a cap only ever shortens a deadline. A
//! layer that reads a cap records it in the request's state, so the layers
//! below it and a request sharing its `Cancellation` are capped too,
//! whatever the order of the stack (`Timeout(10 s)` → `ProgressReset` →
//! `Timeout(1 s)` enforces 1 s, and a 500 ms cap over it 500 ms). When the
//! cap is what fires, the error is an [`Elapsed`](crate::Elapsed) with
//! [`Limit::Inherited`](crate::Limit::Inherited) (outcome
//! `timeout_inherited`), not a timeout of the local policy; on a tie the
//! local limit is named.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::{DeadlineCap, Elapsed, Limit, McpRequest, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A downstream client stack with a generous policy…
//! let downstream = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_secs(60)))
//!     .service(service_fn(|_req: McpRequest| async {
//!         tokio::time::sleep(Duration::from_secs(3600)).await;
//!         Ok::<_, tower::BoxError>(serde_json::json!({}))
//!     }));
//! // …called by a handler with 2 s left (in a handler:
//! // `.with_extension(RequestContext::of(&req).deadline_cap())`).
//! let req = McpRequest::new(1, "tools/call")
//!     .with_extension(DeadlineCap::after(Duration::from_secs(2)));
//! let err = downstream.oneshot(req).await.unwrap_err();
//! let elapsed = err.downcast_ref::<Elapsed>().unwrap();
//! assert_eq!((elapsed.limit(), elapsed.after()), (Limit::Inherited, Duration::from_secs(2)));
//! # }
//! ```
//!
//! # On the wire: an opt-in budget in `_meta`
//!
//! Between processes a deadline travels as a **budget**: the time left, in
//! whole milliseconds (rounded down), a JSON integer in the request's
//! `_meta` under a key both sides configure. A client transport with
//! [`StdioClientBuilder::budget_key`] or [`HttpClientBuilder::budget_key`]
//! writes it into each request that has a deadline (a `TimeoutLayer` above
//! it that saw the request's `Cancellation`, a `DeadlineCap`), counted when
//! the request goes on the wire — after whatever it waited for: room in the
//! stdio write queue, `HttpClient`'s fallback handshake, a connection's
//! opening, another attempt —, so the peer never gets more time than is
//! left; a server transport with [`StdioServer::budget_key`] or
//! [`StreamableHttpService::budget_key`]
//! reads it in the same pass over the body that reads the rest of `_meta`,
//! and the request inherits it: its timer layers enforce
//! `min(own policy, budget)`, as a gRPC server does with `grpc-timeout`,
//! and its handler sees it. A missing value, or one that is not a
//! non-negative integer (a string, a fraction, a negative number, an
//! object, a key given twice), is ignored with a debug event; a huge one is
//! clamped; none ever makes a deadline longer than the server's own policy
//! (and a stack without timer layers enforces none, this one included).
//! A budget is relative: the receiver counts it from when it read the
//! request, so its deadline is later than the sender's by the time the
//! request spent on the way.
//!
//! MCP standardizes no such key, so there is no default: the key must not
//! be under a prefix MCP reserves (`io.modelcontextprotocol/`, or any whose
//! second label is `modelcontextprotocol` or `mcp`; the builders panic on
//! one), and both sides must agree on it (the examples use
//! `io.github.tower-mcp-cancel/budgetMs`). The open proposals about
//! timeouts — [SEP-1539, "Timeout Coordination"](https://github.com/modelcontextprotocol/modelcontextprotocol/issues/1539),
//! about how long a responder needs, and the earlier
//! [RFC "Standardize timeouts between servers and clients"](https://github.com/modelcontextprotocol/modelcontextprotocol/pull/1492)
//! — define no per-request budget in `_meta` this could follow; if MCP
//! comes to define one, configure its key.
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
//! [`StreamableHttpService`]
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
//!
//! (In docs built without the `stdio` or `http` feature, the names of
//! that transport's items above link to [`transport`](crate::transport):
//! the items are not in such a build.)
//!
#![cfg_attr(feature = "stdio", doc = concat!(
    "[`StdioClientBuilder::budget_key`]: crate::transport::stdio::StdioClientBuilder::budget_key\n",
    "[`StdioServer::budget_key`]: crate::transport::stdio::StdioServer::budget_key",
))]
#![cfg_attr(not(feature = "stdio"), doc = concat!(
    "[`StdioClientBuilder::budget_key`]: crate::transport\n",
    "[`StdioServer::budget_key`]: crate::transport",
))]
#![cfg_attr(feature = "http", doc = concat!(
    "[`HttpClientBuilder::budget_key`]: crate::transport::http::HttpClientBuilder::budget_key\n",
    "[`StreamableHttpService::budget_key`]: crate::transport::http::StreamableHttpService::budget_key\n",
    "[`StreamableHttpService`]: crate::transport::http::StreamableHttpService",
))]
#![cfg_attr(not(feature = "http"), doc = concat!(
    "[`HttpClientBuilder::budget_key`]: crate::transport\n",
    "[`StreamableHttpService::budget_key`]: crate::transport\n",
    "[`StreamableHttpService`]: crate::transport",
))]

mod budget;
pub mod future;
mod layer;
mod policy;

pub use crate::policy::MethodPolicy;
pub use budget::InvalidBudgetKey;
#[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(unused_imports))]
pub(crate) use budget::{inherit_budget, BudgetKey, WireBudget, WireRequest};
pub use layer::{Timeout, TimeoutLayer};
pub(crate) use policy::inherited_deadline;
pub use policy::{DeadlineCap, RequestTimeout};
