//! [`HttpClient`]: the Streamable HTTP client as a tower service.
//!
//! Each request is its own POST with the headers the spec requires
//! (`Accept`, `Content-Type`, `MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name` with the Base64 sentinel encoding when needed). The answer is
//! read in either shape: a JSON body, or an SSE stream (parsed with the
//! `sse-stream` crate) whose `notifications/progress` are recorded in the
//! request's [`ProgressTap`](crate::ProgressTap), so a [`ProgressResetLayer`](crate::ProgressResetLayer)
//! above sees them, and whose final response ends the call. A caller's
//! [`ProgressObserver`](crate::ProgressObserver) sees them without that layer
//! too: a request carrying an observer and no progress token is given one.
//!
//! **Dropping the call's future is the cancellation**: it drops the response
//! stream, which closes it — on HTTP/1.1 the connection is closed and not
//! reused, on HTTP/2 the stream is reset — and nothing else is posted.
//! A [`TimeoutLayer`](crate::TimeoutLayer) or
//! [`ProgressResetLayer`](crate::ProgressResetLayer) above therefore cancels
//! per spec when its limit fires.
//!
//! **`x-mcp-header`**: the client learns each tool's annotations from the
//! `tools/list` results that pass through it (per client; clones share
//! them). A tool whose annotations break the spec's constraints is removed
//! from the result the caller gets, with a `warn` naming the tool and the
//! reason; for the others, each `tools/call` carries the present, non-null
//! annotated arguments in `Mcp-Param-{Name}` headers (Base64 sentinel when
//! needed). Schemas can also be given by hand
//! ([`HttpClientBuilder::tool_schema`], [`HttpClient::register_tool_schema`]).
//! When a `tools/call` is refused with `HeaderMismatch` (`-32020`), the
//! client lists the tools again and, if that changed the headers the call
//! carries, sends it once more (the spec's SHOULD;
//! [`HttpClientBuilder::relist_on_header_mismatch`] turns it off); otherwise
//! the error comes back as that [`ErrorObject`](crate::jsonrpc::ErrorObject).
//!
//! ```no_run
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::transport::http::HttpClient;
//! use tower_mcp_cancel::{McpRequest, ProgressResetLayer, TimeoutLayer};
//!
//! # #[tokio::main] async fn main() -> Result<(), tower_mcp_cancel::BoxError> {
//! let http = HttpClient::new("http://127.0.0.1:8080/mcp".parse()?);
//! let mut client = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new(Duration::from_secs(300)))     // hard cap
//!     .layer(ProgressResetLayer::new(Duration::from_secs(30))) // idle, reset by progress
//!     .service(http);
//! let req = McpRequest::without_id("tools/call")
//!     .with_params(serde_json::json!({"name": "slow", "arguments": {"steps": 5}}));
//! let result = client.ready().await?.call(req).await?;
//! println!("{result}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use tower_service::Service;
use tracing::Instrument;

use crate::error::BoxError;
use crate::jsonrpc::RequestId;
use crate::observe::{Era, Transport};
use crate::protocol::PROTOCOL_VERSION;
use crate::transport::call::client::{Abandon, CallGuard, Outbound, ResponseFuture};
use crate::transport::http::param_headers::{InvalidParamHeader, ToolHeaderMap};
use crate::{CancelReason, McpRequest};

mod builder;
mod error;
mod request;
mod response;
mod tools;

pub use builder::HttpClientBuilder;
pub use error::HttpClientError;
#[cfg(feature = "fuzzing")]
pub(crate) use response::read_response;

use request::{exchange, prepare};
use tools::{is_header_mismatch, learn_tools, param_headers_of, Retry};

pub mod future {
    //! The response future of [`HttpClient`](super::HttpClient).

    pub use crate::transport::call::client::ResponseFuture;
}

struct Inner {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    protocol_version: String,
    client_info: Option<serde_json::Value>,
    headers: HeaderMap,
    outbound: Outbound,
    tools: RwLock<ToolHeaderMap>,
    relist_on_mismatch: bool,
}

impl Inner {
    fn tools(&self) -> RwLockReadGuard<'_, ToolHeaderMap> {
        self.tools.read().unwrap_or_else(|e| e.into_inner())
    }

    fn tools_mut(&self) -> RwLockWriteGuard<'_, ToolHeaderMap> {
        self.tools.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The Streamable HTTP client: `Service<McpRequest, Response = serde_json::Value>`.
/// See the [module docs](self). Clones share the connection pool and the id
/// counter.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("uri", &self.inner.uri)
            .field("protocol_version", &self.inner.protocol_version)
            .finish()
    }
}
impl HttpClient {
    /// A client for the MCP endpoint `uri` (`http://…`), over HTTP/1.1.
    pub fn new(uri: Uri) -> Self {
        Self::builder(uri).build()
    }

    /// A builder for the MCP endpoint `uri`.
    pub fn builder(uri: Uri) -> HttpClientBuilder {
        HttpClientBuilder {
            uri,
            http2: false,
            protocol_version: PROTOCOL_VERSION.to_owned(),
            client_info: Some(serde_json::json!({
                "name": env!("CARGO_PKG_NAME"),
                "version": env!("CARGO_PKG_VERSION"),
            })),
            headers: HeaderMap::new(),
            tools: ToolHeaderMap::new(),
            relist_on_mismatch: true,
        }
    }

    /// The endpoint.
    pub fn uri(&self) -> &Uri {
        &self.inner.uri
    }

    /// Registers (or replaces) a tool's `inputSchema`, whose `x-mcp-header`
    /// parameters are then mirrored on `tools/call`. An invalid schema is
    /// refused and forgets what was known of the tool.
    pub fn register_tool_schema(
        &self,
        tool: &str,
        input_schema: &serde_json::Value,
    ) -> Result<(), InvalidParamHeader> {
        self.inner.tools_mut().insert(tool, input_schema)
    }

    /// A copy of what the client knows of the tools' `x-mcp-header`
    /// annotations.
    pub fn param_headers(&self) -> ToolHeaderMap {
        self.inner.tools().clone()
    }
}

impl Service<McpRequest> for HttpClient {
    type Response = serde_json::Value;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: McpRequest) -> ResponseFuture {
        let inner = self.inner.clone();
        // Each call is its own stream: neither its id nor its progress
        // token need avoid others' (a caller's observer without a
        // ProgressResetLayer above gets a token here).
        let id = inner.outbound.assign_id(&mut req, |_| false);
        let route = inner.outbound.route(&mut req, |_| false);
        // Everything that needs the request is done before the future, so
        // the future holds only what it sends and where progress goes (and,
        // for a tools/call, the request, in case it must be sent again).
        let prepared = prepare(&inner, &id, &req);
        let is_tools_list = req.method() == "tools/list";
        let era = if crate::protocol::LEGACY_VERSIONS.contains(&inner.protocol_version.as_str()) {
            Era::Legacy
        } else {
            Era::Modern
        };
        let mut call = CallGuard::new(id.clone(), &req, CloseStream, Transport::Http, Some(era));
        let span = call.span();
        // What a second attempt after a HeaderMismatch needs: the request
        // (to mirror its arguments again), the headers first sent, and the
        // progress route.
        let retry = (inner.relist_on_mismatch && req.method() == "tools/call").then(|| Retry {
            sent: prepared.as_ref().map(param_headers_of).unwrap_or_default(),
            route: route.clone(),
            req,
        });
        ResponseFuture::new(
            async move {
                let http_req = match prepared {
                    Ok(r) => r,
                    Err(e) => {
                        let e: BoxError = e.into();
                        let out = Err(e);
                        call.finish(&out);
                        return out;
                    }
                };
                let mut out = exchange(&inner, http_req, &id, route).await;
                if let Some(retry) = retry {
                    if is_header_mismatch(&out) {
                        if let Some(again) = retry.again(&inner, &id).await {
                            out = again;
                        }
                    }
                }
                call.finish(&out);
                if is_tools_list {
                    if let Ok(result) = out.as_mut() {
                        learn_tools(&inner, result);
                    }
                }
                out
            }
            .instrument(span),
        )
    }
}

struct CloseStream;

impl Abandon for CloseStream {
    fn abandon(&mut self, _id: &RequestId) -> Option<&'static str> {
        Some("closing its HTTP response stream")
    }

    fn cancel(&mut self, _id: &RequestId, _reason: CancelReason) {}
}
