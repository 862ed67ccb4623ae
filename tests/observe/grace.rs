//! The cooperative grace in the request span (`mcp.grace`: `finished` or
//! `dropped`, set when the grace ended) and, with the `metrics` feature,
//! in the `mcp.server.grace` counter.

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{McpRequest, MethodPolicy};

use crate::capture::{assert_field, Capture, Fields};
use crate::support::stdio::pipe;

const SERVER: &str = "mcp.server.request";

/// `cleanup {ms}`: waits for its token, then spends `ms`; anything else
/// answers at once.
fn cleanup_server() -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(service_fn(|req: McpRequest| async move {
        if req.method() != "cleanup" {
            return Ok(json!({}));
        }
        let ms = req.params_as::<Value>().unwrap_or_default()["ms"]
            .as_u64()
            .unwrap_or(0);
        RequestContext::of(&req).token().cancelled().await;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, BoxError>(json!({}))
    }))
}

/// The span of request `id` once its `mcp.grace` is set (the paused clock
/// runs on in steps until then).
async fn grace_ended(cap: &Capture, id: &str) -> Fields {
    for _ in 0..10_000 {
        if let Some(f) = cap.span(SERVER, id) {
            if f.contains_key("mcp.grace") {
                return f;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the grace of {id} never ended: {:?}", cap.span(SERVER, id));
}

#[tokio::test(start_paused = true)]
async fn the_span_says_whether_the_handler_finished_within_its_grace() {
    #[cfg(feature = "metrics")]
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    #[cfg(feature = "metrics")]
    let snapshotter = recorder.snapshotter();
    #[cfg(feature = "metrics")]
    let _local = metrics::set_default_local_recorder(&recorder);
    let (cap, _guard) = Capture::install();
    let (mut peer, r, w) = pipe(64 * 1024);
    let server = StdioServer::new().grace(MethodPolicy::new(Duration::from_millis(500)));
    let served = tokio::spawn(server.serve(cleanup_server(), r, w));

    peer.request(json!(1), "cleanup", json!({"ms": 100})).await;
    peer.request(json!(2), "cleanup", json!({"ms": 10_000}))
        .await;
    peer.request(json!(3), "ok", json!({})).await;
    peer.until_response(json!(3)).await;
    cap.started(SERVER, "1").await;
    cap.started(SERVER, "2").await;
    peer.cancel(json!(1), "stop").await;
    peer.cancel(json!(2), "stop").await;

    let finished = grace_ended(&cap, "1").await;
    assert_field(&finished, "mcp.request.outcome", "cancelled");
    assert_field(&finished, "mcp.grace", "finished");
    let dropped = grace_ended(&cap, "2").await;
    assert_field(&dropped, "mcp.request.outcome", "cancelled");
    assert_field(&dropped, "mcp.grace", "dropped");
    let answered = cap.ended(SERVER, "3").await;
    assert!(
        !answered.contains_key("mcp.grace"),
        "no grace: {answered:?}"
    );

    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();

    #[cfg(feature = "metrics")]
    {
        use metrics_util::debugging::DebugValue;
        let mut by_grace = std::collections::HashMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            if key.key().name() != "mcp.server.grace" {
                continue;
            }
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let DebugValue::Counter(n) = value else {
                panic!("mcp.server.grace is a counter")
            };
            by_grace.insert(labels, n);
        }
        let key = |how: &str| {
            vec![
                ("mcp.grace".to_owned(), how.to_owned()),
                ("mcp.transport".to_owned(), "stdio".to_owned()),
            ]
        };
        assert_eq!(by_grace.get(&key("finished")), Some(&1), "{by_grace:?}");
        assert_eq!(by_grace.get(&key("dropped")), Some(&1), "{by_grace:?}");
    }
}
