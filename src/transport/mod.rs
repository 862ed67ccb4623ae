//! Transports: stdio and Streamable HTTP, on one request lifecycle.

#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) mod call;
#[cfg(feature = "stdio")]
pub mod stdio;

#[cfg(feature = "http")]
pub mod http;

#[cfg(any(feature = "stdio", feature = "http"))]
pub use call::server::McpService;
