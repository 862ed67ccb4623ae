//! Observability: the span of each request on both sides and the outcome
//! recorded at its end, one test per outcome kind (captured with a test
//! subscriber), and the metrics (feature `metrics`, with the facade's
//! debugging recorder).

#[path = "../support/mod.rs"]
mod support;

mod capture;
mod grace;
mod http;
#[cfg(feature = "metrics")]
mod metrics;
mod stdio;

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::{McpRequest, TimeoutLayer};

/// The server's deadline.
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

/// A server stack: a 10 s deadline over a handler whose methods are
/// `ok`, `ping` and `tools/call` (a result), `fail` (`-32602`), `hang` (never ends), `progress`
/// (two progress notifications, then a result), `slow` (a result after
/// 1 s).
pub(crate) fn server() -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(DEADLINE))
            .service(service_fn(|req: McpRequest| async move {
                match req.method() {
                    "ok" | "ping" | "tools/call" => Ok(json!({"resultType": "complete"})),
                    "fail" => Err(ErrorObject::new(ErrorObject::INVALID_PARAMS, "bad").into()),
                    "progress" => {
                        let ctx = RequestContext::of(&req);
                        ctx.progress(1.0, Some(2.0), None).await;
                        ctx.progress(2.0, Some(2.0), None).await;
                        Ok(json!({"resultType": "complete"}))
                    }
                    "slow" => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Ok(json!({"resultType": "complete"}))
                    }
                    _ => std::future::pending::<Result<Value, BoxError>>().await,
                }
            })),
    )
}
