//! Adapters that bring this crate's layers to servers written with other
//! MCP SDKs, each behind its own cargo feature.
//!
//! * `rmcp` (feature `rmcp`): a wrapper around an rmcp `ServerHandler` (or
//!   any `Service<RoleServer>`) that runs each request through
//!   [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer),
//!   [`TimeoutLayer`](crate::TimeoutLayer) and
//!   [`ProgressResetLayer`](crate::ProgressResetLayer), so that a cancel
//!   drops the handler's future.

#[cfg(feature = "rmcp")]
pub mod rmcp;
