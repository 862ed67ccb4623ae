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

/// The JSON-RPC error for a call an integration's layers failed: an
/// [`Elapsed`](crate::Elapsed) with its limit, a
/// [`Cancelled`](crate::Cancelled) as an internal error saying why,
/// anything else as an internal error carrying its message.
#[cfg(any(feature = "rmcp", feature = "tower-mcp"))]
fn error_object(error: &(dyn std::error::Error + 'static)) -> crate::jsonrpc::ErrorObject {
    use crate::jsonrpc::ErrorObject;
    if let Some(e) = error.downcast_ref::<crate::Elapsed>() {
        return e.to_error_object();
    }
    let message = match error.downcast_ref::<crate::Cancelled>() {
        Some(c) => format!("request cancelled: {}", c.reason()),
        None => error.to_string(),
    };
    ErrorObject::new(ErrorObject::INTERNAL_ERROR, message)
}
