//! The service of the drain tests (stdio and HTTP): `work` sleeps
//! `params.ms` on tokio's clock and answers `{"slept": ms}`;
//! `subscriptions/listen` and anything else never end on their own; `ping`
//! answers at once. Each records its start, drop, completion and token.

use std::time::Duration;

use serde_json::{json, Value};
use tower::service_fn;
use tower::util::BoxCloneSyncService;
use tower::BoxError;
use tower_mcp_cancel::test_util::Recorder;
use tower_mcp_cancel::McpRequest;

/// The drain grace of the tests.
pub const GRACE: Duration = Duration::from_secs(5);

pub fn service(recorder: Recorder) -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(service_fn(move |req: McpRequest| {
        let recorder = recorder.clone();
        async move {
            if req.method() == "ping" {
                return Ok(json!({}));
            }
            let rec = recorder.start(&req);
            recorder.watch_token(&req);
            let params: Value = req.params_as().unwrap_or_default();
            match (req.method(), params["ms"].as_u64()) {
                ("work", Some(ms)) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    rec.finish();
                    Ok(json!({"resultType": "complete", "slept": ms}))
                }
                _ => {
                    std::future::pending::<()>().await;
                    unreachable!()
                }
            }
        }
    }))
}
