//! Adapters that bring this crate's layers to servers written with other
//! MCP SDKs, each behind its own cargo feature.
//!
//! * `rmcp` (feature `rmcp`): a wrapper around an rmcp `ServerHandler`,
//!   itself a `ServerHandler` (so stdio and rmcp's `StreamableHttpService`
//!   serve it), that runs each request through
//!   [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer),
//!   [`TimeoutLayer`](crate::TimeoutLayer) and
//!   [`ProgressResetLayer`](crate::ProgressResetLayer), so that a cancel
//!   drops the handler's future; and rmcp's client as a tower service.
//! * `tower_mcp` (feature `tower-mcp`): a layer for tower-mcp's transports
//!   that puts its `McpRouter` under the same layers.

#[cfg(any(feature = "rmcp", feature = "tower-mcp"))]
mod progress;
#[cfg(feature = "rmcp")]
pub mod rmcp;
#[cfg(feature = "tower-mcp")]
pub mod tower_mcp;

/// Runs an SDK's call under this crate's layers while `cause` waits for the
/// SDK's own cancel signal (its token, a transport's): the reason `cause`
/// gives cancels `cancellation` (a no-op when a layer cancelled first), and
/// the `CancelOnDisconnectLayer` inside `call` then drops the handler and
/// ends `call` with `Cancelled`. `call` is polled first, so an answer that
/// is ready wins over a cancel that arrives with it.
#[cfg(any(feature = "rmcp", feature = "tower-mcp"))]
async fn run_cancellable<F, C>(call: F, cause: C, cancellation: &crate::Cancellation) -> F::Output
where
    F: std::future::Future,
    C: std::future::Future<Output = crate::CancelReason>,
{
    use std::future::Future;
    use std::task::Poll;
    let forward = async {
        cancellation.cancel(cause.await);
        // Parked for good: `call` ends now, with `Cancelled`.
        std::future::pending::<()>().await
    };
    tokio::pin!(call, forward);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = call.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        let _ = forward.as_mut().poll(cx);
        Poll::Pending
    })
    .await
}
