//! The client layer over the server layer, in one process, on the paused
//! clock: a task is one call; the timer layers above the client bound the
//! whole task, and their expiry drops the server's work.

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::error::Elapsed;
use tower_mcp_cancel::tasks::{KeepTaskHandle, TaskCallLayer, TaskPolicy, TasksHandle, TasksLayer};
use tower_mcp_cancel::{Limit, McpRequest, ProgressResetLayer, TimeoutLayer};

use crate::common::{handler, Probes};

type Transport = BoxCloneSyncService<McpRequest, Value, BoxError>;

/// The server (tasks layer over the test tools) as a client transport.
pub(crate) fn server() -> (Transport, TasksHandle, Probes) {
    let probes = Probes::default();
    let tasks = TasksLayer::new()
        .default_policy(TaskPolicy::optional())
        .poll_interval(Duration::from_millis(100));
    let handle = tasks.handle();
    let svc = ServiceBuilder::new()
        // What crosses the wire: the method and params, none of the
        // caller's per-request values.
        .map_request(|r: McpRequest| {
            let mut wire = McpRequest::new(1, r.method());
            wire.set_raw_params(r.params().map(ToOwned::to_owned));
            wire
        })
        .layer(tasks)
        .service(service_fn(handler(probes.clone())))
        .map_response(|r| serde_json::to_value(r).unwrap());
    (BoxCloneSyncService::new(svc), handle, probes)
}

fn call(tool: &str, args: Value) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": tool, "arguments": args}))
}

async fn run<S>(mut svc: S, req: McpRequest) -> Result<Value, BoxError>
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    svc.ready().await?.call(req).await
}

#[tokio::test(start_paused = true)]
async fn a_task_is_one_call_that_resolves_with_its_result() {
    let (transport, handle, _probes) = server();
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(transport.clone());
    let start = tokio::time::Instant::now();
    let out = run(client, call("sleep", json!({"ms": 3000})))
        .await
        .unwrap();
    assert_eq!(out["content"][0]["text"], "slept 3000 ms");
    assert!(start.elapsed() >= Duration::from_secs(3));
    assert!(
        start.elapsed() < Duration::from_millis(3200),
        "polled at the server's interval"
    );
    assert_eq!(handle.running(), 0);
    // The handle instead of the result, for a caller that polls itself.
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(transport);
    let created = run(
        client,
        call("sleep", json!({"ms": 3000})).with_extension(KeepTaskHandle),
    )
    .await
    .unwrap();
    assert_eq!(created["resultType"], "task");
    assert_eq!(handle.running(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_above_the_client_cancels_the_task_and_drops_the_servers_work() {
    let (transport, handle, probes) = server();
    let client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .layer(TaskCallLayer::new())
        .service(transport);
    let start = tokio::time::Instant::now();
    let err = run(client, call("sleep", json!({"ms": 60_000})))
        .await
        .unwrap_err();
    let elapsed = err.downcast_ref::<Elapsed>().expect("the timeout's error");
    assert_eq!(elapsed.limit(), Limit::Timeout);
    probes.take(0).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "dropped at the client's deadline"
    );
    handle.drained().await;
}

#[tokio::test(start_paused = true)]
async fn the_tasks_status_changes_reset_a_progress_idle_limit() {
    // The tool reports a status every second: an idle limit of 1.5 s holds...
    let (transport, _handle, _probes) = server();
    let client = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(1500)))
        .layer(TaskCallLayer::new())
        .service(transport);
    let out = run(client, call("sleep", json!({"ms": 5000})))
        .await
        .unwrap();
    assert_eq!(out["content"][0]["text"], "slept 5000 ms");
    // ...one of 0.5 s fires, and the task is cancelled.
    let (transport, handle, probes) = server();
    let client = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(500)))
        .layer(TaskCallLayer::new())
        .service(transport);
    let err = run(client, call("sleep", json!({"ms": 5000})))
        .await
        .unwrap_err();
    assert_eq!(err.downcast_ref::<Elapsed>().unwrap().limit(), Limit::Idle);
    probes.take(0).await.unwrap();
    handle.drained().await;
}

#[tokio::test(start_paused = true)]
async fn input_requests_are_answered_by_the_clients_handler() {
    let (transport, _handle, _probes) = server();
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new().on_input(|requests| async move {
            assert!(requests.contains_key("name"));
            let mut answers = serde_json::Map::new();
            answers.insert(
                "name".into(),
                json!({"action": "accept", "content": {"name": "Luca"}}),
            );
            answers
        }))
        .service(transport);
    let out = run(client, call("ask", json!({}))).await.unwrap();
    assert_eq!(out["content"][0]["text"], "Hello, Luca!");
    // Without a handler the call fails, and the task is cancelled.
    let (transport, handle, probes) = server();
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(transport);
    let err = run(client, call("ask", json!({}))).await.unwrap_err();
    assert!(err.to_string().contains("no input handler"), "{err}");
    probes.take(0).await.unwrap();
    handle.drained().await;
}
