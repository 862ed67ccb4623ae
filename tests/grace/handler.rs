//! The handler of the grace tests: `cleanup {ms}` waits for its token,
//! then spends `ms` (a tokio sleep, also sending what must not reach the
//! wire), and returns; `hang` never looks at its token.

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::Recorder;
use tower_mcp_cancel::McpRequest;

/// Far longer than any test needs, also under a paused clock.
pub(crate) const BOUND: Duration = Duration::from_secs(3600);

pub(crate) type Svc = BoxCloneService<McpRequest, Value, BoxError>;

/// `cleanup {ms, graceMs?}` and `hang`, recording Started / Done (cleanup
/// finished) / Dropped (dropped before) through `rec`.
pub(crate) fn handler(rec: Recorder) -> Svc {
    BoxCloneService::new(service_fn(move |req: McpRequest| {
        let rec = rec.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let params: Value = req.params_as().unwrap_or(Value::Null);
            let (name, args) = match req.method() {
                "tools/call" => (
                    params["name"].as_str().unwrap_or("").to_owned(),
                    params["arguments"].clone(),
                ),
                // A listen stream that cleans up as `cleanup` does.
                "subscriptions/listen" => ("cleanup".to_owned(), params.clone()),
                other => (other.to_owned(), Value::Null),
            };
            match name.as_str() {
                "cleanup" => {
                    if let Some(ms) = args["graceMs"].as_u64() {
                        let c = req.cancellation().expect("under a transport");
                        assert!(c.set_grace(Duration::from_millis(ms)));
                    }
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    let guard = rec.start(&req);
                    let token = ctx.token();
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = tokio::time::sleep(BOUND) => {}
                    }
                    // The cleanup: what it sends reaches nobody.
                    ctx.progress(1.0, Some(2.0), Some("cleaning up".into()))
                        .await;
                    ctx.notify(
                        "notifications/message",
                        &json!({"level": "info", "data": "cleaning"}),
                    )
                    .await;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    ctx.progress(2.0, Some(2.0), None).await;
                    guard.finish();
                    Ok(json!({ "late": true }))
                }
                "hang" => {
                    let guard = rec.start(&req);
                    tokio::time::sleep(BOUND).await;
                    guard.finish();
                    Ok(json!({}))
                }
                _ => Ok(json!({})),
            }
        }
    }))
}

/// A `tools/call` of `cleanup` spending `ms` on its cleanup.
pub(crate) fn cleanup_params(ms: u64) -> Value {
    json!({ "name": "cleanup", "arguments": { "ms": ms } })
}
