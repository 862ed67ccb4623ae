//! # tower-mcp-cancel
//!
//! tower middleware that makes Model Context Protocol (revision 2026-07-28)
//! cancellation, timeouts and progress-reset real for any tower service, by
//! one rule: **cancelling a request is dropping its future**.
//!
//! Whatever the signal — a timer, a client that closed its HTTP response
//! stream, a `notifications/cancelled` on stdio, the transport closing — the
//! middleware turns it into a drop of the handler's future, and fires the
//! request's [`CancellationToken`](tokio_util::sync::CancellationToken) for
//! work the handler spawned. On the client side, dropping a request's future
//! becomes the signal the peer expects: the stdio client sends
//! `notifications/cancelled` (with the reason: timeout, maximum, caller
//! dropped, read from the request's [`Cancellation`], which a layer that
//! gives up cancels before it drops the call), the HTTP client closes the
//! response stream.
//!
//! * [`TimeoutLayer`] — a deadline per request: default, per method, per
//!   request ([`RequestTimeout`]); `subscriptions/listen` exempt.
//! * [`ProgressResetLayer`] — an idle limit restarted by (strictly
//!   increasing) progress, and a hard maximum that nothing extends.
//! * [`CancelOnDisconnectLayer`] — the server side: races the handler against
//!   the request's [`Cancellation`], fires it when the response is dropped.
//!
//! The layers talk to each other and to transports through per-request
//! values, reached only through [`RequestView`] accessors: a [`Cancellation`]
//! (the transport's cancel signal and the handler's token), a [`ProgressTap`]
//! (where progress is recorded), a [`RequestTimeout`] (the caller's
//! override). [`McpRequest`] keeps the two hot ones in fields,
//! `http::Request` in its [`http::Extensions`]; a third-party request type
//! implements [`RequestView`] over an [`http::Extensions`] of its own (see
//! [`request`]). Each value is a small public type, so
//! a third-party transport or handler can take part.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder};
//! use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer};
//!
//! // A server stack: cancellation outermost, then a deadline, then the handler.
//! let server = ServiceBuilder::new()
//!     .layer(CancelOnDisconnectLayer::new())
//!     .layer(TimeoutLayer::new(Duration::from_secs(60)).method("tools/call", Duration::from_secs(300)))
//!     .service(service_fn(|req: McpRequest| async move {
//!         Ok::<_, tower::BoxError>(serde_json::json!({"resultType": "complete"}))
//!     }));
//!
//! // A client stack: a hard cap, then an idle limit reset by progress, over a
//! // client transport (here any service).
//! let client = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_secs(300)))
//!     .layer(ProgressResetLayer::new(Duration::from_secs(30)))
//!     .service(service_fn(|req: McpRequest| async move {
//!         Ok::<_, tower::BoxError>(serde_json::json!({}))
//!     }));
//! # let _ = (server, client);
//! ```
//!
//! # Module map
//!
//! Imports run one way, from the wire types up to the transports; each
//! rule of the spec lives in one place. The layers, bottom-up: a module
//! imports only from the rows above its own (`python3 api/imports.py`
//! checks that no two modules import each other, directly or through
//! others). No module imports a transport, and with default features
//! (none) the crate is the layers alone: no HTTP stack, no MCP SDK.
//!
//! Features: `stdio`, `http` (Streamable HTTP on hyper), `tls` (HTTPS for
//! the HTTP client), `tasks` (the tasks extension), `metrics`, `test-util`. The SDK integrations are
//! packages of their own, built on [`integration`]:
//! `tower-mcp-cancel-rmcp` (rmcp's servers and client) and
//! `tower-mcp-cancel-tower-mcp` (tower-mcp's `McpRouter`).
//!
//! | layer | modules | what |
//! | --- | --- | --- |
//! | foundations | `sanitize`, `random`, [`protocol`] | the sanitizer every piece of peer text in a log line or error goes through, and the random ids of sessions and tasks (crate-private); the protocol revisions |
//! | outcomes | [`error`] | [`CancelReason`], [`Elapsed`], [`Cancelled`] |
//! | wire | [`jsonrpc`] | ids, tokens, method names, the message envelope, one-line encoding; the outcomes' JSON-RPC mapping |
//! | per-request state | `state` (private) | one allocation per request behind its two handles, [`Cancellation`] (the cancel state, reason, token and waker) and [`ProgressTap`] (re-exported by [`cancel`] and [`progress`]), with what the layers keep per request: the log labels, the progress layer's limits, the one-timer hand-off between [`TimeoutLayer`] and [`ProgressResetLayer`] |
//! | request | [`request`] | [`McpRequest`], [`RequestView`] |
//! | policy | `policy` (private) | [`MethodPolicy`], the one policy type of both timer layers (re-exported by [`timeout`]) |
//! | cancellation layer | [`cancel`] | [`CancelOnDisconnectLayer`] (guard, future, body, service, layer); the per-connection [`InFlight`](cancel::InFlight) registry |
//! | timer layers | [`timeout`], [`progress`] | [`TimeoutLayer`] and [`ProgressResetLayer`], which cancel the request's [`Cancellation`] with their reason before they drop their inner future |
//! | observability | [`observe`] | [`Outcome`](observe::Outcome), the span fields, the metric names (feature `metrics`); the lifecycle records them |
//! | handler side | [`notify`] | [`RequestContext`]: progress and notifications through the request's outgoing gate, closed at its end |
//! | lifecycle | `transport::call` (private) | one server request from decode to its end (the race, the one outcome, the listen/shutdown answers); the client core (ids, tokens, progress routing, pending calls, cancel-on-drop) |
//! | transports | [`transport::stdio`], [`transport::http`] | framing and the write loop; validation and the JSON-versus-SSE shape; the opt-in 2025-era HTTP sessions; the clients (the HTTP one dual-era) |
//! | tasks | `tasks` (feature `tasks`) | long-running calls as tasks: the server layer (policy, executor, TTL timer, `tasks/*`), the store seam, the client layer that turns a task back into one call; cancelling a task is dropping its future |
//! | for adapters | [`integration`] | what a transport or SDK adapter outside the crate needs to behave as the crate's own: the progress registry, the bridge from an SDK's cancel token to a drop, the one error mapping |
//!
//! Beside them, for tests: `test_util` (feature `test-util`): drop probes
//! (with an awaited drop), a handler recorder (also for handlers that are
//! not `McpRequest` services), `settle`; it imports from the request row
//! and below.
//!
//! Docs built without a feature link its items' names to [`transport`]
//! instead (they are not there); docs.rs shows every item, each marked with
//! the feature it needs.
//!
#![cfg_attr(feature = "stdio", doc = "[`transport::stdio`]: transport::stdio")]
#![cfg_attr(not(feature = "stdio"), doc = "[`transport::stdio`]: transport")]
#![cfg_attr(feature = "http", doc = "[`transport::http`]: transport::http")]
#![cfg_attr(not(feature = "http"), doc = "[`transport::http`]: transport")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// docs.rs (`--cfg docsrs`, see Cargo.toml): each feature-gated item says
// which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod cancel;
pub mod error;
pub mod integration;
pub mod jsonrpc;
pub mod notify;
pub mod observe;
mod policy;
pub mod progress;
pub mod protocol;
#[cfg(any(feature = "http", feature = "tasks"))]
mod random;
pub mod request;
pub(crate) mod sanitize;
mod state;
#[cfg(feature = "tasks")]
#[cfg_attr(docsrs, doc(cfg(feature = "tasks")))]
pub mod tasks;
pub mod timeout;
pub mod transport;
#[cfg(test)]
mod wake_count;

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz;

// The README's code blocks are compiled (and the self-contained ones run)
// as doctests.
#[cfg(all(doctest, feature = "stdio", feature = "http", feature = "tasks"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use cancel::{CancelOnDisconnectLayer, Cancellation};
pub use error::{CancelReason, Cancelled, Elapsed, Limit};
pub use notify::RequestContext;
pub use progress::{Progress, ProgressLimits, ProgressObserver, ProgressResetLayer, ProgressTap};
pub use request::{McpRequest, RequestView};
pub use timeout::{DeadlineCap, MethodPolicy, RequestTimeout, TimeoutLayer};
