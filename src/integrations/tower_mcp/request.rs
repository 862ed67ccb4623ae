//! tower-mcp's [`RouterRequest`] as the layers see it: a [`RequestView`]
//! over its id, its parsed request and its [`Extensions`] (an
//! [`ExtensionMap`]).

use tokio::time::Instant;
use tower_mcp::protocol::{self as tm, McpRequest as TmRequest};
use tower_mcp::{Extensions, RouterRequest};

use crate::jsonrpc::{Method, ProgressToken, RequestId};
use crate::{ExtensionMap, RequestView};

impl ExtensionMap for Extensions {
    #[inline]
    fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        Extensions::get(self)
    }
    #[inline]
    fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        Extensions::insert(self, value);
    }
}

/// When a request's deadlines count from, kept in its extensions.
#[derive(Clone, Copy)]
struct Started(Instant);

/// The progress token a `tools/call` carries in `_meta.progressToken`,
/// as this crate's. (The other methods' tokens are not read: tower-mcp
/// reports progress for tool calls.)
pub(super) fn progress_token_of(req: &TmRequest) -> Option<ProgressToken> {
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

/// The id and method from the request; the progress token from the
/// extensions, where [`RouterLayer`](super::RouterLayer) puts the one the
/// request carries; the [`Cancellation`](crate::Cancellation),
/// [`ProgressTap`](crate::ProgressTap) and start instant in the extensions.
impl RequestView for RouterRequest {
    type Extensions = Extensions;
    fn request_id(&self) -> Option<RequestId> {
        request_id_of(&self.id)
    }
    fn mcp_method(&self) -> Option<Method> {
        Some(Method::new(self.inner.method_name()))
    }
    fn progress_token(&self) -> Option<&ProgressToken> {
        self.extensions.get::<ProgressToken>()
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
        if let Some(Started(at)) = self.extensions.get::<Started>() {
            return *at;
        }
        let now = Instant::now();
        self.extensions.insert(Started(now));
        now
    }
}
