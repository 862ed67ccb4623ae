//! A task created for a call the client gave up on: the server answered
//! with a `CreateTaskResult` before it read the client's
//! `notifications/cancelled`. The task is the client's from the moment
//! that answer arrives: `StdioClient` sends `tasks/cancel` for it, and the
//! answer to that is ignored.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use std::time::Duration;

use serde_json::json;
use stdio_support::*;
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{Elapsed, McpRequest, TimeoutLayer};

#[tokio::test(start_paused = true)]
async fn a_late_create_task_result_gets_tasks_cancel() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(client.clone());
    let call = tokio::spawn(svc.oneshot(McpRequest::new(7, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 7);
    assert!(call.await.unwrap().unwrap_err().is::<Elapsed>());
    let v = peer.recv().await.unwrap();
    assert_eq!(v["method"], "notifications/cancelled", "{v}");
    // The server's answer crossed the cancel: it made a task.
    peer.send(json!({"jsonrpc": "2.0", "id": 7, "result": {
        "resultType": "task", "taskId": "t-42", "status": "working",
        "createdAt": "2026-12-06T00:00:00Z", "lastUpdatedAt": "2026-12-06T00:00:00Z", "ttlMs": 60000
    }}))
    .await;
    let cancel = peer.recv().await.unwrap();
    assert_eq!(cancel["method"], "tasks/cancel", "{cancel}");
    assert_eq!(cancel["params"]["taskId"], "t-42");
    assert_eq!(
        cancel["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            ["io.modelcontextprotocol/tasks"],
        json!({})
    );
    // Its answer resolves nothing, and the connection goes on.
    peer.send(json!({"jsonrpc": "2.0", "id": cancel["id"], "result": {"resultType": "complete"}}))
        .await;
    let ping = tokio::spawn(client.clone().oneshot(McpRequest::new("p", "ping")));
    let v = peer.recv().await.unwrap();
    assert_eq!(v["id"], "p");
    peer.send(json!({"jsonrpc": "2.0", "id": "p", "result": {}}))
        .await;
    assert_eq!(ping.await.unwrap().unwrap(), json!({}));
    // A late answer that is not a task is ignored as before: nothing is sent.
    assert_eq!(client.in_flight(), 0);
}
