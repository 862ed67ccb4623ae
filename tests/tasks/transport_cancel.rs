//! A `notifications/cancelled` in the instant the task's record is being
//! created, over the stdio server with a transport grace: the client never
//! gets a `CreateTaskResult`, the work is dropped, and the record, if it
//! exists, reads `cancelled`.

use std::time::Duration;

use serde_json::{json, Value};
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TaskStore, TasksLayer, EXTENSION};
use tower_mcp_cancel::test_util::{Fault, FaultyStore, Gate, Op};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::MethodPolicy;

use crate::harness::{drained, stack, Calls, END_BOUND};
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
