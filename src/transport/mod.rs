//! Transports: stdio and Streamable HTTP, on one request lifecycle.

#[cfg(any(feature = "http", all(test, tower_mcp_cancel_loom)))]
pub(crate) mod admission;
#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) mod call;
#[cfg(feature = "stdio")]
pub mod stdio;

#[cfg(feature = "http")]
pub mod http;

#[cfg(any(feature = "stdio", feature = "http"))]
pub use call::server::McpService;

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
