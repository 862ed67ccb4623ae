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
