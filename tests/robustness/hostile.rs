//! Hostile peers: what one misbehaving peer can do, and that it stays
//! within its own connection and within bounded memory.
//!
//! * a 1 MiB `notifications/cancelled` reason full of control characters
//!   reaches the logs truncated and sanitized, and so do method names and ids
//!   from the wire, in log lines and span fields, bounded in length (here,
//!   with the allocator and the test service that the other files share);
//! * a cancel for another connection's id affects nothing on the other
//!   ([`crate::hostile_cancels`]);
//! * an oversize message is refused with bounded memory
//!   ([`crate::hostile_input`]);
//! * what a peer cannot make the server hold ([`crate::hostile_holding`]).
//!
//! Memory is measured by a counting global allocator that keeps, per thread,
//! the bytes currently allocated and their peak. Every test here runs on a
//! current-thread runtime, so the server, the peer and their tasks all
//! allocate on the test's thread, and tests running in parallel on other
//! threads do not disturb the figures.
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::support::http as http_support;
use crate::support::stdio as stdio_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::{pipe, Peer, BOUND};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::BoxError;
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest};

// ---------------------------------------------------------------------------
// A counting allocator: live bytes and their peak, per thread.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

// SAFETY: every method forwards to the system allocator unchanged; the
// bookkeeping touches only const-initialized thread-locals without
// destructors (and tolerates their absence), so it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes allocated on this thread right now (relative to an arbitrary zero).
pub(crate) fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Starts a peak measurement: the peak is reset to the current level, which
/// is returned as the baseline.
pub(crate) fn start_peak() -> isize {
    let now = live();
    PEAK.with(|p| p.set(now));
    now
}

/// The highest level since [`start_peak`], above `baseline`.
pub(crate) fn peak_above(baseline: isize) -> isize {
    PEAK.with(Cell::get) - baseline
}

pub(crate) const KIB: isize = 1024;
pub(crate) const MIB: isize = 1024 * 1024;

// ---------------------------------------------------------------------------
// A test service: every `work` call reports itself and waits.

/// One started handler: the connection it says it came from, its id, the
/// probe watching its future, its cancellation.
pub(crate) struct Started {
    pub(crate) conn: String,
    pub(crate) id: String,
    pub(crate) probe: DropProbe,
    pub(crate) cancellation: Cancellation,
}

/// `tools/call` with `{name: "work", arguments: {conn, ms}}` reports
/// [`Started`], waits `ms` (forever when absent), and answers with its
/// connection tag; `ping` answers `{}` at once; `echo` answers its params.
pub(crate) fn work_service(
    tx: mpsc::UnboundedSender<Started>,
) -> impl tower::Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl std::future::Future<Output = Result<Value, BoxError>> + Send,
> + Clone
       + Send
       + Sync
       + 'static {
    service_fn(move |req: McpRequest| {
        let tx = tx.clone();
        async move {
            match req.method() {
                "ping" => return Ok(json!({})),
                "echo" => return Ok(json!({"params": req.params_as::<Value>().ok()})),
                _ => {}
            }
            let params: Value = req.params_as().unwrap_or_default();
            let conn = params["arguments"]["conn"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let ms = params["arguments"]["ms"].as_u64();
            let (probe, guard) = DropProbe::new();
            let cancellation = RequestContext::of(&req)
                .cancellation()
                .cloned()
                .expect("a transport sets a Cancellation");
            let _ = tx.send(Started {
                conn: conn.clone(),
                id: req.id().map(|i| i.to_string()).unwrap_or_default(),
                probe,
                cancellation,
            });
            match ms {
                Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                None => std::future::pending::<()>().await,
            }
            guard.finish();
            Ok(json!({"resultType": "complete", "conn": conn}))
        }
    })
}

pub(crate) async fn next_started(rx: &mut mpsc::UnboundedReceiver<Started>) -> Started {
    tokio::time::timeout(BOUND, rx.recv())
        .await
        .expect("a handler should have started")
        .expect("service gone")
}

pub(crate) fn work(id: Value, conn: &str, ms: Option<u64>) -> Value {
    let mut args = json!({"conn": conn});
    if let Some(ms) = ms {
        args["ms"] = json!(ms);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "work", "arguments": args}})
}

pub(crate) struct Conn {
    pub(crate) peer: Peer,
    pub(crate) registry: InFlight,
    pub(crate) served: JoinHandle<io::Result<()>>,
}

/// Serves `svc` (a clone of one shared service) on a new in-memory stdio
/// connection configured by `cfg`.
pub(crate) fn connect<S>(svc: S, cfg: StdioServer, buf: usize) -> Conn
where
    S: tower::Service<McpRequest, Response = Value, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let registry = InFlight::new();
    let (peer, r, w) = pipe(buf);
    let cfg = cfg.in_flight(registry.clone());
    let served = tokio::spawn(async move { cfg.serve(svc, r, w).await });
    Conn {
        peer,
        registry,
        served,
    }
}

// ---------------------------------------------------------------------------
// Reasons in logs.

/// A `MakeWriter` collecting everything into one shared buffer.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// What was logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Everything this thread logs, at every level, as text (no colours), with
/// each span's close event when `span_closes`; logging stops with the guard.
pub(crate) fn capture_logs(span_closes: bool) -> (Captured, tracing::subscriber::DefaultGuard) {
    use tracing_subscriber::fmt::format::FmtSpan;
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_span_events(if span_closes {
            FmtSpan::CLOSE
        } else {
            FmtSpan::NONE
        })
        .with_max_level(tracing::Level::TRACE)
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(start_paused = true)]
async fn a_huge_reason_with_control_characters_is_truncated_and_sanitized_in_logs() {
    // This thread only; the runtime is current-thread, so every task of the
    // server logs here.
    let (logs, _guard) = capture_logs(false);

    // 1 MiB of text with C0 and C1 controls, escapes, NUL, DEL, CR/LF.
    let unit = "ok\u{0}\n\r\u{1b}[31mRED\u{7}\u{8}\u{7f}\u{85}\u{9b}\t é";
    let mut reason = String::new();
    while reason.len() < 1 << 20 {
        reason.push_str(unit);
    }
    // The crate's one sanitizer, as a peer's reason is stored.
    let expected = match tower_mcp_cancel::CancelReason::peer(Some(&reason)) {
        tower_mcp_cancel::CancelReason::Peer(Some(r)) => r,
        other => panic!("a peer's reason is a peer reason: {other:?}"),
    };

    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut conn = connect(work_service(tx), StdioServer::new(), 64 * 1024);
    conn.peer.send(work(json!(1), "A", None)).await;
    let started = next_started(&mut rx).await;
    // For the running request, for an unknown id, and again for the
    // (now finished) first one.
    for id in [json!(1), json!(404), json!(1)] {
        conn.peer
            .send(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason}}),
            )
            .await;
    }
    assert_eq!(conn.peer.sync(json!("s")).await.len(), 1);
    settle().await;
    assert!(started.probe.was_cancelled());
    assert_eq!(
        started.cancellation.reason(),
        Some(&CancelReason::Peer(Some(expected.clone())))
    );
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();

    let out = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let with_reason = lines.iter().filter(|l| l.contains(&expected)).count();
    eprintln!(
        "logs: {} lines, {} bytes, longest {} bytes, {with_reason} carrying the reason",
        lines.len(),
        out.len(),
        lines.iter().map(|l| l.len()).max().unwrap_or(0)
    );
    assert!(
        with_reason >= 3,
        "each cancel was logged with its (sanitized, truncated) reason:\n{out}"
    );
    assert!(
        out.len() < 64 * 1024,
        "{} bytes of logs for 3 MiB of reasons",
        out.len()
    );
    for line in &lines {
        assert!(line.len() < 2048, "a log line of {} bytes", line.len());
        assert!(
            !line.chars().any(char::is_control),
            "a control character reached the logs: {line:?}"
        );
        assert!(
            !line.contains("\\x1b") && !line.contains("\\u{1b}"),
            "the crate must sanitize, not leave it to the subscriber: {line:?}"
        );
    }
}

/// Asserts that captured log output has no control character in any line.
fn assert_clean_logs(out: &str) {
    for line in out.lines() {
        assert!(
            !line.chars().any(char::is_control),
            "a control character reached the logs: {line:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn method_names_and_ids_from_the_wire_carry_no_control_characters_into_logs() {
    use http_support::{raw_post, read_until, Proto};
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let (logs, _guard) = capture_logs(false);
    let evil = "evil\n2026-01-01T00:00:00Z  INFO forged line\r\u{1b}[31m\u{0}\u{85}";

    // stdio server: a notification, a request and a cancel, all with
    // control characters in their method or id.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut conn = connect(work_service(tx), StdioServer::new(), 64 * 1024);
    conn.peer
        .send(json!({"jsonrpc": "2.0", "method": evil}))
        .await;
    conn.peer
        .send(json!({"jsonrpc": "2.0", "id": evil, "method": evil}))
        .await;
    let started = next_started(&mut rx).await;
    conn.peer
        .send(json!({"jsonrpc": "2.0", "id": evil, "method": evil}))
        .await; // a duplicate id
    assert_eq!(conn.peer.recv().await.unwrap()["error"]["code"], -32600);
    conn.peer
        .cancel(json!(format!("{evil}-unknown")), evil)
        .await;
    conn.peer.cancel(json!(evil), evil).await;
    conn.peer.sync(json!("s")).await;
    settle().await;
    assert!(started.probe.was_cancelled());
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();

    // HTTP server: a notification with such a method.
    let (tx, _rx) = mpsc::unbounded_channel();
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(
        StreamableHttpService::new(work_service(tx)),
        Proto::H1,
        closed_tx,
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&raw_post(
        &json!({"jsonrpc": "2.0", "method": evil}),
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
        ],
    ))
    .await
    .unwrap();
    assert!(read_until(&mut s, "\r\n\r\n")
        .await
        .starts_with("HTTP/1.1 202"));

    // stdio client: a hostile server sends a request and a notification.
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    peer.send(json!({"jsonrpc": "2.0", "id": evil, "method": evil}))
        .await;
    peer.send(json!({"jsonrpc": "2.0", "method": evil})).await;
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "ping")));
    let v = peer.recv().await.unwrap();
    assert_eq!(v["id"], 1);
    peer.send(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        .await;
    call.await.unwrap().unwrap();

    let out = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        out.contains("forged line"),
        "the strings were logged:\n{out}"
    );
    assert_clean_logs(&out);
}

/// Every log line and every span field a peer's text reaches is bounded,
/// not only free of control characters: 1 MB ids, methods, tool and prompt
/// names on the stdio and HTTP servers (the request spans, recorded here at
/// their close), a 1 MB `_meta` budget value, a 1 MB disallowed `Origin`
/// and a 1 MB error message without an id sent to the stdio client give
/// lines of a few kilobytes at most.
#[tokio::test(start_paused = true)]
async fn peer_text_in_log_lines_and_span_fields_is_bounded() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let (logs, _guard) = capture_logs(true);
    let huge = format!("evil\n\u{1b}[31mforged\u{0}{}\r\n", "x".repeat(1 << 20));
    let answer = || service_fn(|_req: McpRequest| async { Ok::<_, BoxError>(json!({})) });

    // stdio server: a huge id, method, tool name, prompt name and budget.
    let server = StdioServer::new().budget_key("com.example/budget").unwrap();
    let mut conn = connect(answer(), server, 64 * 1024);
    let requests = [
        json!({"jsonrpc": "2.0", "id": huge, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping",
            "params": {"_meta": {"com.example/budget": huge}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": huge}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": huge, "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/get",
            "params": {"name": huge}}),
    ];
    for (n, req) in requests.iter().enumerate() {
        conn.peer.send(req.clone()).await;
        let v = conn.peer.recv().await.unwrap();
        assert!(
            v.get("result").is_some() || v.get("error").is_some(),
            "{n}: {v}"
        );
    }
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();

    // HTTP server (2025 requests: no Mcp-Name to match): the same fields.
    let ep = StreamableHttpService::new(answer());
    for mut req in requests {
        req["id"] = if req["id"] == json!(huge) {
            json!(huge)
        } else {
            json!(7)
        };
        let http_req = http::Request::post("http://127.0.0.1/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .body(Full::new(Bytes::from(serde_json::to_vec(&req).unwrap())))
            .unwrap();
        let res = ep.clone().oneshot(http_req).await.unwrap();
        let _ = res.into_body().collect().await;
    }
    // A disallowed Origin of 1 MB is logged too.
    let http_req = http::Request::post("http://127.0.0.1/mcp")
        .header("origin", format!("http://{}", "o".repeat(1 << 20)))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        )))
        .unwrap();
    assert_eq!(ep.clone().oneshot(http_req).await.unwrap().status(), 403);

    // stdio client: a server error without an id, then an answered call
    // (read after it, so the error has been logged by then).
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    peer.send(json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32700, "message": huge}}))
        .await;
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "ping")));
    let v = peer.recv().await.unwrap();
    peer.send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {}}))
        .await;
    call.await.unwrap().unwrap();

    let out = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for what in [
        "mcp.server.request",
        "jsonrpc.request.id=\"evil",
        "mcp.method.name=\"evil",
        "gen_ai.tool.name=\"evil",
        "gen_ai.prompt.name=\"evil",
        "could not read",
        "disallowed Origin",
        "request budget ignored",
    ] {
        assert!(
            out.contains(what),
            "{what} was logged:\n{}",
            &out[..out.len().min(4096)]
        );
    }
    assert_clean_logs(&out);
    for line in out.lines() {
        assert!(
            line.chars().count() < 4096,
            "a line of {} characters: {}…",
            line.len(),
            line.chars().take(300).collect::<String>()
        );
    }
}

/// A server's `tools/list` is peer text for `HttpClient`: a tool whose
/// `x-mcp-header` annotation is invalid is logged and removed, and the
/// warning quotes the tool's name, the schema's JSON pointer (property
/// names), a `type`, a keyword and duplicate annotations — each bounded
/// and free of control characters.
#[tokio::test(start_paused = true)]
async fn a_servers_tool_schemas_reach_the_client_logs_bounded_and_clean() {
    use http_support::Proto;
    use tower::Service;
    use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};

    let (logs, _guard) = capture_logs(false);
    let huge = format!("evil\n\u{1b}[31mforged\u{0}{}\r\n", "x".repeat(1 << 20));
    let token = "h".repeat(1 << 20);
    let tools = json!({"tools": [
        {"name": "bad_type", "inputSchema": {"type": "object", "properties": {
            huge.clone(): {"type": huge, "x-mcp-header": "A"}}}},
        {"name": "bad_keyword", "inputSchema": {"type": "object", "properties": {
            "p": {huge.clone(): {"type": "string", "x-mcp-header": "B"}}}}},
        {"name": "duplicate", "inputSchema": {"type": "object", "properties": {
            "p": {"type": "string", "x-mcp-header": token.to_uppercase()},
            "q": {"type": "string", "x-mcp-header": token}}}},
        {"name": "fine", "inputSchema": {"type": "object"}}
    ]});
    let mcp = service_fn(move |_req: McpRequest| {
        let tools = tools.clone();
        async move { Ok::<_, BoxError>(tools) }
    });
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(StreamableHttpService::new(mcp), Proto::H1, closed_tx).await;
    let mut c = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let listed = c
        .ready()
        .await
        .unwrap()
        .call(McpRequest::without_id("tools/list"))
        .await
        .unwrap();
    assert_eq!(
        listed["tools"].as_array().unwrap().len(),
        1,
        "only `fine` kept"
    );

    let out = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for tool in ["bad_type", "bad_keyword", "duplicate"] {
        assert!(
            out.lines()
                .any(|l| l.contains("tool definition rejected") && l.contains(tool)),
            "{tool} was logged"
        );
    }
    assert_clean_logs(&out);
    for line in out.lines() {
        assert!(
            line.chars().count() < 4096,
            "a line of {} characters: {}…",
            line.len(),
            line.chars().take(300).collect::<String>()
        );
    }
}
