//! One rmcp request as the layers see it: [`RmcpRequest`], a
//! [`RequestView`] over rmcp's `ClientRequest` and `RequestContext`
//! (method, a `tools/call`'s tool name, id, progress token).

use ::rmcp::model::NumberOrString;
use ::rmcp::service::RequestContext;
use ::rmcp::RoleServer;
use http::Extensions;
use tokio::time::Instant;

use tower_mcp_cancel::jsonrpc::{Method, ProgressToken, RequestId};
use tower_mcp_cancel::{Cancellation, RequestView};

/// An rmcp request on its way through the layers to the handler: its
/// method, the context rmcp built for it (whose `ct` is replaced by the
/// [`Cancellation`]'s token), and the layers' per-request state. (The
/// request's params stay with the handler's call, which the innermost
/// service makes.)
pub struct RmcpRequest {
    pub(super) context: RequestContext<RoleServer>,
    method: Method,
    /// A `tools/call`'s tool, for the layers' per-tool limits (taken from
    /// the params rmcp already decoded, which stay with the handler's call).
    tool: Option<Box<str>>,
    progress_token: Option<ProgressToken>,
    extensions: Extensions,
    cancellation: Cancellation,
    started: Option<Instant>,
}

impl std::fmt::Debug for RmcpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmcpRequest")
            .field("id", &self.context.id)
            .field("method", &self.method)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl RmcpRequest {
    /// Wraps one call of the handler's `method`; the handler's `context.ct`
    /// becomes `cancellation`'s token (and `cancellation` is in its
    /// `context.extensions`), so it fires for every way the
    /// request ends early (work the handler spawned still stops through it).
    pub(super) fn new(
        method: &str,
        tool: Option<Box<str>>,
        mut context: RequestContext<RoleServer>,
        cancellation: Cancellation,
    ) -> Self {
        adopt(&mut context, &cancellation);
        let progress_token = context.meta.get_progress_token().map(|t| convert(&t.0));
        Self {
            method: Method::new(method),
            tool,
            progress_token,
            context,
            extensions: Extensions::new(),
            cancellation,
            started: None,
        }
    }

    /// The MCP method (`tools/call`, ...).
    pub fn method(&self) -> &str {
        self.method.as_str()
    }

    /// The context rmcp built for the request (its `ct` is the
    /// [`Cancellation`]'s token).
    pub fn context(&self) -> &RequestContext<RoleServer> {
        &self.context
    }
}

/// Makes `cancellation` the handler's: its token is `context.ct`, and it
/// is in `context.extensions`, where the handler reads why its request
/// ended ([`Cancellation::reason`]).
fn adopt(context: &mut RequestContext<RoleServer>, cancellation: &Cancellation) {
    context.ct = cancellation.token();
    context.extensions.insert(cancellation.clone());
}

/// rmcp's id or token (a number or a string) as this crate's.
pub(super) fn convert<T: From<i64> + From<String>>(v: &NumberOrString) -> T {
    match v {
        NumberOrString::Number(n) => T::from(*n),
        NumberOrString::String(s) => T::from(s.to_string()),
    }
}

impl RequestView for RmcpRequest {
    fn request_id(&self) -> Option<RequestId> {
        Some(convert(&self.context.id))
    }
    fn mcp_method(&self) -> Option<Method> {
        Some(self.method.clone())
    }
    fn tool_name(&self) -> Option<&str> {
        self.tool.as_deref()
    }
    fn progress_token(&self) -> Option<&ProgressToken> {
        self.progress_token.as_ref()
    }
    /// Always `false`: a handler reports progress only for a token the
    /// client sent, and a token the client never asked for must not reach
    /// it. A request without one keeps its idle limit, unreset.
    fn set_progress_token(&mut self, _token: ProgressToken) -> bool {
        false
    }
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }
    fn cancellation(&self) -> Option<&Cancellation> {
        Some(&self.cancellation)
    }
    fn set_cancellation(&mut self, cancellation: Cancellation) {
        adopt(&mut self.context, &cancellation);
        self.cancellation = cancellation;
    }
    fn started_at(&mut self) -> Instant {
        *self.started.get_or_insert_with(Instant::now)
    }
}
