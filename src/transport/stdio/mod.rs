//! The stdio transport (feature `stdio`): newline-delimited JSON-RPC over a
//! child's stdin/stdout, or over any `AsyncRead`/`AsyncWrite` pair.
//!
//! * Server: [`serve_stdio`] (this process's stdin/stdout), or
//!   [`StdioServer`] to configure it and to serve any reader/writer pair,
//!   drives a request service — typically your layer stack — over one
//!   connection. [`process_streams`] hands this process's stdin and stdout
//!   to any other stdio transport (an SDK's) as `serve_stdio` uses them:
//!   through the reactor when they are pipes or sockets.
//! * Client: [`StdioClient`], a `tower::Service<McpRequest>` over a spawned
//!   child process or a stream pair; stack
//!   [`TimeoutLayer`](crate::TimeoutLayer) and
//!   [`ProgressResetLayer`](crate::ProgressResetLayer) over it.
//!
//! Both ends keep the rule **cancelling a request is dropping its future**:
//! a client future dropped before its response becomes a
//! `notifications/cancelled` line (with the reason its request's
//! [`Cancellation`](crate::Cancellation) was cancelled with, by a layer that
//! gave up or by the caller; `caller dropped` without one), and that
//! line on the server drops the handler's future and fires its token.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
//! use tower::BoxError;
//! use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // An in-memory pipe in each direction.
//! let (client_io, server_io) = tokio::io::duplex(64 * 1024);
//! let (server_read, server_write) = tokio::io::split(server_io);
//! let (client_read, client_write) = tokio::io::split(client_io);
//!
//! let server = ServiceBuilder::new()
//!     .layer(CancelOnDisconnectLayer::new())
//!     .service(service_fn(|req: McpRequest| async move {
//!         if req.method() == "slow" {
//!             tokio::time::sleep(Duration::from_secs(3600)).await; // never checks a token
//!         }
//!         Ok::<_, BoxError>(serde_json::json!({"resultType": "complete", "method": req.method()}))
//!     }));
//! let served = tokio::spawn(StdioServer::new().serve(server, server_read, server_write));
//!
//! let client = StdioClient::new(client_read, client_write);
//! let res = client.clone().oneshot(McpRequest::without_id("ping")).await.unwrap();
//! assert_eq!(res["method"], "ping");
//!
//! // A 50 ms deadline: the client drops its future and sends
//! // notifications/cancelled; the server drops the handler's future.
//! let err = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_millis(50)))
//!     .service(client.clone())
//!     .oneshot(McpRequest::without_id("slow"))
//!     .await
//!     .unwrap_err();
//! assert!(err.is::<tower_mcp_cancel::Elapsed>());
//!
//! // Closing the client closes the server's input: `serve` returns.
//! client.shutdown().await.unwrap();
//! served.await.unwrap().unwrap();
//! # }
//! ```
//!
//! # Server behaviour
//!
//! * Framing: one message per line; a line longer than the limit (default
//!   4 MiB) is discarded up to its newline without being held and answered
//!   with `-32600` (with the request's id, read as the line went by, so
//!   that the client's call ends; also during the drain); a
//!   line that is not JSON with `-32700`; an invalid message with `-32600`.
//!   These errors carry the request's id when it could be read, and no id
//!   otherwise. The connection keeps serving. Blank lines are ignored.
//! * Requests run concurrently, each registered in the connection's
//!   [`InFlight`](crate::cancel::InFlight) registry. The reader polls each new
//!   request once: one that is ready then is answered without a task of
//!   its own (its answer joins those of the other requests read in the
//!   same go, written together); one still pending goes on in its own
//!   task. Once handlers are seen to compute before their first `.await`,
//!   the requests that follow go straight to their own tasks for a while,
//!   so that such handlers run in parallel.
//!   [`StdioServer::first_poll_on_reader`] turns that first poll off, for
//!   handlers that must run in their own task only. A second request
//!   with an id that is in flight is answered with `-32600`. `"1"` and `1`
//!   are different ids; `0` is an ordinary one. At most
//!   [`StdioServer::max_in_flight`] requests (default 1024) run at once;
//!   one more is answered with `-32603` at once, and reading goes on.
//! * `notifications/cancelled` for an in-flight id cancels it: the driver
//!   drops the service future at once (it races it against the request's
//!   [`Cancellation`](crate::Cancellation) itself, so this holds without a
//!   [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) too), its
//!   token fires, and nothing more is written for that id: no response, and
//!   queued progress is dropped unsent by the writer. Cancellations for
//!   unknown, finished or not yet arrived ids, and malformed ones, are
//!   ignored (debug log); an early cancel does not affect a later request.
//! * Other client notifications and any responses are ignored (debug log).
//! * End of input cancels every in-flight request
//!   ([`CancelReason::TransportClosed`](crate::CancelReason::TransportClosed))
//!   and `serve` returns as soon as their tasks ended.
//! * One writer task drains a bounded queue: a peer that stops reading
//!   blocks handlers sending progress (and the reader) instead of growing
//!   memory. It flushes when the queue runs dry; while handlers that
//!   compute briefly keep several spawned requests running, it first holds
//!   an answer for a few more, so that they share one write (and the peer
//!   one wake-up). **An answer waits at most 100 µs for a write shared
//!   with others**, on tokio's clock: the hold ends once those few are
//!   together, at the first poll of one of the connection's tasks (the
//!   reader, a request) to end 100 µs or more after it began, whatever
//!   order the runtime polls them in — that task wakes the writer as an
//!   answer does — or sooner, when the worker has nothing else to run. So a held answer
//!   is written no later than one finished 100 µs after it would be without
//!   the hold. (Should tasks outside the connection keep the worker busy,
//!   the hold ends when the worker next looks at its timers, as a timer
//!   would.) A server that is not busy, and handlers that compute longer,
//!   are answered at once. **Answers wait at most 100 µs for the reader
//!   too**: a reader with input to spare would otherwise keep its worker
//!   until the input runs dry, so after each line it looks at the writer's
//!   queue and, once something has waited there 100 µs, ends its poll at
//!   that line so the writer runs first (on either runtime flavour, in the
//!   drain too); what the writer then finds is written without a hold.
//! * [`StdioServer::shutdown`]: when its token fires, every in-flight
//!   request is cancelled ([`CancelReason::Shutdown`](crate::CancelReason::Shutdown)),
//!   reading stops, and `serve` returns once their tasks ended and the
//!   queued messages are written; only listen streams are answered (below).
//!   With a [`StdioServer::drain_grace`] (shutdown and end of input alike),
//!   listen streams get their graceful result at once, other requests may
//!   finish within the grace, new ones are answered `-32603` ("server
//!   shutting down"), and only what still runs after it is cancelled.
//! * A deadline inside the stack (a server-side `TimeoutLayer`) is answered
//!   with its error: the driver writes nothing only when the cancel came from
//!   the transport (peer, end of input, shutdown).
//!
//! ## `subscriptions/listen`
//!
//! The spec (subscriptions, cancellation) has the server end a listen stream
//! with a **graceful result**, and send `notifications/cancelled` referencing
//! the listen id only to tear the stream down; it never sends
//! `notifications/cancelled` for anything else. The driver does exactly:
//!
//! | how the listen request ends | what is written |
//! | --- | --- |
//! | the handler returns `Ok(result)` | the result, with `resultType: "complete"` and `_meta["io.modelcontextprotocol/subscriptionId"]` added if absent |
//! | the [`StdioServer::shutdown`] token fires | the graceful result `{"resultType":"complete","_meta":{subscriptionId}}` |
//! | the stack ends it as [`Cancelled`](crate::Cancelled) without a client cancel (the server tore it down, no result) | `notifications/cancelled` with the listen id and the reason |
//! | the handler returns an error | the error response |
//! | the client's `notifications/cancelled`, or end of input | nothing |
//!
//! # Client behaviour
//!
//! See [`StdioClient`].

mod client;
pub(crate) mod framing;
mod process;
mod schedule;
mod server;
#[cfg(unix)]
mod std_io;
mod writer;

pub use client::{StdioClient, StdioClientBuilder};
pub use process::{process_streams, ProcessStdin, ProcessStdout};
#[cfg(all(test, feature = "http"))]
pub(crate) use server::DEFAULT_MAX_IN_FLIGHT;
pub use server::{serve_stdio, StdioServer};
pub(crate) use server::{DEFAULT_MAX_LINE_BYTES, DEFAULT_WRITE_QUEUE};
