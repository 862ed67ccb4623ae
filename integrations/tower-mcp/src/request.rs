//! tower-mcp's [`RouterRequest`] as the layers see it: a [`RequestView`]
//! over its id and its parsed request, with the layers' per-request values
//! in an [`http::Extensions`] of its own. (A wrapper: tower-mcp's request
//! and extension types and this crate's traits are all foreign to this
//! package.)

use http::Extensions;
use tokio::time::Instant;
use tower_mcp::protocol::{self as tm, McpRequest as TmRequest};
use tower_mcp::RouterRequest;

use tower_mcp_cancel::jsonrpc::{Method, ProgressToken, RequestId};
use tower_mcp_cancel::RequestView;

/// A tower-mcp request on its way through the layers to the router.
pub(crate) struct LayeredRequest {
    /// The request as tower-mcp's router takes it.
    pub(crate) inner: RouterRequest,
    /// The progress token the request carries (see [`progress_token_of`]).
    progress_token: Option<ProgressToken>,
    /// The layers' per-request values ([`Cancellation`](tower_mcp_cancel::Cancellation),
    /// [`ProgressTap`](tower_mcp_cancel::ProgressTap)).
    extensions: Extensions,
    /// When its deadlines count from.
    started: Option<Instant>,
}

impl LayeredRequest {
    pub(crate) fn new(inner: RouterRequest) -> Self {
        Self {
            progress_token: progress_token_of(&inner.inner),
            inner,
            extensions: Extensions::new(),
            started: None,
        }
    }
}

/// The progress token a `tools/call` carries in `_meta.progressToken`,
/// as this crate's. (The other methods' tokens are not read: tower-mcp
/// reports progress for tool calls.)
fn progress_token_of(req: &TmRequest) -> Option<ProgressToken> {
    let TmRequest::CallTool(params) = req else {
        return None;
    };
    progress_token(params.meta.as_ref()?.progress_token.as_ref()?)
}

/// tower-mcp's progress token as this crate's.
pub(super) fn progress_token(token: &tm::ProgressToken) -> Option<ProgressToken> {
    match token {
        tm::ProgressToken::Number(n) => Some(ProgressToken::from(*n)),
        tm::ProgressToken::String(s) => Some(ProgressToken::from(s.clone())),
        // A kind tower-mcp may add later: as it is on the wire.
        other => serde_json::to_value(other)
            .and_then(serde_json::from_value)
            .ok(),
    }
}

/// tower-mcp's id as this crate's.
fn request_id_of(id: &tm::RequestId) -> Option<RequestId> {
    match id {
        tm::RequestId::Number(n) => Some(RequestId::from(*n)),
        tm::RequestId::String(s) => Some(RequestId::from(s.clone())),
        // A kind tower-mcp may add later: as it is on the wire.
        other => serde_json::to_value(other)
            .and_then(serde_json::from_value)
            .ok(),
    }
}

/// The id, method and (for a `tools/call`) tool from the request, the
/// progress token it carries;
/// the [`Cancellation`](tower_mcp_cancel::Cancellation) and
/// [`ProgressTap`](tower_mcp_cancel::ProgressTap) in the wrapper's
/// extensions.
impl RequestView for LayeredRequest {
    fn request_id(&self) -> Option<RequestId> {
        request_id_of(&self.inner.id)
    }
    fn mcp_method(&self) -> Option<Method> {
        Some(Method::new(self.inner.inner.method_name()))
    }
    /// The tool of a `tools/call`, from the request tower-mcp parsed.
    fn tool_name(&self) -> Option<&str> {
        match &self.inner.inner {
            TmRequest::CallTool(params) => Some(&params.name),
            _ => None,
        }
    }
    fn progress_token(&self) -> Option<&ProgressToken> {
        self.progress_token.as_ref()
    }
    /// Always `false`: tower-mcp's handler reports progress only for a
    /// token the client sent.
    fn set_progress_token(&mut self, _token: ProgressToken) -> bool {
        false
    }
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }
    fn started_at(&mut self) -> Instant {
        *self.started.get_or_insert_with(Instant::now)
    }
}

/// Drops a 2026-07-28 `tools/call`'s `task` parameter: the tasks extension
/// removed that 2025-11-25 parameter and has servers ignore it (sep-2663,
/// Backwards Compatibility), where tower-mcp refuses the call with
/// `-32602`. A 2025 request keeps it (tower-mcp's own tasks).
pub(crate) fn ignore_removed_task(req: &mut RouterRequest) {
    if let TmRequest::CallTool(p) = &mut req.inner {
        let modern = p
            .meta
            .as_ref()
            .is_some_and(|m| m.protocol_version.is_some());
        if modern && p.task.take().is_some() {
            tracing::debug!("the removed `task` parameter of a tools/call ignored");
        }
    }
}
