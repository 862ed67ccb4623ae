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

/// rmcp's `StreamableHttpService` of `handler`, as the example server
/// configures it: stateless, JSON responses.
fn stateless<H: ServerHandler + Clone>(
    handler: H,
) -> StreamableHttpService<H, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
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
    let rmcp = stateless(handler);
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

    /// Polls `tasks/get` for task `id` until its status is `status`, at
    /// most 5 s.
    async fn until(&self, id: &str, status: &str) -> Value {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let task = self.get(id).await;
                if task["status"] == status {
                    return task;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("not {status} within 5 s"))
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
async fn a_tasks_input_request_reaches_the_client_and_its_answer_the_handler_over_http() {
    let s = start(layer()).await;
    let created = s.send(declared(call("ask"))).await.unwrap();
    let id = task_id(&created);
    let task = s.until(&id, "input_required").await;
    assert_eq!(
        task["inputRequests"]["name"]["method"],
        "elicitation/create"
    );
    let answer = json!({"name": {"action": "accept", "content": {"name": "Ada"}}});
    let update = task_request("tasks/update", &id, json!({"inputResponses": answer}));
    s.send(update).await.unwrap();
    let task = s.until(&id, "completed").await;
    assert_eq!(task["result"]["content"][0]["text"], "hello Ada", "{task}");
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

/// The client side over Streamable HTTP: `TaskCallLayer` over an
/// `RmcpClient` whose transport is rmcp's own Streamable HTTP client (over a
/// Unix socket in a fresh directory), calling `handler` served by rmcp's
/// `StreamableHttpService`, which records the `Mcp-Method` and `Mcp-Name`
/// headers of every POST.
mod rmcp_client {
    use std::sync::atomic::{AtomicU32, Ordering};

    use rmcp::model::ProtocolVersion;
    use rmcp::service::ClientLifecycleMode;
    use rmcp::transport::StreamableHttpClientTransport;

    use super::*;

    type Headers = Arc<Mutex<Vec<(String, String)>>>;

    struct Socket(std::path::PathBuf);

    impl Drop for Socket {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Serves `handler` on a Unix socket; an rmcp client of it; the
    /// headers seen; the directory, removed when dropped.
    async fn serve_unix<H: ServerHandler + Clone>(
        handler: H,
    ) -> (
        RmcpClient,
        RunningService<RoleClient, RouteProgress<()>>,
        Headers,
        Socket,
    ) {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tmc-rmcp-tasks-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mcp.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let rmcp = stateless(handler);
        let headers = Headers::default();
        let seen = headers.clone();
        let mcp = ServiceBuilder::new()
            .map_request(move |req: ::http::Request<axum::body::Body>| {
                let header = |n: &str| {
                    req.headers()
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                let pair = (header("mcp-method"), header("mcp-name"));
                seen.lock().unwrap().push(pair);
                req
            })
            .service(rmcp);
        let app = axum::Router::new().route_service("/mcp", mcp);
        tokio::spawn(async move { axum::serve(listener, app).await });
        let transport = StreamableHttpClientTransport::from_unix_socket(
            path.to_str().unwrap(),
            "http://localhost/mcp",
        );
        // The 2026-07-28 lifecycle (`server/discover`): rmcp's client sends
        // the standard headers only from that revision on.
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let running = tokio::time::timeout(
            Duration::from_secs(10),
            rmcp::service::serve_client_with_lifecycle(
                RouteProgress::new(()),
                transport,
                lifecycle,
            ),
        )
        .await
        .expect("the client started within 10 s")
        .unwrap();
        (RmcpClient::new(&running), running, headers, Socket(dir))
    }

    /// Calls `hang` through `TaskCallLayer`, drops the call once it polls,
    /// waits for the handler's drop, and checks that the server received
    /// one `tasks/cancel`, whose `Mcp-Name` is the task's id.
    async fn drop_a_task_call<H: ServerHandler + Clone>(
        handler: H,
        events: &mut mpsc::UnboundedReceiver<(&'static str, String)>,
    ) {
        let (client, _running, headers, _socket) = serve_unix(handler).await;
        let (client, mut polled) = polling(client);
        let pending = tokio::spawn(client.oneshot(call("hang")));
        let task = polled.recv().await.expect("polled");
        pending.abort();
        loop {
            let (k, n) = events.recv().await.expect("server gone");
            if k == "DROPPED" && n == "hang" {
                break;
            }
        }
        let headers = headers.lock().unwrap();
        let cancels: Vec<_> = headers
            .iter()
            .filter(|(method, _)| method == "tasks/cancel")
            .map(|(_, name)| name.clone())
            .collect();
        assert!(!task.is_empty());
        assert_eq!(
            cancels,
            [task],
            "one tasks/cancel, with the task's id as Mcp-Name"
        );
    }

    fn tools(
        manager: Option<TaskManager>,
    ) -> (Tools, mpsc::UnboundedReceiver<(&'static str, String)>) {
        let (tx, events) = mpsc::unbounded_channel();
        let tools = Tools {
            events: tx,
            manager,
        };
        (tools, events)
    }

    #[tokio::test]
    async fn a_dropped_task_call_sends_tasks_cancel_with_mcp_name_to_this_crates_server() {
        let (tools, mut events) = tools(None);
        let handler = Cancellable::new(tools).tasks(layer());
        drop_a_task_call(handler, &mut events).await;
    }

    #[tokio::test]
    async fn a_dropped_task_call_sends_tasks_cancel_with_mcp_name_to_rmcps_task_manager() {
        let (tools, mut events) = tools(Some(TaskManager::new()));
        drop_a_task_call(tools, &mut events).await;
    }

    #[tokio::test]
    async fn a_task_call_is_one_call_over_http() {
        let (tools, _events) = tools(None);
        let handler = Cancellable::new(tools).tasks(layer());
        let (client, _running, headers, _socket) = serve_unix(handler).await;
        nap_as_one_call(client).await;
        let headers = headers.lock().unwrap();
        assert!(
            headers
                .iter()
                .any(|(m, n)| m == "tasks/get" && !n.is_empty()),
            "polled with Mcp-Name: {headers:?}"
        );
    }
}
