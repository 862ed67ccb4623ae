//! Transports: stdio and Streamable HTTP, on one request lifecycle.
//!
//! Each is behind its feature: `stdio` (the module `stdio`) and `http` (the
//! module `http`; HTTPS for its client with `tls`). Built without one, its
//! module is not there, and the links to its items in these docs lead
//! here.
//!
//! [`LineFilter`], with no feature, is a reader of newline-delimited input
//! that leaves out the lines a check ([`LineCheck`]) refuses: the SDK integrations'
//! `CheckedInput` readers take the notifications their SDK would answer
//! out of a server's stdin with it.
//!
//! # Cooperative grace, then drop
//!
//! By default a cancel drops the handler's future at the moment its token
//! fires, so a handler cannot `await` its own cleanup (kill and reap a
//! child process, roll back a transaction, flush a file). A **grace** lets
//! it: [`StdioServer::grace`] and
//! [`StreamableHttpService::grace`] take a
//! [`MethodPolicy<Duration>`](crate::MethodPolicy) (a default and
//! per-method entries, as the timers do; default zero: today's behaviour,
//! and `subscriptions/listen` never gets one), and a request's own
//! [`Cancellation::set_grace`](crate::Cancellation::set_grace) overrides
//! it ([`Cancellation::grace`](crate::Cancellation::grace) reads it).
//!
//! On every cancel cause — the peer's `notifications/cancelled`, an HTTP
//! disconnect, a 2025 session's cancel or `DELETE`, a `TimeoutLayer` or
//! `ProgressResetLayer` expiry in the stack, the end of input, the
//! shutdown (after the drain grace) — with a grace:
//!
//! 1. the request's token fires at once, with its reason;
//! 2. the wire sees exactly what it sees without a grace, at the same
//!    moment: nothing for a cancelled id; a server-side timeout's error
//!    answer at the deadline, not after the grace; the request's id is
//!    free again (a reused id is accepted) as soon as that went out;
//! 3. the handler's future is polled on for up to the grace, so that
//!    ```text
//!    tokio::select! {
//!        out = work() => out,
//!        _ = token.cancelled() => { cleanup().await; Err(..) }
//!    }
//!    ```
//!    finishes its cleanup; then it is dropped if it has not ended.
//!    Nothing it sends meanwhile reaches the wire (progress,
//!    notifications, its late result), and a
//!    [`ProgressObserver`](crate::ProgressObserver) sees nothing of it.
//!
//! Work in its grace still counts toward the in-flight bounds (stdio's
//! `max_in_flight`, HTTP's `max_in_flight`), and `serve` returns only once
//! it ended. A shutdown does **not** cut a grace short: a request cancelled
//! by the shutdown (after the drain grace) gets its grace like any other,
//! and one already in its grace keeps it, so a shutdown lasts at most the
//! drain grace plus the longest grace. Keep graces short (they are meant
//! for cleanup, not for work) where the orchestrator's termination period
//! is tight.
//!
//! One owner applies the rule: the transports' request lifecycle. The
//! layers that drop a future on their own (`TimeoutLayer` and
//! `ProgressResetLayer` at their expiry, `CancelOnDisconnectLayer` on a
//! cancel) fire the token as always, and, when the request has a grace
//! under a transport, leave the future to the lifecycle instead of
//! dropping it; in a stack without a transport they behave exactly as
//! without a grace. A server-side timeout is then answered by the
//! lifecycle with the limit's error, from the request's cancel reason: a
//! layer of yours that rewrites a `TimeoutLayer`'s error sees no error to
//! rewrite while the request is in its grace.
//!
//! The request span's `mcp.grace` field (`finished` or `dropped`) and the
//! `mcp.server.grace` counter (feature `metrics`) say how each grace ended
//! (see [`observe`](crate::observe)).
//!
#![cfg_attr(
    feature = "stdio",
    doc = "[`StdioServer::grace`]: stdio::StdioServer::grace"
)]
#![cfg_attr(
    not(feature = "stdio"),
    doc = "[`StdioServer::grace`]: crate::transport"
)]
#![cfg_attr(
    feature = "http",
    doc = "[`StreamableHttpService::grace`]: http::StreamableHttpService::grace"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "[`StreamableHttpService::grace`]: crate::transport"
)]

#[cfg(any(feature = "http", all(test, tower_mcp_cancel_loom)))]
pub(crate) mod admission;
#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) mod call;
mod id_member;
mod line_filter;
#[cfg(feature = "stdio")]
#[cfg_attr(docsrs, doc(cfg(feature = "stdio")))]
pub mod stdio;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;

#[cfg(any(feature = "stdio", feature = "http"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "stdio", feature = "http"))))]
pub use call::server::McpService;
pub use id_member::{id_member, IdMember};
pub use line_filter::{LineCheck, LineFilter};

/// The default drain grace of the servers
/// ([`StdioServer::drain_grace`](stdio::StdioServer::drain_grace),
/// [`StreamableHttpService::drain_grace`](http::StreamableHttpService::drain_grace)):
/// none. A shutdown cancels the requests in flight at once (their handler
/// futures dropped, their tokens fired), as it always did.
///
/// Why not a short grace by default: a handler that never ends (or ignores
/// its token while it waits on something) would hold every shutdown for
/// the whole grace, and the right length depends on the deployment — an
/// orchestrator's termination period (Kubernetes: 30 s by default) minus
/// the time the process needs to exit. Set it to that where finished work
/// is worth the wait.
#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) const DEFAULT_DRAIN_GRACE: std::time::Duration = std::time::Duration::ZERO;
