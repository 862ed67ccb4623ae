//! A `notifications/cancelled` in the instant the task's record is being
//! created, over the stdio server with a transport grace: the client never
//! gets a `CreateTaskResult`, the work is dropped, and the record, if it
//! exists, reads `cancelled`. And its shutdown twin.

use std::time::Duration;

use serde_json::{json, Value};
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TaskStore, TasksLayer, EXTENSION};
use tower_mcp_cancel::test_util::{Fault, FaultyStore, Gate, Op};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::MethodPolicy;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::Layer;
use tower_mcp_cancel::CancelReason;

use crate::harness::{drained, stack, Calls, END_BOUND};
use crate::http_cancel::{bounded, cancelled, declared, opened, tool, GRACE};
use crate::support::stdio::{mentions, pipe};

#[tokio::test(start_paused = true)]
async fn a_cancel_while_the_record_is_created_over_stdio_drops_the_work_and_answers_nothing() {
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    let tasks = TasksLayer::with_store(store.clone()).default_policy(TaskPolicy::optional());
    let handle = tasks.handle();
    let server = StdioServer::new().grace(MethodPolicy::new(Duration::from_secs(2)));
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(server.serve(stack(&tasks, &calls), r, w));
    let gate = Gate::new();
    store.once(Op::Create, Fault::Gate(gate.clone()));
    let params = json!({
        "name": "sleep", "arguments": {"ms": 600_000},
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}}
    });
    peer.request(json!(1), "tools/call", params).await;
    gate.arrived(1).await;
    peer.cancel(json!(1), "stop").await;
    // The reader takes lines in order: the ping's answer means the cancel
    // was read.
    peer.sync(json!("read")).await;
    gate.open();
    let work = calls.get(0).await;
    let id = work.task_id().expect("a task context");
    let dropped = tokio::time::timeout(END_BOUND, work.probe.dropped()).await;
    assert!(
        dropped.is_ok(),
        "the work still runs {END_BOUND:?} after its request was cancelled; running() = {}",
        handle.running()
    );
    let lines = peer.sync(json!("after")).await;
    let answered: Vec<&Value> = lines.iter().filter(|v| mentions(v, &json!(1))).collect();
    assert!(
        answered.is_empty(),
        "written for the cancelled call: {answered:?}"
    );
    if let Some(record) = store.inner().get(&id).await.unwrap() {
        assert_eq!(record.status.as_str(), "cancelled", "{record:?}");
    }
    drained(&handle, "cancelled during create").await;
    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();
}

/// The shutdown twin: the stdio server's shutdown token fires while the
/// record is created: the task is never announced, its work is dropped, its
/// record (if written) ends `failed` ("shut down"), never `working`.
async fn a_shutdown_over_stdio(grace: bool) {
    let what = format!("shutdown over stdio, grace {grace}");
    let store = FaultyStore::new(MemoryStore::new());
    let gate = Gate::new();
    store.once(Op::Create, Fault::Gate(gate.clone()));
    let tasks = TasksLayer::with_store(store.clone())
        .default_policy(TaskPolicy::optional())
        .store_timeout(GRACE);
    let handle = tasks.handle();
    let (tx, mut works) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let mut server = StdioServer::new().shutdown(shutdown.clone());
    if grace {
        server = server.grace(MethodPolicy::new(GRACE));
    }
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(server.serve(tasks.layer(tool(tx)), r, w));
    let params = json!({"name": "sleep", "arguments": {}, "_meta": declared()});
    peer.request(json!(1), "tools/call", params).await;
    bounded("the record's create at the gate", gate.arrived(1)).await;
    let work = bounded("the call's start", works.recv()).await.unwrap();
    shutdown.cancel();
    let reason = cancelled(&work, &what).await;
    assert_eq!(reason, CancelReason::Shutdown, "{what}");
    opened(&store, &handle, &gate, work, "failed", "shut down", &what).await;
    let lines = bounded("the server's output", peer.close()).await;
    let announced: Vec<&Value> = lines
        .iter()
        .filter(|v| mentions(v, &json!(1)) && v["result"].get("taskId").is_some())
        .collect();
    assert!(announced.is_empty(), "{what}: announced {announced:?}");
    bounded("serve's return", served).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_shutdown_while_the_record_is_created_over_stdio_drops_the_work_and_never_leaves_it_working(
) {
    a_shutdown_over_stdio(false).await;
}

#[tokio::test]
async fn a_shutdown_while_the_record_is_created_over_stdio_with_the_grace_drops_the_work_and_never_leaves_it_working(
) {
    a_shutdown_over_stdio(true).await;
}
