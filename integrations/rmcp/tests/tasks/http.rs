//! The same tasks over Streamable HTTP: `Cancellable::tasks` served by
//! rmcp's `StreamableHttpService` (stateless, JSON responses) on a loopback
//! port, called by this crate's `HttpClient` (2026-07-28): a task that never
//! looks at its token is dropped at `tasks/cancel` and at its TTL, the
//! extension is in `server/discover`, and a `tasks/cancel` whose `Mcp-Name`
//! is not its `taskId` is refused and cancels nothing.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower::ServiceBuilder;
use tower_mcp_cancel::transport::http::{serve, HttpClient};
use tower_mcp_cancel::CancelOnDisconnectLayer;

use super::*;

struct Served {
    client: HttpClient,
    addr: std::net::SocketAddr,
    events: mpsc::UnboundedReceiver<(&'static str, String)>,
}

/// `Tools` through `Cancellable` with `layer`, served on a free loopback
/// port as the example server serves it.
async fn start(layer: TasksLayer) -> Served {
    let (tx, events) = mpsc::unbounded_channel();
    let tools = Tools {
        events: tx,
        manager: None,
    };
    let handler = Cancellable::new(tools).tasks(layer);
    let observe = handler.observe_http();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let rmcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let mcp = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::http())
        .layer(observe)
        .service(rmcp);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(serve(listener, mcp, shutdown));
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    Served {
        client,
        addr,
        events,
    }
}

impl Served {
    async fn send(&self, req: McpRequest) -> Result<Value, BoxError> {
        self.client.clone().oneshot(req).await
    }

    async fn event(&mut self, kind: &str, name: &str) {
        loop {
            let (k, n) = self.events.recv().await.expect("server gone");
            if k == kind && n == name {
                return;
            }
        }
    }

    async fn get(&self, id: &str) -> Value {
        self.send(task_request("tasks/get", id, json!({})))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_task_that_never_looks_at_its_token_is_dropped_at_tasks_cancel_over_http() {
    let mut s = start(layer()).await;
    let created = s.send(declared(call("hang"))).await.unwrap();
    let id = task_id(&created);
    s.event("STARTED", "hang").await;
    let ack = s
        .send(task_request("tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    s.event("DROPPED", "hang").await;
    assert_eq!(s.get(&id).await["status"], "cancelled");
}

#[tokio::test]
async fn a_task_that_never_looks_at_its_token_is_dropped_at_its_ttl_over_http() {
    let mut s = start(layer().ttl(Some(Duration::from_millis(300)))).await;
    let created = s.send(declared(call("hang"))).await.unwrap();
    let id = task_id(&created);
    s.event("DROPPED", "hang").await;
    let task = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let task = s.get(&id).await;
            if task["status"] != "working" {
                return task;
            }
        }
    })
    .await
    .expect("the task ended within 5 s");
    assert_eq!(task["status"], "failed", "{task}");
}

#[tokio::test]
async fn server_discover_advertises_the_extension_over_http() {
    let s = start(layer()).await;
    let found = s
        .send(McpRequest::without_id("server/discover"))
        .await
        .unwrap();
    assert_eq!(
        found["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{found}"
    );
}

/// POSTs `body` with `Mcp-Method` `method` and `Mcp-Name` `name` as a
/// 2026-era client would (by hand: the clients set the right name); the
/// response's status code.
async fn post(addr: std::net::SocketAddr, method: &str, name: &str, body: &Value) -> u16 {
    let body = body.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: {method}\r\nMcp-Name: {name}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .expect("answered within 5 s")
        .unwrap();
    let head = String::from_utf8_lossy(&response);
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {head}"))
}

#[tokio::test]
async fn a_tasks_cancel_whose_mcp_name_is_not_its_task_id_is_refused_over_http() {
    let mut s = start(layer()).await;
    let created = s.send(declared(call("hang"))).await.unwrap();
    let id = task_id(&created);
    s.event("STARTED", "hang").await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let cancel = |id: &str| {
        json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel",
            "params": {"taskId": id, "_meta": meta}})
    };
    let status = post(s.addr, "tasks/cancel", "another-task", &cancel(&id)).await;
    assert_eq!(status, 400, "a mismatched Mcp-Name is refused");
    assert_eq!(s.get(&id).await["status"], "working", "and cancels nothing");
    // The same request with the task's id as its Mcp-Name is taken.
    let status = post(s.addr, "tasks/cancel", &id, &cancel(&id)).await;
    assert_eq!(status, 200);
    s.event("DROPPED", "hang").await;
    assert_eq!(s.get(&id).await["status"], "cancelled");
}
