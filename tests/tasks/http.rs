//! Tasks over Streamable HTTP: `tasks/*` must carry `Mcp-Name` = the task
//! id (checked by the server, `400` and `-32020` otherwise; sent by
//! `HttpClient`), and a task call dropped by the client's timer cancels the
//! task and drops the server's work, over loopback.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::tasks::{TaskCallLayer, TaskPolicy, TasksLayer, EXTENSION};
use tower_mcp_cancel::transport::http::{serve, HttpClient, StreamableHttpService};
use tower_mcp_cancel::{McpRequest, TimeoutLayer};

use crate::common::{handler, Probes};

fn endpoint(
    tasks: TasksLayer,
    probes: &Probes,
) -> StreamableHttpService<impl tower_mcp_cancel::transport::McpService> {
    StreamableHttpService::new(
        ServiceBuilder::new()
            .layer(tasks)
            .service(service_fn(handler(probes.clone()))),
    )
}

fn post(method: &str, params: Value, name: Option<&str>) -> Request<Full<Bytes>> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut b = Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        b = b.header("mcp-name", name);
    }
    b.body(Full::new(serde_json::to_vec(&body).unwrap().into()))
        .unwrap()
}

async fn send<S>(svc: &S, req: Request<Full<Bytes>>) -> (u16, Value)
where
    S: Service<
            Request<Full<Bytes>>,
            Response = http::Response<tower_mcp_cancel::transport::http::ResponseBody>,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    let res = svc.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn tasks_requests_must_name_their_task_in_mcp_name() {
    let probes = Probes::default();
    let tasks = TasksLayer::new().default_policy(TaskPolicy::optional());
    let svc = endpoint(tasks.clone(), &probes);
    let create = post(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 60_000}}),
        Some("sleep"),
    );
    let (status, created) = send(&svc, create).await;
    assert_eq!(status, 200, "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let params = json!({"taskId": id, "inputResponses": {}});
        for name in [None, Some("another-task")] {
            let (status, body) = send(&svc, post(method, params.clone(), name)).await;
            assert_eq!(status, 400, "{method} with Mcp-Name {name:?}: {body}");
            assert_eq!(body["error"]["code"], -32020, "{body}");
        }
    }
    let (status, got) = send(&svc, post("tasks/get", json!({"taskId": id}), Some(&id))).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["result"]["status"], "working");
    let (_, ack) = send(&svc, post("tasks/cancel", json!({"taskId": id}), Some(&id))).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
    tokio::time::timeout(Duration::from_secs(5), probes.take(0))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_task_call_dropped_by_the_clients_timer_drops_the_servers_work_over_loopback() {
    let probes = Probes::default();
    let tasks = TasksLayer::new()
        .default_policy(TaskPolicy::optional())
        .poll_interval(Duration::from_millis(20));
    let handle = tasks.handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(serve(listener, endpoint(tasks, &probes), shutdown.clone()));
    let http = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    // A task that ends: one call, its result (tasks/get carried Mcp-Name).
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(http.clone());
    let call = |ms: u64| {
        McpRequest::without_id("tools/call")
            .with_params(json!({"name": "sleep", "arguments": {"ms": ms}}))
    };
    let out = client.ready().await.unwrap().call(call(100)).await.unwrap();
    assert_eq!(out["content"][0]["text"], "slept 100 ms");
    // A task the client gives up on: its work is dropped on the server.
    let mut client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .layer(TaskCallLayer::new())
        .service(http);
    let err = client
        .ready()
        .await
        .unwrap()
        .call(call(60_000))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    tokio::time::timeout(Duration::from_secs(5), probes.take(1))
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), handle.drained())
        .await
        .unwrap();
    shutdown.cancel();
}

/// The JSON-RPC messages in the SSE text received so far.
fn sse_messages(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

#[tokio::test]
async fn a_listen_for_task_ids_gets_each_change_as_notifications_tasks() {
    let probes = Probes::default();
    let tasks = TasksLayer::new().default_policy(TaskPolicy::optional());
    let svc = endpoint(tasks, &probes);
    let create = post(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 1500}}),
        Some("sleep"),
    );
    let (_, created) = send(&svc, create).await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let listen = post(
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id, "not-a-task"]}}),
        None,
    );
    let res = svc.clone().oneshot(listen).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut text = String::new();
    let completed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let frame = body.frame().await.expect("the stream stays open").unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
            let done = sse_messages(&text).iter().any(|m| {
                m["method"] == "notifications/tasks" && m["params"]["status"] == "completed"
            });
            if done {
                return sse_messages(&text);
            }
        }
    })
    .await
    .unwrap();
    let ack = &completed[0];
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{text}"
    );
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );
    let statuses: Vec<&Value> = completed[1..]
        .iter()
        .map(|m| &m["params"]["status"])
        .collect();
    assert!(
        statuses.contains(&&json!("working")),
        "a status message while it ran: {text}"
    );
    let last = completed.last().unwrap();
    assert_eq!(last["params"]["taskId"], json!(id));
    assert_eq!(
        last["params"]["result"]["content"][0]["text"],
        "slept 1500 ms"
    );
    assert!(
        completed
            .iter()
            .all(|m| m["method"] != "notifications/progress"),
        "{text}"
    );
}

#[tokio::test]
async fn a_listen_under_the_longest_polling_interval_still_hears_a_change() {
    let probes = Probes::default();
    let tasks = TasksLayer::new()
        .default_policy(TaskPolicy::optional())
        .poll_interval(Duration::MAX);
    let svc = endpoint(tasks, &probes);
    let create = post(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 300}}),
        Some("sleep"),
    );
    let (_, created) = send(&svc, create).await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let listen = post(
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id]}}),
        None,
    );
    let res = svc.clone().oneshot(listen).await.unwrap();
    let mut body = res.into_body();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let frame = body.frame().await.expect("the stream stays open").unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
            if sse_messages(&text).iter().any(|m| {
                m["method"] == "notifications/tasks" && m["params"]["status"] == "completed"
            }) {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no completion heard: {text}"));
}
