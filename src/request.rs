//! The request the layers see, and [`RequestView`], which lets the layers work
//! over other request types too.
//!
//! # Where per-request values live
//!
//! The layers reach a request only through [`RequestView`]: its id, method,
//! tool name and progress token, and the per-request values they share with each
//! other, with transports and with handlers:
//!
//! * the two every stack sets on every call — the [`Cancellation`]
//!   ([`cancellation`](RequestView::cancellation) /
//!   [`set_cancellation`](RequestView::set_cancellation)) and the
//!   [`ProgressTap`] ([`progress_tap`](RequestView::progress_tap) /
//!   [`set_progress_tap`](RequestView::set_progress_tap));
//! * the caller's settings, looked up by type in the request's
//!   [`extensions`](RequestView::extensions):
//!   [`RequestTimeout`](crate::RequestTimeout),
//!   [`ProgressLimits`](crate::ProgressLimits),
//!   [`ProgressObserver`](crate::ProgressObserver), and a transport's
//!   notifier (reached through [`RequestContext`](crate::RequestContext)).
//!
//! Who puts each one there, and who reads it:
//!
//! | type | put there by | read by |
//! | --- | --- | --- |
//! | [`Cancellation`] | the transport (its cancel signal), or [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) | the layers; the handler ([`token`](Cancellation::token)) |
//! | [`ProgressTap`] | [`ProgressResetLayer`](crate::ProgressResetLayer) | the client transport (incoming progress); the handler (its own progress) |
//! | [`RequestTimeout`](crate::RequestTimeout) | the caller | [`TimeoutLayer`](crate::TimeoutLayer) |
//! | [`ProgressLimits`](crate::ProgressLimits) | the caller | [`ProgressResetLayer`](crate::ProgressResetLayer) |
//! | [`ProgressObserver`](crate::ProgressObserver) | the caller | the [`ProgressTap`] (a progress bar) |
//! | [`DeadlineCap`](crate::DeadlineCap) | a handler, for a call it makes downstream ([`RequestContext::deadline_cap`](crate::RequestContext::deadline_cap)) | every timer layer of that call: `min(own limit, cap)` |
//! | a notifier | a server transport | the handler, through [`RequestContext`](crate::RequestContext) |
//!
//! Where a request type stores them is its own business. [`McpRequest`]
//! keeps the two hot ones in fields (inserting into an extension map
//! allocates, which was most of the layers' per-call cost) and the rest in
//! its [`http::Extensions`]; `http::Request` keeps all of them in its
//! extensions. A third-party request type implements [`RequestView`] over an
//! [`http::Extensions`] of its own; the accessors for the hot two default
//! to that map and can be overridden with fields.

use http::Extensions;
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::jsonrpc::{self, Method, ParamsPeek, ParamsView, ProgressToken, RawRequest, RequestId};
use crate::state::{Cancellation, ProgressTap};

/// The shutdown token of the server transport a request came through (in
/// its extensions): work that outlives the request — a task — stops with
/// the server that took it.
#[cfg(feature = "tasks")]
#[derive(Clone, Debug)]
pub(crate) struct TransportShutdown(pub(crate) tokio_util::sync::CancellationToken);

/// An MCP request: id, method, raw params, progress token and extensions.
///
/// ```
/// use tower_mcp_cancel::McpRequest;
///
/// let req = McpRequest::new(1, "tools/call")
///     .with_params(serde_json::json!({"name": "echo", "arguments": {"text": "hi"}}));
/// assert_eq!(req.method(), "tools/call");
/// assert_eq!(req.params_as::<serde_json::Value>().unwrap()["name"], "echo");
/// ```
#[derive(Debug, Default)]
pub struct McpRequest {
    id: Option<RequestId>,
    method: Option<Method>,
    params: Option<Box<RawValue>>,
    progress_token: TokenSlot,
    // A `tools/call`'s tool, read with the progress token (the policies
    // look it up by name; a second parse per layer would cost more).
    tool: Option<Box<str>>,
    // The two per-request values every stack sets are kept out of the
    // extension map: inserting into it allocates a map and a box per value,
    // which was most of the layers' per-call cost.
    cancellation: Option<Cancellation>,
    tap: Option<ProgressTap>,
    started: Option<Instant>,
    extensions: Extensions,
}

impl McpRequest {
    /// A request with an id and a method, no params.
    pub fn new(id: impl Into<RequestId>, method: &str) -> Self {
        Self {
            id: Some(id.into()),
            method: Some(Method::new(method)),
            ..Self::default()
        }
    }

    /// A request whose id the client transport assigns when it sends it.
    pub fn without_id(method: &str) -> Self {
        Self {
            method: Some(Method::new(method)),
            ..Self::default()
        }
    }

    /// Sets `params` from any serializable value. A progress token in
    /// `_meta.progressToken` is picked up.
    ///
    /// # Panics
    ///
    /// Never for `serde_json::Value`; for a type whose `Serialize` fails, the
    /// params are left unset.
    #[must_use]
    pub fn with_params<P: serde::Serialize>(mut self, params: P) -> Self {
        if let Ok(raw) = serde_json::value::to_raw_value(&params) {
            self.set_raw_params(Some(raw));
        }
        self
    }

    /// Sets raw `params`; a progress token in `_meta.progressToken` is
    /// picked up, and a `tools/call`'s tool name, in one pass.
    pub fn set_raw_params(&mut self, params: Option<Box<RawValue>>) {
        let peek = params.as_deref().map(ParamsPeek::of).unwrap_or_default();
        self.progress_token = match peek.progress_token {
            Some(t) => TokenSlot::InParams(t),
            None => TokenSlot::None,
        };
        self.tool = tool_of(self.method.as_ref(), &peek.view);
        self.params = params;
    }

    /// The request a server transport decoded: `view` is what the decode
    /// read of its params in the same pass (the tool's name among it).
    #[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]
    pub(crate) fn decoded(raw: RawRequest, view: &ParamsView<'_>) -> Self {
        let tool = tool_of(Some(&raw.method), view);
        Self {
            tool,
            ..Self::from(raw)
        }
    }

    /// The request id, if it has one yet.
    pub fn id(&self) -> Option<&RequestId> {
        self.id.as_ref()
    }

    /// Sets the request id (client transports assign one when absent).
    pub fn set_id(&mut self, id: RequestId) {
        self.id = Some(id);
    }

    /// The method name (empty if unset).
    pub fn method(&self) -> &str {
        self.method.as_ref().map_or("", Method::as_str)
    }

    /// The tool a `tools/call` calls: its params' `name`, when it is a
    /// string (`None` for any other method, and for a `name` that is
    /// missing, not a string or given twice). Read with the params, not
    /// on each call.
    ///
    /// Why: what the layers' per-tool limits
    /// ([`MethodPolicy::tool`](crate::MethodPolicy::tool)) look up, and a
    /// handler may route by, without decoding the params.
    ///
    /// ```
    /// use tower_mcp_cancel::McpRequest;
    /// let req = McpRequest::new(1, "tools/call").with_params(serde_json::json!({"name": "slow"}));
    /// assert_eq!(req.tool_name(), Some("slow"));
    /// ```
    #[inline]
    pub fn tool_name(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The raw params.
    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// Decodes the params into `T` (a missing params decodes as `null`).
    pub fn params_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match &self.params {
            Some(p) => serde_json::from_str(p.get()),
            None => serde_json::from_value(serde_json::Value::Null),
        }
    }

    /// The params as they must be written on the wire: with `_meta.progressToken`
    /// merged in when a token was assigned after the params were set.
    pub fn wire_params(&self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        match &self.progress_token {
            TokenSlot::Assigned(token) => {
                jsonrpc::params_with_progress_token(self.params.as_deref(), token).map(Some)
            }
            _ => Ok(self.params.clone()),
        }
    }

    /// The progress token.
    #[inline]
    pub fn progress_token(&self) -> Option<&ProgressToken> {
        self.progress_token.get()
    }

    /// The request's [`Cancellation`]: set by
    /// [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) or by the
    /// transport, or given by the caller with [`with_cancellation`](Self::with_cancellation).
    /// One put in the extensions by the caller is found too.
    ///
    /// ```
    /// use tower_mcp_cancel::{Cancellation, McpRequest};
    /// let c = Cancellation::new();
    /// let req = McpRequest::new(1, "tools/call").with_cancellation(c.clone());
    /// assert!(req.cancellation().is_some());
    /// ```
    #[inline]
    pub fn cancellation(&self) -> Option<&Cancellation> {
        self.cancellation
            .as_ref()
            .or_else(|| self.extensions.get::<Cancellation>())
    }

    /// Sets the request's [`Cancellation`], builder style (a client that
    /// wants to cancel a call itself keeps a clone).
    #[must_use]
    pub fn with_cancellation(mut self, cancellation: Cancellation) -> Self {
        self.cancellation = Some(cancellation);
        self
    }

    /// The request's [`ProgressTap`], set by
    /// [`ProgressResetLayer`](crate::ProgressResetLayer). One put in the
    /// extensions by the caller is found too.
    #[inline]
    pub fn progress_tap(&self) -> Option<&ProgressTap> {
        self.tap
            .as_ref()
            .or_else(|| self.extensions.get::<ProgressTap>())
    }

    /// The extensions.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The extensions, mutably.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// Adds an extension value, builder style.
    #[must_use]
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
}

/// A request's progress token, and whether its params already carry it.
#[derive(Debug, Default)]
enum TokenSlot {
    #[default]
    None,
    /// Read from the params.
    InParams(ProgressToken),
    /// Set by a layer: `wire_params` adds it to the params (one enum rather
    /// than a token and a flag keeps `McpRequest`, moved by every layer's
    /// `call`, 8 bytes smaller).
    Assigned(ProgressToken),
}

impl TokenSlot {
    #[inline]
    fn get(&self) -> Option<&ProgressToken> {
        match self {
            TokenSlot::None => None,
            TokenSlot::InParams(t) | TokenSlot::Assigned(t) => Some(t),
        }
    }
}

/// A `tools/call`'s tool name from the view of its params.
fn tool_of(method: Option<&Method>, view: &ParamsView<'_>) -> Option<Box<str>> {
    if method? != jsonrpc::TOOLS_CALL {
        return None;
    }
    view.name.and_then(jsonrpc::json_str).map(Into::into)
}

impl From<RawRequest> for McpRequest {
    fn from(r: RawRequest) -> Self {
        Self {
            id: Some(r.id),
            method: Some(r.method),
            params: r.params,
            progress_token: r
                .progress_token
                .map_or(TokenSlot::None, TokenSlot::InParams),
            tool: None,
            cancellation: None,
            tap: None,
            started: None,
            extensions: Extensions::new(),
        }
    }
}

/// What the layers can see of a request: the only way they reach it.
///
/// Implemented for [`McpRequest`] and for [`http::Request<B>`] (method from a
/// [`Method`] in the extensions, put there by server code that read the
/// body, or else claimed by the `Mcp-Method` header; id and progress token
/// from the request's extensions, where an HTTP adapter that read the body
/// puts them). To stack the layers over your own request type, implement the
/// required methods: id, method, progress token, and an
/// [`http::Extensions`] for per-request values (the type map of the
/// tower and hyper ecosystem; rmcp's and tower-mcp's requests carry one). The [`Cancellation`] and [`ProgressTap`]
/// accessors default to that map; override them with fields of your type
/// to spare the map's allocations, as [`McpRequest`] does (see the
/// [module docs](self)).
pub trait RequestView {
    /// The JSON-RPC id, when known.
    fn request_id(&self) -> Option<RequestId>;
    /// The MCP method, when known.
    fn mcp_method(&self) -> Option<Method>;
    /// For a `tools/call`, the name of the tool it calls, when known
    /// (`None` for other methods). The layers' per-tool limits
    /// ([`MethodPolicy::tool`](crate::MethodPolicy::tool)) read it, and
    /// only for a `tools/call` whose policy has tool entries: keep it
    /// cheap, read where the method is (a field, not a parse of the
    /// params). It is as checked as the method
    /// ([`mcp_method_checked`](Self::mcp_method_checked)). Default: `None`
    /// (the method's entry applies), so that an implementation written
    /// before it keeps compiling.
    ///
    /// Why: a tool, not the method, is what tells a slow call from a quick
    /// one, and only the request type knows where its tool's name is.
    fn tool_name(&self) -> Option<&str> {
        None
    }
    /// Whether [`mcp_method`](Self::mcp_method) is the method the request
    /// really is: read from its body, or checked against it. `false` for a
    /// method that is only claimed (an `http::Request`'s `Mcp-Method`
    /// header that nothing has compared with the body yet), which the
    /// layers' [policies](crate::timeout::MethodPolicy) let shorten a limit,
    /// never lengthen or lift it. Default: `true`.
    fn mcp_method_checked(&self) -> bool {
        true
    }
    /// The progress token, when the request carries one.
    fn progress_token(&self) -> Option<&ProgressToken>;
    /// Assigns a progress token to a request that has none. Returns `false`
    /// when this request type cannot carry one.
    fn set_progress_token(&mut self, token: ProgressToken) -> bool;
    /// The request's per-request values.
    fn extensions(&self) -> &Extensions;
    /// The request's per-request values, mutably.
    fn extensions_mut(&mut self) -> &mut Extensions;
    /// The request's [`Cancellation`], if a layer, transport or caller set
    /// one. Default: looked up in the extensions.
    fn cancellation(&self) -> Option<&Cancellation> {
        self.extensions().get::<Cancellation>()
    }
    /// Sets the request's [`Cancellation`]. Default: inserted in the
    /// extensions. Override both with a field of your own request type to
    /// spare the extension map's allocations.
    fn set_cancellation(&mut self, cancellation: Cancellation) {
        self.extensions_mut().insert(cancellation);
    }
    /// The request's [`ProgressTap`]. Default: looked up in the extensions.
    fn progress_tap(&self) -> Option<&ProgressTap> {
        self.extensions().get::<ProgressTap>()
    }
    /// Sets the request's [`ProgressTap`]. Default: inserted in the
    /// extensions.
    fn set_progress_tap(&mut self, tap: ProgressTap) {
        self.extensions_mut().insert(tap);
    }
    /// When the request started: the instant its deadlines count from. The
    /// first call fixes it, so every layer of a stack measures from the same
    /// instant (and reads the clock once). Default: now, not remembered.
    fn started_at(&mut self) -> Instant {
        Instant::now()
    }
}

impl RequestView for McpRequest {
    #[inline]
    fn request_id(&self) -> Option<RequestId> {
        self.id.clone()
    }
    #[inline]
    fn mcp_method(&self) -> Option<Method> {
        self.method.clone()
    }
    #[inline]
    fn tool_name(&self) -> Option<&str> {
        McpRequest::tool_name(self)
    }
    #[inline]
    fn progress_token(&self) -> Option<&ProgressToken> {
        self.progress_token.get()
    }
    #[inline]
    fn set_progress_token(&mut self, token: ProgressToken) -> bool {
        self.progress_token = TokenSlot::Assigned(token);
        true
    }
    #[inline]
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }
    #[inline]
    fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }
    #[inline]
    fn cancellation(&self) -> Option<&Cancellation> {
        McpRequest::cancellation(self)
    }
    #[inline]
    fn set_cancellation(&mut self, cancellation: Cancellation) {
        self.cancellation = Some(cancellation);
    }
    #[inline]
    fn progress_tap(&self) -> Option<&ProgressTap> {
        McpRequest::progress_tap(self)
    }
    #[inline]
    fn set_progress_tap(&mut self, tap: ProgressTap) {
        self.tap = Some(tap);
    }
    #[inline]
    fn started_at(&mut self) -> Instant {
        *self.started.get_or_insert_with(Instant::now)
    }
}

impl<B> RequestView for http::Request<B> {
    fn request_id(&self) -> Option<RequestId> {
        self.extensions().get::<RequestId>().cloned()
    }
    fn mcp_method(&self) -> Option<Method> {
        if let Some(m) = self.extensions().get::<Method>() {
            return Some(m.clone());
        }
        self.headers()
            .get(&crate::protocol::MCP_METHOD_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(Method::new)
    }
    /// Checked when a [`Method`] is in the extensions (put there by server
    /// code that read the body); the `Mcp-Method` header alone is a claim.
    fn mcp_method_checked(&self) -> bool {
        self.extensions().get::<Method>().is_some()
    }
    /// The `Mcp-Name` header of a request whose method is the claimed
    /// `Mcp-Method` `tools/call` (as is, not decoded: a tool name that is
    /// not plain ASCII matches no entry). Never with a checked method: the
    /// header would be a claim where the method is not.
    fn tool_name(&self) -> Option<&str> {
        if self.extensions().get::<Method>().is_some() {
            return None;
        }
        let header =
            |name: &http::HeaderName| self.headers().get(name).and_then(|v| v.to_str().ok());
        if header(&crate::protocol::MCP_METHOD_HEADER)? != jsonrpc::TOOLS_CALL {
            return None;
        }
        header(&crate::protocol::MCP_NAME_HEADER)
    }
    fn progress_token(&self) -> Option<&ProgressToken> {
        self.extensions().get::<ProgressToken>()
    }
    fn set_progress_token(&mut self, token: ProgressToken) -> bool {
        self.extensions_mut().insert(token);
        true
    }
    fn extensions(&self) -> &Extensions {
        http::Request::extensions(self)
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        http::Request::extensions_mut(self)
    }
}

#[cfg(test)]
mod tests;
