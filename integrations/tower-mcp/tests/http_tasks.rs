//! Tasks of tower-mcp tools over Streamable HTTP: tower-mcp's router
//! through `McpRouterService` under `TasksLayer`, served by this crate's
//! `StreamableHttpService` on loopback and called with its `HttpClient`. A
//! task tool that never looks at its token is dropped at `tasks/cancel`
//! and at its TTL, as over stdio (`tests/stdio_server.rs`).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp::extract::{Json, State};
use tower_mcp::{CallToolResult, McpRouter, ToolBuilder};
use tower_mcp_cancel::tasks::{TaskPolicy, TasksLayer, EXTENSION};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::transport::http::{serve, HttpClient, StreamableHttpService};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_tower_mcp::McpRouterService;

/// A guard against hangs, far longer than any exchange here takes.
const BOUND: Duration = Duration::from_secs(60);

/// `sleepy` sleeps an hour, never looking at its token; each call sends
/// the drop probe of its future.
fn router(probes: mpsc::UnboundedSender<DropProbe>) -> McpRouter {
    let sleepy = ToolBuilder::new("sleepy")
        .description("sleeps an hour")
        .extractor_handler(
            probes,
            |State(probes): State<mpsc::UnboundedSender<DropProbe>>, Json(_): Json<Value>| async move {
                let (probe, guard) = DropProbe::new();
                let _ = probes.send(probe);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                guard.finish();
                Ok(CallToolResult::text("slept"))
            },
        )
        .build();
    McpRouter::new().server_info("test", "0").tool(sleepy)
}

/// A server on loopback whose `sleepy` is a task (at once, `ttl`), a
/// client of it, and the drop probes of the tool's futures.
async fn start(
    ttl: Option<Duration>,
) -> (
    HttpClient,
    mpsc::UnboundedReceiver<DropProbe>,
    CancellationToken,
) {
    let (tx, probes) = mpsc::unbounded_channel();
    let tasks = TasksLayer::new()
        .tool("sleepy", TaskPolicy::required().after(Duration::ZERO))
        .ttl(ttl);
    let stack = ServiceBuilder::new()
        .layer(tasks)
        .service(McpRouterService::new(router(tx)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let endpoint = StreamableHttpService::new(stack).shutdown(shutdown.clone());
    tokio::spawn(serve(listener, endpoint, shutdown.clone()));
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    (client, probes, shutdown)
}

/// The `_meta` of a 2026-07-28 request that declares the tasks extension.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    })
}

async fn send(client: &HttpClient, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    let req = McpRequest::new(1, method).with_params(params);
    tokio::time::timeout(BOUND, client.clone().oneshot(req))
        .await
        .expect("no answer")
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// Calls `sleepy`: its task's id, and the drop probe of its work.
async fn sleepy_task(
    client: &HttpClient,
    probes: &mut mpsc::UnboundedReceiver<DropProbe>,
) -> (String, DropProbe) {
    let created = send(
        client,
        "tools/call",
        json!({"name": "sleepy", "arguments": {}}),
    )
    .await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    let probe = tokio::time::timeout(BOUND, probes.recv())
        .await
        .expect("the tool never started")
        .unwrap();
    (id, probe)
}

#[tokio::test]
async fn a_task_tool_that_never_looks_at_its_token_stops_at_tasks_cancel() {
    let (client, mut probes, shutdown) = start(None).await;
    let (task, probe) = sleepy_task(&client, &mut probes).await;
    assert!(!probe.is_dropped());
    let ack = send(&client, "tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(ack["resultType"], "complete", "{ack}");
    probe.dropped().await;
    assert!(probe.was_cancelled());
    let got = send(&client, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["status"], "cancelled", "{got}");
    shutdown.cancel();
}

#[tokio::test]
async fn a_task_tool_that_never_looks_at_its_token_stops_at_its_ttl() {
    let ttl = Duration::from_millis(300);
    let (client, mut probes, shutdown) = start(Some(ttl)).await;
    let (task, probe) = sleepy_task(&client, &mut probes).await;
    probe.dropped().await;
    assert!(probe.was_cancelled());
    let got = send(&client, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["status"], "failed", "{got}");
    shutdown.cancel();
}
