//! [`HttpClientBuilder`]: the HTTP client's protocol version, client info,
//! extra headers and known tool schemas.

use std::sync::{Arc, Mutex, RwLock};

use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

use super::connector::{connector, PooledClient, TlsSettings};
use super::era::{EraCell, MAX_PENDING_CANCELS};
use super::{HttpClient, Inner};
use crate::timeout::BudgetKey;
use crate::transport::call::client::{Outbound, Pending};
use crate::transport::http::param_headers::ToolHeaderMap;

/// Configures an [`HttpClient`].
#[derive(Debug)]
pub struct HttpClientBuilder {
    pub(super) uri: Uri,
    pub(super) http2: bool,
    pub(super) protocol_version: String,
    pub(super) client_info: Option<serde_json::Value>,
    pub(super) headers: HeaderMap,
    pub(super) tools: ToolHeaderMap,
    pub(super) relist_on_mismatch: bool,
    pub(super) stateful_fallback: bool,
    pub(super) tls: TlsSettings,
    pub(super) budget_key: Option<BudgetKey>,
    pub(super) connect_timeout: Option<std::time::Duration>,
    pub(super) max_response_bytes: usize,
}

impl HttpClientBuilder {
    /// Whether a `tools/call` refused with `HeaderMismatch` (`-32020`) makes
    /// the client list the tools again and, if that changed the
    /// `Mcp-Param-*` headers the call carries, send it once more (the
    /// spec's SHOULD; default: on). The refused call never reached the
    /// handler, so sending it again cannot run it twice.
    #[must_use]
    pub fn relist_on_header_mismatch(mut self, on: bool) -> Self {
        self.relist_on_mismatch = on;
        self
    }

    /// Whether a server that answers the first (stateless, 2026-07-28)
    /// request with `400 Bad Request` whose body is not a recognized
    /// 2026 error is spoken to in its stateful 2025 revision:
    /// `initialize`, then its session
    /// (default: on; the spec's dual-era client). Off: such answers are
    /// errors. Other refusals are errors either way.
    #[must_use]
    pub fn stateful_fallback(mut self, on: bool) -> Self {
        self.stateful_fallback = on;
        self
    }

    /// Trusts this root certificate (DER) for `https://`, besides the
    /// platform's (feature `tls`): for a private CA or a self-signed test
    /// server. `SSL_CERT_FILE` does the same without code.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    #[must_use]
    pub fn tls_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.tls
            .roots
            .push(rustls::pki_types::CertificateDer::from(der.into()));
        self
    }

    /// How long making a connection may take — name resolution, TCP and,
    /// for `https://`, the TLS handshake — before the call fails with
    /// [`HttpClientError::ConnectionFailed`](super::HttpClientError::ConnectionFailed)
    /// (`is_connect`); `None` waits as long as the system does (default
    /// 10 s). A server that accepts and never completes the handshake does
    /// not hold a call. The request itself is not bounded by it: that is
    /// the caller's layers' job. Any value is accepted (a huge one is
    /// "never").
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest answer read from the server (default 64 MiB; at least
    /// 1): a JSON body, or one event of an SSE stream (the bytes received
    /// without an event's end; a stream of many small events is not
    /// bounded by it), in both eras. A larger one is not buffered (a body
    /// whose declared length is larger is not read at all): the call
    /// fails with [`HttpClientError::ResponseTooLarge`](super::HttpClientError::ResponseTooLarge),
    /// which names the limit, and its stream is closed; other calls are
    /// unaffected.
    #[must_use]
    pub fn max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes.max(1);
        self
    }

    /// Speak HTTP/2 without upgrade (prior knowledge, `h2c`), one stream per
    /// request over a shared connection.
    #[must_use]
    pub fn http2_prior_knowledge(mut self) -> Self {
        self.http2 = true;
        self
    }

    /// The protocol version sent in `MCP-Protocol-Version` and `_meta`
    /// (default `2026-07-28`).
    #[must_use]
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = version.into();
        self
    }

    /// The `io.modelcontextprotocol/clientInfo` sent with each request
    /// (default: this crate's name and version).
    #[must_use]
    pub fn client_info(mut self, name: &str, version: &str) -> Self {
        self.client_info = Some(serde_json::json!({ "name": name, "version": version }));
        self
    }

    /// Sends no `clientInfo`.
    #[must_use]
    pub fn without_client_info(mut self) -> Self {
        self.client_info = None;
        self
    }

    /// An extra header on every request (e.g. `Authorization`). The
    /// headers the transport writes itself (`Content-Type`, `Accept`,
    /// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`,
    /// `Mcp-Session-Id`) are not taken (logged at `warn`): a second copy
    /// of one would make the server refuse the request.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        if transport_owned(&name) {
            tracing::warn!(header = %name, "extra header ignored: the transport writes it");
        } else {
            self.headers.append(name, value);
        }
        self
    }

    /// Registers a tool's `inputSchema` by hand, so its `x-mcp-header`
    /// parameters are mirrored without a `tools/list` first. An invalid
    /// annotation is logged (`warn`) and the tool left unregistered; use
    /// [`param_headers`](Self::param_headers) with a [`ToolHeaderMap`] to
    /// see the error.
    #[must_use]
    pub fn tool_schema(mut self, tool: &str, input_schema: &serde_json::Value) -> Self {
        if let Err(e) = self.tools.insert(tool, input_schema) {
            tracing::warn!(tool = %crate::sanitize::for_log(tool), reason = %e, "tool definition rejected: invalid x-mcp-header annotation");
        }
        self
    }

    /// Starts from these tools' annotations (a later `tools/list` adds to
    /// and replaces them).
    #[must_use]
    pub fn param_headers(mut self, tools: ToolHeaderMap) -> Self {
        self.tools = tools;
        self
    }

    /// Writes each request's remaining budget into its `_meta[key]`, as a
    /// JSON integer of milliseconds (rounded down), for a server that
    /// honours it with the same key. The budget is the time left until the
    /// request's deadline as its stack knows it: a
    /// [`TimeoutLayer`](crate::TimeoutLayer) above the client (with a
    /// [`Cancellation`](crate::Cancellation) in the request, where it
    /// offers its deadline), an inherited
    /// [`DeadlineCap`](crate::DeadlineCap); a request without one is sent
    /// as it is. Off by default: MCP standardizes no such key; see the
    /// [timeout module](crate::timeout#on-the-wire-an-opt-in-budget-in-_meta).
    ///
    /// # Errors
    ///
    /// [`InvalidBudgetKey`](crate::timeout::InvalidBudgetKey) if `key` is
    /// empty or under a `_meta` prefix MCP reserves
    /// (`io.modelcontextprotocol/`, `dev.mcp/`, …; it defines no budget
    /// key); the setting is then left as it was.
    pub fn budget_key(
        mut self,
        key: impl Into<String>,
    ) -> Result<Self, crate::timeout::InvalidBudgetKey> {
        self.budget_key = Some(BudgetKey::new(key)?);
        Ok(self)
    }

    /// Builds the client.
    pub fn build(self) -> HttpClient {
        let mut builder = Client::builder(TokioExecutor::new());
        if self.http2 {
            builder.http2_only(true);
        }
        let connector = connector(&self.uri, self.tls);
        HttpClient {
            inner: Arc::new(Inner {
                client: PooledClient::new(&builder, connector, self.connect_timeout),
                uri: self.uri,
                protocol_version: self.protocol_version,
                client_info: self.client_info,
                headers: self.headers,
                outbound: Outbound::new(),
                in_flight: Arc::new(Mutex::new(Pending::new())),
                tools: RwLock::new(self.tools),
                relist_on_mismatch: self.relist_on_mismatch,
                era: EraCell::new(self.stateful_fallback),
                pending_cancels: Arc::new(Semaphore::new(MAX_PENDING_CANCELS)),
                budget_key: self.budget_key,
                max_response_bytes: self.max_response_bytes,
            }),
        }
    }
}

/// Whether the transport writes header `name` on its requests.
fn transport_owned(name: &HeaderName) -> bool {
    use crate::transport::http::headers::{
        MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER,
    };
    // Header names are lower case: compared as they are.
    *name == http::header::CONTENT_TYPE
        || *name == http::header::ACCEPT
        || *name == MCP_PROTOCOL_VERSION_HEADER
        || *name == MCP_METHOD_HEADER
        || *name == MCP_NAME_HEADER
        || *name == MCP_SESSION_ID_HEADER
        || name.as_str().starts_with("mcp-param-")
}
