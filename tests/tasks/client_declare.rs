//! The task client declares the extension on every request of the
//! extension it passes on: `tasks/get`, `tasks/update`, `tasks/cancel`,
//! and a `subscriptions/listen` that asks for `taskIds` — so that a caller
//! that keeps the handle (`KeepTaskHandle`) may use its own `tasks/*`.

use serde_json::{json, Value};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::tasks::{KeepTaskHandle, TaskCallLayer, EXTENSION};
use tower_mcp_cancel::McpRequest;

use crate::mock::{call, completed, Mock};

fn declared(params: &Value) -> bool {
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"][EXTENSION]
        .is_object()
}

#[tokio::test]
async fn the_layer_declares_the_extension_on_the_extensions_requests() {
    let mock = Mock::new();
    let ack = json!({"resultType": "complete"});
    mock.then("tasks/get", Ok(completed("t1")))
        .then("tasks/update", Ok(ack.clone()))
        .then("tasks/cancel", Ok(ack.clone()))
        .then("subscriptions/listen", Ok(json!({})))
        .then("subscriptions/listen", Ok(json!({})));
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(mock.service());
    let requests = [
        ("tasks/get", json!({"taskId": "t1"})),
        (
            "tasks/update",
            json!({"taskId": "t1", "inputResponses": {}}),
        ),
        (
            "tasks/cancel",
            json!({"taskId": "t1", "_meta": {"mine": 1}}),
        ),
        (
            "subscriptions/listen",
            json!({"notifications": {"taskIds": ["t1"]}}),
        ),
        (
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        ),
    ];
    for (method, params) in requests {
        let req = McpRequest::without_id(method).with_params(params);
        client.ready().await.unwrap().call(req).await.unwrap();
    }
    let seen = mock.seen();
    for s in &seen[..4] {
        assert!(declared(&s.params), "{} declares: {}", s.method, s.params);
        assert_eq!(s.params["taskId"].as_str().unwrap_or("t1"), "t1");
    }
    assert_eq!(
        seen[2].params["_meta"]["mine"], 1,
        "the caller's _meta is kept"
    );
    assert!(
        !declared(&seen[4].params),
        "a listen without taskIds is left alone"
    );
}

#[tokio::test]
async fn a_kept_handle_is_polled_through_the_same_client() {
    let (transport, _handle, _probes) = crate::calls::server();
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(transport);
    let created = client
        .ready()
        .await
        .unwrap()
        .call(
            McpRequest::without_id("tools/call")
                .with_params(json!({"name": "sleep", "arguments": {"ms": 60_000}}))
                .with_extension(KeepTaskHandle),
        )
        .await
        .unwrap();
    let id = created["taskId"].as_str().unwrap();
    let get = McpRequest::without_id("tasks/get").with_params(json!({ "taskId": id }));
    let got = client.ready().await.unwrap().call(get).await.unwrap();
    assert_eq!(got["status"], "working", "{got}");
    let cancel = McpRequest::without_id("tasks/cancel").with_params(json!({ "taskId": id }));
    client.oneshot(cancel).await.unwrap();
    let _ = call();
}
