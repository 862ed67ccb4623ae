//! Streamable HTTP (protocol revision 2026-07-28), where **closing the
//! response stream is the cancellation** (feature `http`).
//!
//! * [`StreamableHttpService`] — the server adapter: a tower service over
//!   `http::Request<B>` around your MCP request stack, mountable in axum
//!   (`Router::new().route_service("/mcp", …)`) or served by plain hyper. Its
//!   response owns the handler: a client that closes the connection or resets
//!   the stream drops the handler future and fires its token.
//! * [`HttpClient`] — the client: `Service<McpRequest>` on hyper-util's
//!   pooled client (HTTP/1.1, or HTTP/2 with prior knowledge; `https://`
//!   with feature `tls`). Dropping a call closes its response stream, which
//!   is how the server learns of the cancellation. Dual-era: a 2025-era
//!   server is detected and spoken to through its `initialize` session,
//!   where a dropped call also posts `notifications/cancelled`.
//! * [`session`] — opt-in 2025-era sessions on the server
//!   ([`StreamableHttpService::stateful_sessions`]): `initialize`, a session's
//!   `notifications/cancelled` and `DELETE` cancel, bounded.
//! * [`serve`] / [`Server`] — serving it on a `TcpListener` with the
//!   settings a server whose clients cancel needs (HTTP/2 reset allowance,
//!   `TCP_NODELAY`, header read timeout, graceful shutdown).
//! * [`OriginPolicy`] — DNS-rebinding protection, also usable as a
//!   tower-http request validator on other routes.
//! * [`param_headers`] — `x-mcp-header` annotations of tool schemas and the
//!   `Mcp-Param-{Name}` headers they designate ([`ToolHeaderMap`]): the client
//!   learns them from `tools/list` and mirrors arguments, the server checks
//!   the headers against the body.
//!
//! ```
//! use tower::{service_fn, Service, ServiceExt};
//! use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};
//! use tower::BoxError;
//! use tower_mcp_cancel::McpRequest;
//!
//! # #[tokio::main] async fn main() -> Result<(), BoxError> {
//! // A server on a loopback port.
//! let mcp = service_fn(|req: McpRequest| async move {
//!     Ok::<_, BoxError>(serde_json::json!({"resultType": "complete", "echo": req.method()}))
//! });
//! let app = axum::Router::new().route_service("/mcp", StreamableHttpService::new(mcp));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! tokio::spawn(async move { axum::serve(listener, app).await });
//!
//! // A client calling it.
//! let mut client = HttpClient::new(format!("http://{addr}/mcp").parse()?);
//! let result = client.ready().await?.call(McpRequest::without_id("tools/list")).await?;
//! assert_eq!(result["echo"], "tools/list");
//! # Ok(()) }
//! ```
#![doc = include_str!("guide.md")]

//!
//! Inside, the server adapter is a sequence: [`origin`](OriginPolicy) and
//! `validation` (the checks), `handle` (one POST, step by step), `exchange`
//! (the call and its notifications), `response` and `body` (the JSON or
//! SSE shape). The request lifecycle itself — the race, the one outcome,
//! the listen and shutdown answers — is the transports' shared one.

mod body;
pub mod client;
mod config;
mod drain;
mod exchange;
mod handle;
pub(crate) mod headers;
mod origin;
pub mod param_headers;
mod request_body;
mod response;
mod serve;
mod service;
pub mod session;
mod session_endpoint;
mod validation;

pub use body::ResponseBody;
pub use client::{HttpClient, HttpClientBuilder, HttpClientError, ServerEra};
pub use config::StatefulRequests;
pub use origin::OriginPolicy;
pub use param_headers::ToolHeaderMap;
pub use serve::{serve, Server};
pub use service::StreamableHttpService;
pub use session::SessionLimits;
