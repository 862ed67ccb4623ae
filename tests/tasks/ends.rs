//! Every task ends: a handler that panics, an end the store could not
//! write, the largest durations, an inner timeout under a grace; and the
//! binding of tasks to no principal. Each task reads terminal with a
//! truthful status, its slot is freed and `drained()` resolves.

use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, Layer, ServiceBuilder};
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TasksLayer};
use tower_mcp_cancel::test_util::{Fault, FaultyStore, Op};
use tower_mcp_cancel::{McpRequest, TimeoutLayer};

use crate::harness::{
    call, code, create, drained, get, send, stack, task_req, terminal_within, tools, Calls,
    END_BOUND,
};
use crate::panics::assert_no_panic;

fn layer() -> TasksLayer {
    TasksLayer::new().default_policy(TaskPolicy::optional())
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_handler_panics_reads_failed_and_frees_its_slot() {
    let calls = Calls::default();
    let tasks = layer().max_tasks(1);
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "panic", json!({"ms": 1000}))).await;
    let got = terminal_within(&svc, &id, END_BOUND).await.unwrap();
    assert_eq!(got["status"], "failed", "{got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("panic"),
        "the error says it panicked: {got}"
    );
    assert_eq!(handle.running(), 0);
    drained(&handle, "after a panic").await;
    // The one slot is free again.
    create(&svc, call(2, "sleep", json!({"ms": 1000}))).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_handler_panics_in_its_grace_stays_cancelled_and_frees_its_slot() {
    let calls = Calls::default();
    let tasks = layer().max_tasks(1).grace(Duration::from_secs(5));
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let args = json!({"ms": 100, "panic": true});
    let id = create(&svc, call(1, "cleanup", args)).await;
    send(&svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    calls.get(0).await.probe.dropped().await;
    let got = get(&svc, &id).await.unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    drained(&handle, "after a panic in the grace").await;
    create(&svc, call(3, "sleep", json!({"ms": 1000}))).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_end_failed_once_to_be_written_ends_with_its_result() {
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    let tasks = TasksLayer::with_store(store.clone()).default_policy(TaskPolicy::optional());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "sleep", json!({"ms": 1000}))).await;
    store.once(Op::Finish, Fault::Fail);
    let got = terminal_within(&svc, &id, Duration::from_secs(1) + END_BOUND)
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "done", "{got}");
    assert!(store.calls(Op::Finish) >= 2, "the end was written again");
    drained(&handle, "after a failed finish").await;
    assert_no_panic();
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_store_fails_its_end_for_a_minute_frees_its_slot_and_ends_once_healed() {
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    let tasks = TasksLayer::with_store(store.clone()).default_policy(TaskPolicy::optional());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "sleep", json!({"ms": 1000}))).await;
    store.always(Op::Finish, Fault::Fail);
    calls.get(0).await.probe.dropped().await;
    // The work ended: its slot is freed while its end is unwritten (which
    // `drained()` waits for).
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(handle.running(), 0);
    store.heal(Op::Finish);
    drained(&handle, "the end written once healed").await;
    let got = terminal_within(&svc, &id, END_BOUND).await.unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "done", "{got}");
    assert_no_panic();
}

#[tokio::test(start_paused = true)]
async fn the_largest_ttl_poll_interval_and_grace_never_panic_and_tasks_still_end() {
    let calls = Calls::default();
    let tasks = layer()
        .ttl(Some(Duration::MAX))
        .poll_interval(Duration::MAX)
        .grace(Duration::MAX);
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "sleep", json!({"ms": 1000}))).await;
    let got = terminal_within(&svc, &id, END_BOUND).await.unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    // A cancelled one ends when its cleanup does.
    let id = create(&svc, call(2, "cleanup", json!({"ms": 100}))).await;
    send(&svc, task_req(3, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    let got = terminal_within(&svc, &id, END_BOUND).await.unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    drained(&handle, "grace of Duration::MAX, cleanup of 100 ms").await;
    assert!(calls.get(1).await.probe.is_finished(), "its token fired");
    assert_no_panic();
}

#[tokio::test(start_paused = true)]
async fn the_largest_retention_never_panics_and_a_cancel_still_stops_the_work() {
    let calls = Calls::default();
    // A grace, for the handler's cleanup to show its token fired.
    let tasks = layer()
        .retention(Duration::MAX)
        .grace(Duration::from_secs(1));
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "cleanup", json!({"ms": 0}))).await;
    let cancel = tokio::spawn({
        let svc = svc.clone();
        let req = task_req(2, "tasks/cancel", &id, json!({}));
        async move { send(&svc, req).await.map_err(|e| e.to_string()) }
    })
    .await;
    let ack = cancel.expect("tasks/cancel with retention Duration::MAX panicked");
    assert_eq!(ack.unwrap()["resultType"], "complete");
    let call = calls.get(0).await;
    call.probe.dropped().await;
    assert!(call.probe.is_finished(), "its token fired");
    let got = get(&svc, &id).await.unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    drained(&handle, "retention of Duration::MAX").await;
    assert_no_panic();
}

#[tokio::test(start_paused = true)]
async fn the_largest_drain_grace_lets_tasks_run_on_after_shutdown_without_panic() {
    let calls = Calls::default();
    let shutdown = CancellationToken::new();
    let tasks = layer()
        .shutdown(shutdown.clone())
        .drain_grace(Duration::MAX);
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "sleep", json!({"ms": 5000}))).await;
    shutdown.cancel();
    let got = terminal_within(&svc, &id, Duration::from_secs(5) + END_BOUND)
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "ran on in the drain: {got}");
    drained(&handle, "drain grace of Duration::MAX").await;
    assert_no_panic();
}

#[derive(Clone)]
struct User(&'static str);

#[tokio::test(start_paused = true)]
async fn requests_without_a_principal_never_see_each_others_tasks() {
    let calls = Calls::default();
    let tasks = layer().bind(|ext| ext.get::<User>().map(|u| u.0.to_owned()));
    let svc = stack(&tasks, &calls);
    // Bound to a principal: only its own requests see the task.
    let id = create(
        &svc,
        call(1, "sleep", json!({"ms": 60_000})).with_extension(User("ada")),
    )
    .await;
    let as_bob = send(
        &svc,
        task_req(2, "tasks/get", &id, json!({})).with_extension(User("bob")),
    )
    .await;
    assert_eq!(code(&as_bob.unwrap_err()), Some(-32602));
    // Bound to none: another request bound to none must not see it either
    // (whether such a call may become a task at all is the layer's choice).
    let Ok(created) = send(&svc, call(3, "sleep", json!({"ms": 60_000}))).await else {
        return;
    };
    if created["resultType"] != "task" {
        return;
    }
    let id = created["taskId"].as_str().unwrap();
    let other = get(&svc, id).await;
    assert_eq!(
        other.as_ref().err().and_then(code),
        Some(-32602),
        "a request with no principal read a task created with none: {other:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_inner_timeout_under_a_layer_grace_fails_the_task_with_the_timeouts_error() {
    let calls = Calls::default();
    let tasks = layer().grace(Duration::from_secs(2));
    let handle = tasks.handle();
    let inner = ServiceBuilder::new()
        .map_err(Into::<BoxError>::into)
        .layer(TimeoutLayer::new(Duration::from_secs(5)))
        .service(service_fn(tools(calls.clone())));
    let svc = tasks.layer(BoxCloneSyncService::<McpRequest, Value, BoxError>::new(
        inner,
    ));
    let id = create(&svc, call(1, "sleep", json!({"ms": 60_000}))).await;
    let got = terminal_within(&svc, &id, Duration::from_secs(5) + END_BOUND)
        .await
        .unwrap();
    assert_eq!(got["status"], "failed", "the timeout failed it: {got}");
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("timed out"), "the timeout's error: {got}");
    drained(&handle, "after the inner timeout").await;
    assert_no_panic();
}
