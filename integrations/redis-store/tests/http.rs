//! Two replicas over Streamable HTTP on loopback, sharing one Redis, and a
//! client that reaches them through a balancer without stickiness (each
//! request to the next replica): a task created through one is read and
//! cancelled through the other, and its work is dropped where it runs.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{json, Value};
use support::{probe, Probe, Redis};
use tokio::sync::oneshot;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::tasks::{TaskCallLayer, TaskPolicy, TasksLayer, EXTENSION};
use tower_mcp_cancel::transport::http::{serve, HttpClient, StreamableHttpService};
use tower_mcp_cancel::{McpRequest, TimeoutLayer};
use tower_mcp_cancel_redis::RedisStore;

const BOUND: Duration = Duration::from_secs(10);

/// The drops of the handler's futures on one replica, in call order.
#[derive(Clone, Default)]
struct Drops(Arc<Mutex<Vec<oneshot::Receiver<()>>>>);

/// Starts a replica on a free loopback port: `sleep {ms}` holds a probe.
async fn replica(redis: &Redis, shutdown: &CancellationToken) -> (HttpClient, TasksLayer, Drops) {
    let store = RedisStore::connect(redis.url()).await.unwrap();
    let tasks = TasksLayer::with_store(store)
        .default_policy(TaskPolicy::optional())
        .poll_interval(Duration::from_millis(20));
    let drops = Drops::default();
    let d = drops.clone();
    let handler = service_fn(move |req: McpRequest| {
        let (p, rx) = probe();
        d.0.lock().unwrap().push(rx);
        let req = req.with_extension::<Probe>(p);
        support::sleeper(req)
    });
    let svc =
        StreamableHttpService::new(ServiceBuilder::new().layer(tasks.clone()).service(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, svc, shutdown.clone()));
    (
        HttpClient::new(format!("http://{addr}/mcp").parse().unwrap()),
        tasks,
        drops,
    )
}

/// A balancer without stickiness: each request goes to the next replica.
#[derive(Clone)]
struct RoundRobin {
    replicas: Vec<HttpClient>,
    next: Arc<AtomicUsize>,
    /// Which replica each request went to, by method.
    log: Arc<Mutex<Vec<(String, usize)>>>,
}

impl Service<McpRequest> for RoundRobin {
    type Response = Value;
    type Error = BoxError;
    type Future = <HttpClient as Service<McpRequest>>::Future;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        let mut log = self.log.lock().unwrap();
        let n = self.next.fetch_add(1, Ordering::SeqCst) % self.replicas.len();
        // A cancel always lands where the task was not created: the worst
        // case of a balancer that knows nothing of tasks.
        let created_on = log.iter().find(|(m, _)| m == "tools/call").map(|(_, n)| *n);
        let n = match (req.method(), created_on) {
            ("tasks/cancel", Some(c)) => (c + 1) % self.replicas.len(),
            _ => n,
        };
        log.push((req.method().to_owned(), n));
        drop(log);
        self.replicas[n].call(req)
    }
}

fn declared(params: Value) -> Value {
    let mut p = params;
    p["_meta"] =
        json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}});
    p
}

#[tokio::test]
async fn a_task_created_on_one_replica_is_read_and_cancelled_on_the_other() {
    let Some(redis) = Redis::start() else { return };
    let shutdown = CancellationToken::new();
    let (mut one, one_tasks, one_drops) = replica(&redis, &shutdown).await;
    let (mut two, _, _) = replica(&redis, &shutdown).await;
    let create = McpRequest::without_id("tools/call").with_params(declared(
        json!({"name": "sleep", "arguments": {"ms": 600_000}}),
    ));
    let created = one.ready().await.unwrap().call(create).await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap().to_owned();
    let get = McpRequest::without_id("tasks/get").with_params(declared(json!({"taskId": id})));
    let got = two.ready().await.unwrap().call(get).await.unwrap();
    assert_eq!(got["status"], "working", "read on the other replica: {got}");
    let cancel =
        McpRequest::without_id("tasks/cancel").with_params(declared(json!({"taskId": id})));
    two.ready().await.unwrap().call(cancel).await.unwrap();
    let dropped = one_drops.0.lock().unwrap().remove(0);
    timeout(BOUND, dropped)
        .await
        .expect("dropped on the first replica")
        .unwrap();
    timeout(BOUND, one_tasks.handle().drained())
        .await
        .expect("drained");
    let get = McpRequest::without_id("tasks/get").with_params(declared(json!({"taskId": id})));
    let got = one.ready().await.unwrap().call(get).await.unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    shutdown.cancel();
}

#[tokio::test]
async fn through_a_balancer_without_stickiness_two_replicas_are_one_server_for_tasks() {
    let Some(redis) = Redis::start() else { return };
    let shutdown = CancellationToken::new();
    let (a, a_tasks, a_drops) = replica(&redis, &shutdown).await;
    let (b, b_tasks, b_drops) = replica(&redis, &shutdown).await;
    let balancer = RoundRobin {
        replicas: vec![a, b],
        next: Arc::default(),
        log: Arc::default(),
    };
    let call = |ms: u64| {
        McpRequest::without_id("tools/call")
            .with_params(json!({"name": "sleep", "arguments": {"ms": ms}}))
    };
    // A task that ends: created on one replica, polled on both, one result.
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(balancer.clone());
    let out = client.ready().await.unwrap().call(call(200)).await.unwrap();
    assert_eq!(out["isError"], false, "{out}");
    let log = balancer.log.lock().unwrap().clone();
    assert!(
        log.iter()
            .filter(|(m, _)| m == "tasks/get")
            .map(|(_, n)| *n)
            .collect::<std::collections::HashSet<_>>()
            .len()
            == 2,
        "polled on both replicas: {log:?}"
    );
    // A task the client gives up on: its tasks/cancel lands on the other
    // replica (round robin), and the work is dropped where it runs.
    balancer.log.lock().unwrap().clear();
    let mut client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .layer(TaskCallLayer::new())
        .service(balancer.clone());
    let err = client
        .ready()
        .await
        .unwrap()
        .call(call(600_000))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    let created_on = balancer.log.lock().unwrap()[0].1;
    let drops = if created_on == 0 { &a_drops } else { &b_drops };
    let dropped = drops.0.lock().unwrap().pop().unwrap();
    timeout(BOUND, dropped)
        .await
        .expect("the work dropped where it runs")
        .unwrap();
    let log = balancer.log.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|(m, n)| m == "tasks/cancel" && *n != created_on),
        "the cancel went to the other replica: {log:?}"
    );
    timeout(BOUND, a_tasks.handle().drained())
        .await
        .expect("a drained");
    timeout(BOUND, b_tasks.handle().drained())
        .await
        .expect("b drained");
    shutdown.cancel();
}

#[tokio::test]
async fn a_listen_on_one_replica_hears_the_changes_of_a_task_running_on_the_other() {
    use http_body_util::BodyExt;
    let Some(redis) = Redis::start() else { return };
    let shutdown = CancellationToken::new();
    let (mut one, _, _) = replica(&redis, &shutdown).await;
    let two = StreamableHttpService::new(
        ServiceBuilder::new()
            .layer(
                TasksLayer::with_store(RedisStore::connect(redis.url()).await.unwrap())
                    .poll_interval(Duration::from_millis(20)),
            )
            .service(service_fn(support::sleeper)),
    );
    let create = McpRequest::without_id("tools/call")
        .with_params(declared(json!({"name": "sleep", "arguments": {"ms": 300}})));
    let created = one.ready().await.unwrap().call(create).await.unwrap();
    let id = created["taskId"].as_str().unwrap().to_owned();
    let mut params = declared(json!({"notifications": {"taskIds": [id]}}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params});
    let listen = http::Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let res = two.oneshot(listen).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut text = String::new();
    timeout(BOUND, async {
        loop {
            let frame = body.frame().await.expect("the stream stays open").unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
            let completed = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .any(|d| {
                    serde_json::from_str::<Value>(d.trim()).is_ok_and(|m| {
                        m["method"] == "notifications/tasks" && m["params"]["status"] == "completed"
                    })
                });
            if completed {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the other replica's end was heard: {text}"));
    assert!(text.contains(&id), "{text}");
    shutdown.cancel();
}
