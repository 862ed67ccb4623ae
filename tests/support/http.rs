//! Shared pieces of the HTTP integration tests: a loopback server (hyper,
//! HTTP/1.1 or HTTP/2), a test MCP service that records what happens to its
//! handlers (`test_util::Recorder`), and raw-request helpers.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::BoxError;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::Recorder;
use tower_mcp_cancel::transport::http::StreamableHttpService;
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest};

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(10);

/// What happened to a handler: the library's recorder events.
pub use tower_mcp_cancel::test_util::{Event, Events};

/// The note a served connection's end is recorded as.
pub const CONN_CLOSED: Event = Event::Note("connection closed");

/// Shared state of the test service.
#[derive(Clone)]
pub struct Tools {
    recorder: Recorder,
    /// Released by the test to let `wait_release` handlers finish.
    pub release: Arc<Notify>,
    /// The last request's cancellation, for inspection.
    pub last: Arc<std::sync::Mutex<Option<Cancellation>>>,
}

impl Tools {
    /// The tools and the receiving end of their events.
    pub fn new() -> (Self, Events) {
        let (recorder, events) = Recorder::new();
        (
            Self {
                recorder,
                release: Arc::new(Notify::new()),
                last: Arc::default(),
            },
            events.with_bound(WAIT),
        )
    }

    /// The recorder, for other events (connections).
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// The MCP service. `tools/call` tools (by `params.name`):
    /// * `echo {text}` — answers at once;
    /// * `notify` — sends a `notifications/message`, then answers;
    /// * `hang {notify: bool}` — optionally sends a notification, then never answers;
    /// * `progress {steps, ms}` — progress every `ms`, then answers;
    /// * `quiet_then {ms}` — one `notifications/message`, then silence for `ms`, then answers;
    /// * `give_up {notify: bool}` — optionally notifies, then ends as `Cancelled` on its own;
    /// * `wait_release` — waits until the test releases it.
    ///
    /// Every call spawns a watcher reporting when the token fires. Any other
    /// method: `-32601`, except `subscriptions/listen`, which acknowledges and
    /// then waits forever.
    pub fn service(
        &self,
    ) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send>
           + Clone
           + Send
           + Sync
           + 'static {
        let tools = self.clone();
        service_fn(move |req: McpRequest| {
            let tools = tools.clone();
            async move { tools.handle(req).await }
        })
    }

    async fn handle(self, req: McpRequest) -> Result<Value, BoxError> {
        let id = req.id().cloned().expect("server requests have ids");
        let ctx = RequestContext::of(&req);
        if let Some(c) = ctx.cancellation() {
            *self.last.lock().unwrap() = Some(c.clone());
        }
        self.recorder.watch_token(&req);
        let probe = self.recorder.start(&req);
        let params: Value = req.params_as().unwrap_or_default();
        let args = &params["arguments"];
        let out = match req.method() {
            "tools/call" => match params["name"].as_str().unwrap_or("") {
                "echo" | "héllo wörld" => {
                    json!({"resultType": "complete", "content": [{"type": "text", "text": args["text"]}]})
                }
                "notify" => {
                    ctx.notify(
                        "notifications/message",
                        &json!({"level": "info", "data": "working"}),
                    )
                    .await;
                    json!({"resultType": "complete", "notified": true})
                }
                "hang" => {
                    if args["notify"].as_bool().unwrap_or(false) {
                        ctx.notify(
                            "notifications/message",
                            &json!({"level": "info", "data": "started"}),
                        )
                        .await;
                    }
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                "progress" => {
                    let steps = args["steps"].as_u64().unwrap_or(5);
                    let ms = args["ms"].as_u64().unwrap_or(50);
                    for step in 1..=steps {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        ctx.progress(step as f64, Some(steps as f64), None).await;
                    }
                    json!({"resultType": "complete", "steps": steps})
                }
                "quiet_then" => {
                    ctx.notify(
                        "notifications/message",
                        &json!({"level": "info", "data": "going quiet"}),
                    )
                    .await;
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(1000)))
                        .await;
                    json!({"resultType": "complete"})
                }
                "give_up" => {
                    // Ends as Cancelled on its own, optionally after a
                    // notification (an SSE response); nobody cancelled it.
                    if args["notify"].as_bool().unwrap_or(false) {
                        ctx.notify(
                            "notifications/message",
                            &json!({"level": "info", "data": "trying"}),
                        )
                        .await;
                    }
                    probe.finish();
                    return Err(Box::new(tower_mcp_cancel::Cancelled::new(
                        CancelReason::Other("the handler gave up".into()),
                    )));
                }
                "wait_release" => {
                    self.release.notified().await;
                    json!({"resultType": "complete", "released": true})
                }
                other => {
                    probe.finish();
                    return Err(Box::new(tower_mcp_cancel::jsonrpc::ErrorObject::new(
                        -32602,
                        format!("unknown tool {other}"),
                    )));
                }
            },
            "subscriptions/listen" => {
                ctx.notify(
                    "notifications/subscriptions/acknowledged",
                    &json!({"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": {"toolsListChanged": true}}),
                )
                .await;
                std::future::pending::<()>().await;
                unreachable!()
            }
            _ => {
                probe.finish();
                return Err(Box::new(tower_mcp_cancel::jsonrpc::ErrorObject::new(
                    -32601,
                    "Method not found",
                )));
            }
        };
        probe.finish();
        Ok(out)
    }
}

/// Which HTTP version a test server speaks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Proto {
    /// HTTP/1.1.
    H1,
    /// HTTP/2 with prior knowledge.
    H2,
}

/// Serves `svc` on 127.0.0.1 (a free port); each connection's end is
/// recorded as [`CONN_CLOSED`] on `closed`.
pub async fn serve<S, B>(svc: S, proto: Proto, closed: Recorder) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let svc = svc.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                let hyper_svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                let io = TokioIo::new(stream);
                match proto {
                    Proto::H1 => {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, hyper_svc)
                            .await;
                    }
                    Proto::H2 => {
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, hyper_svc)
                            .await;
                    }
                }
                closed.record(CONN_CLOSED);
            });
        }
    });
    addr
}

/// Serves the test tools behind a [`StreamableHttpService`] configured by `f`.
pub async fn serve_tools(
    proto: Proto,
    f: impl FnOnce(StreamableHttpService<()>) -> StreamableHttpService<()>,
) -> (SocketAddr, Tools, Events) {
    let (tools, events) = Tools::new();
    let template = f(StreamableHttpService::new(()));
    let svc = tower::Layer::layer(&template, tools.service());
    let addr = serve(svc, proto, tools.recorder()).await;
    (addr, tools, events)
}

/// The body of a modern `tools/call` request.
pub fn tool_call(id: i64, name: &str, args: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": name, "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    })
}

/// Raw HTTP/1.1 request text for a POST of `body` with the standard headers
/// for `method`/`name`, plus `extra` header lines.
pub fn raw_post(body: &Value, extra: &[(&str, &str)]) -> Vec<u8> {
    let body = serde_json::to_vec(body).unwrap();
    let mut head = String::from("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The headers a conforming client sends for a modern tools/call of `name`.
pub fn modern_headers(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
        ("MCP-Protocol-Version", "2026-07-28".into()),
        ("Mcp-Method", "tools/call".into()),
        ("Mcp-Name", name.into()),
    ]
}

/// Reads from a raw socket until `needle` has been seen (bounded).
pub async fn read_until(stream: &mut tokio::net::TcpStream, needle: &str) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        loop {
            if String::from_utf8_lossy(&buf).contains(needle) {
                return;
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "connection closed before {needle:?}: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "timed out waiting for {needle:?}: {}",
            String::from_utf8_lossy(&buf)
        )
    });
    String::from_utf8_lossy(&buf).into_owned()
}

/// A client connection driven by hyper's low-level API, so a test controls
/// exactly when a response (future or body) is dropped.
pub enum Conn {
    /// HTTP/1.1.
    H1(hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>),
    /// HTTP/2.
    H2(hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>),
}

impl Conn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr, proto: Proto) -> Self {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = TokioIo::new(stream);
        match proto {
            Proto::H1 => {
                let (tx, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(conn);
                Conn::H1(tx)
            }
            Proto::H2 => {
                let (tx, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                Conn::H2(tx)
            }
        }
    }

    /// Sends a request.
    pub fn send(
        &mut self,
        req: Request<http_body_util::Full<bytes::Bytes>>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = hyper::Result<Response<Incoming>>> + Send>,
    > {
        match self {
            Conn::H1(tx) => Box::pin(tx.send_request(req)),
            Conn::H2(tx) => Box::pin(tx.send_request(req)),
        }
    }
}

/// A POST of `body` to /mcp with `headers`.
pub fn post(
    body: &Value,
    headers: &[(&str, String)],
) -> Request<http_body_util::Full<bytes::Bytes>> {
    let mut b = Request::post("http://127.0.0.1/mcp");
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    b.body(http_body_util::Full::new(bytes::Bytes::from(
        serde_json::to_vec(body).unwrap(),
    )))
    .unwrap()
}

/// Reads a whole body as a string (bounded).
pub async fn text(res: Response<Incoming>) -> String {
    use http_body_util::BodyExt;
    let body = tokio::time::timeout(WAIT, res.into_body().collect())
        .await
        .expect("timed out reading a body")
        .unwrap()
        .to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// A call with a bounded wait.
pub async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

/// A raw HTTP/1.1 server on loopback: it reads each request whole (head
/// and `Content-Length` body) from every connection, records its text, then
/// writes `response` (when given) and closes the connection. Without a
/// response, each request ends in a closed connection: a transport error
/// for the client. A request is recorded before its connection closes, so
/// once the client has seen the close every request it sent is recorded.
pub async fn raw_server(
    response: Option<Vec<u8>>,
) -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            record.lock().unwrap().push(text);
                            break;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                if let Some(response) = response {
                    let _ = s.write_all(&response).await;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, seen)
}

/// A raw HTTP/1.1 response with `status`, a JSON content type and `body`.
pub fn raw_response(status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A request to an in-process endpoint at `/mcp`, as a 2025-era client
/// sends it within `session` (its id and its protocol version), or
/// outside one.
pub fn session_request(
    method: http::Method,
    body: Option<&Value>,
    session: Option<&str>,
) -> Request<http_body_util::Full<bytes::Bytes>> {
    let mut b = Request::builder()
        .method(method)
        .uri("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        b = b
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let body = body
        .map(|b| serde_json::to_vec(b).unwrap())
        .unwrap_or_default();
    b.body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap()
}
