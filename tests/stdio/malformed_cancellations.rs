//! Only a `notifications/cancelled` whose `params` is an object with a valid
//! `requestId` is a cancellation, on both sides of a stdio connection: the
//! one type both decode refuses the rest (serde's derived `Deserialize` would
//! take the struct from an array, too; its decoding is unit-tested in
//! `src/jsonrpc/tests.rs`).
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use serde_json::{json, Value};
use stdio_support::*;
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::McpRequest;

/// `params` values that name request 1 in some way but are not a valid
/// cancellation of it.
fn malformed() -> Vec<Value> {
    vec![
        json!([1]),
        json!([1, "by position"]),
        json!({}),
        json!({"requestId": null}),
        json!({"requestId": 1.5}),
        json!({"requestId": [1]}),
        json!({"requestId": {"id": 1}}),
        json!({"requestId": true}),
        json!({"request_id": 1}),
    ]
}

fn cancel_line(params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
}

#[tokio::test(start_paused = true)]
async fn the_server_ignores_a_malformed_cancellation() {
    let (rec, mut ev) = Recorder::new();
    let svc = BoxCloneService::new(service_fn(move |req: McpRequest| {
        let rec = rec.clone();
        async move {
            if req.method() == "hang" {
                let p = rec.start(&req);
                tokio::time::sleep(BOUND).await;
                p.finish();
            }
            Ok::<_, BoxError>(json!({}))
        }
    }));
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    peer.request(json!(1), "hang", json!({})).await;
    assert_eq!(ev.next().await, Event::Started(RequestId::from(1)));
    for p in malformed() {
        peer.send(cancel_line(&p)).await;
    }
    // Every line before the ping was read by the time its answer comes.
    peer.sync(json!("s")).await;
    settle().await;
    assert_eq!(
        ev.try_next(),
        None,
        "a malformed cancellation dropped the handler"
    );
    // A valid one still cancels.
    peer.cancel(json!(1), "stop").await;
    assert_eq!(ev.next().await, Event::Dropped(RequestId::from(1)));
    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_client_ignores_a_malformed_cancellation() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    // A subscriptions/listen: the one request a server may cancel.
    let listen = tokio::spawn(
        client
            .clone()
            .oneshot(McpRequest::new(1, "subscriptions/listen")),
    );
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    for p in malformed() {
        peer.send(cancel_line(&p)).await;
    }
    peer.send(json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete"}}))
        .await;
    assert_eq!(
        listen.await.unwrap().unwrap(),
        json!({"resultType": "complete"}),
        "a malformed cancellation ended the call"
    );
}
