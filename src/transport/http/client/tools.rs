//! `x-mcp-header` on the client: learning tools' annotations from
//! `tools/list` results, and a `tools/call` refused with `HeaderMismatch`
//! sent once more after listing the tools again, when that changed its
//! headers.

use http::{HeaderName, HeaderValue};

use super::request::{exchange, prepare, Shape};
use super::send::Outgoing;
use super::{Inner, Lease};
use crate::error::BoxError;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::transport::call::client::Route;
use crate::McpRequest;

/// A `tools/call` that may be sent again after a `HeaderMismatch`.
pub(super) struct Retry {
    pub(super) req: McpRequest,
    pub(super) sent: Vec<(HeaderName, HeaderValue)>,
    pub(super) route: Route,
}

/// The most `tools/list` pages read when listing again.
const RELIST_PAGES: usize = 32;

impl Retry {
    /// Lists the tools again; if that changed the call's `Mcp-Param-*`
    /// headers, sends it once more and returns that outcome.
    pub(super) async fn again(
        self,
        inner: &Inner,
        id: &RequestId,
    ) -> Option<Result<serde_json::Value, BoxError>> {
        if let Err(e) = relist(inner).await {
            tracing::debug!(error = %e, "listing the tools again after a header mismatch failed");
            return None;
        }
        let http_req = prepare(inner, id, &self.req).ok()?;
        if param_headers_of(&http_req) == self.sent {
            return None; // the same headers would be refused again
        }
        tracing::debug!(request_id = %id, "tool schema changed; sending the call again");
        Some(
            exchange(
                inner,
                http_req,
                id,
                self.route,
                Shape::Modern { probe: false },
            )
            .await,
        )
    }
}

pub(super) fn param_headers_of(req: &Outgoing) -> Vec<(HeaderName, HeaderValue)> {
    req.headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("mcp-param-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(super) fn is_header_mismatch(out: &Result<serde_json::Value, BoxError>) -> bool {
    matches!(out, Err(e) if e.downcast_ref::<ErrorObject>().is_some_and(|e| e.code == ErrorObject::HEADER_MISMATCH))
}

/// Lists the tools (every page, up to [`RELIST_PAGES`]) so that the client
/// learns their current annotations.
async fn relist(inner: &Inner) -> Result<(), BoxError> {
    let mut cursor: Option<String> = None;
    for _ in 0..RELIST_PAGES {
        let lease = Lease::fresh(inner);
        let id = lease.id().clone();
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        let req = McpRequest::new(id.clone(), "tools/list").with_params(params);
        let http_req = prepare(inner, &id, &req)?;
        let mut result = exchange(
            inner,
            http_req,
            &id,
            Route::default(),
            Shape::Modern { probe: false },
        )
        .await?;
        learn_tools(inner, &mut result);
        match result.get("nextCursor").and_then(|c| c.as_str()) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Records the tools' annotations and drops the invalid tools from `result`.
pub(super) fn learn_tools(inner: &Inner, result: &mut serde_json::Value) {
    let rejected = inner.tools_mut().learn_tools_list(result);
    for r in rejected {
        tracing::warn!(
            tool = %crate::sanitize::for_log(&r.name),
            reason = %r.error,
            "tool definition rejected: invalid x-mcp-header annotation; removed from the tools/list result"
        );
    }
}
