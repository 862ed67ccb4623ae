//! The protocol revisions: the one this crate implements and the earlier
//! ones it recognizes. Transport-neutral, so that every client and server
//! takes them from this one place.

/// The protocol revision this crate implements.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// The tasks extension's identifier, which a request declares in its
/// `_meta` client capabilities (public as `tasks::EXTENSION`, feature
/// `tasks`; the stdio client needs it without the feature).
#[cfg(any(feature = "stdio", feature = "tasks"))]
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The earlier revisions recognized as legacy by default (the Streamable
/// HTTP adapter serves them, see
/// [`StatefulRequests`](crate::transport::http::StatefulRequests)).
pub(crate) const LEGACY_VERSIONS: &[&str] =
    &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The `Mcp-Method` request header of the Streamable HTTP transport: the
/// method a request claims before its body is read. The layers over
/// `http::Request` read it (see
/// [`RequestView::mcp_method_checked`](crate::RequestView::mcp_method_checked)
/// for how far they trust it).
pub(crate) const MCP_METHOD_HEADER: http::HeaderName = http::HeaderName::from_static("mcp-method");

/// The `Mcp-Name` request header: the tool (prompt, resource; the task of a
/// `tasks/*` request) a request claims before its body is read. The layers over `http::Request` read a
/// `tools/call`'s tool from it, as a claim like `Mcp-Method`.
pub(crate) const MCP_NAME_HEADER: http::HeaderName = http::HeaderName::from_static("mcp-name");
