//! Hostile peers: what one misbehaving peer can do, and that it stays
//! within its own connection and within bounded memory.
//!
//! * a cancel for another connection's id (stdio and HTTP, same ids on both
//!   connections) affects nothing on the other;
//! * an oversize message is refused with a clear error, the connection keeps
//!   working, and the framing never buffers more than its limit;
//! * a 1 MiB `notifications/cancelled` reason full of control characters
//!   reaches the logs truncated and sanitized;
//! * a peer that stops reading gets backpressure (bounded queue, bounded
//!   memory, input no longer read) without a deadlock once it reads again;
//! * a flood of 100 000 unknown-id cancels leaves memory and the registry as
//!   they were and writes nothing;
//! * progress that does not increase cannot keep a request alive past its
//!   idle limit, and nothing keeps it past its hard maximum.
//!
//! Memory is measured by a counting global allocator that keeps, per thread,
//! the bytes currently allocated and their peak. Every test here runs on a
//! current-thread runtime, so the server, the peer and their tasks all
//! allocate on the test's thread, and tests running in parallel on other
//! threads do not disturb the figures.
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::support::stdio as stdio_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::{pipe, Peer, BOUND};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::integration::for_log;
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{
    CancelReason, Cancellation, Elapsed, Limit, McpRequest, ProgressResetLayer,
};

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
fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Starts a peak measurement: the peak is reset to the current level, which
/// is returned as the baseline.
fn start_peak() -> isize {
    let now = live();
    PEAK.with(|p| p.set(now));
    now
}

/// The highest level since [`start_peak`], above `baseline`.
fn peak_above(baseline: isize) -> isize {
    PEAK.with(Cell::get) - baseline
}

const KIB: isize = 1024;
const MIB: isize = 1024 * 1024;

// ---------------------------------------------------------------------------
// A test service: every `work` call reports itself and waits.

/// One started handler: the connection it says it came from, its id, the
/// probe watching its future, its cancellation.
struct Started {
    conn: String,
    id: String,
    probe: DropProbe,
    cancellation: Cancellation,
}

/// `tools/call` with `{name: "work", arguments: {conn, ms}}` reports
/// [`Started`], waits `ms` (forever when absent), and answers with its
/// connection tag; `ping` answers `{}` at once; `echo` answers its params.
fn work_service(
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

async fn next_started(rx: &mut mpsc::UnboundedReceiver<Started>) -> Started {
    tokio::time::timeout(BOUND, rx.recv())
        .await
        .expect("a handler should have started")
        .expect("service gone")
}

fn work(id: Value, conn: &str, ms: Option<u64>) -> Value {
    let mut args = json!({"conn": conn});
    if let Some(ms) = ms {
        args["ms"] = json!(ms);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "work", "arguments": args}})
}

struct Conn {
    peer: Peer,
    registry: InFlight,
    served: JoinHandle<io::Result<()>>,
}

/// Serves `svc` (a clone of one shared service) on a new in-memory stdio
/// connection configured by `cfg`.
fn connect<S>(svc: S, cfg: StdioServer, buf: usize) -> Conn
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
// Cross-connection cancels.

#[tokio::test(start_paused = true)]
async fn stdio_cancel_for_another_connections_id_affects_nothing() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let svc = work_service(tx);
    let mut a = connect(svc.clone(), StdioServer::new(), 64 * 1024);
    let mut b = connect(svc, StdioServer::new(), 64 * 1024);

    // The same ids on both connections, plus one id only A has.
    for (conn, id) in [("A", json!(1)), ("A", json!("x")), ("A", json!("only-a"))] {
        a.peer.send(work(id, conn, Some(10_000))).await;
    }
    for (conn, id) in [("B", json!(1)), ("B", json!("x"))] {
        b.peer.send(work(id, conn, Some(10_000))).await;
    }
    let mut started = Vec::new();
    for _ in 0..5 {
        started.push(next_started(&mut rx).await);
    }
    let find = |conn: &str, id: &str| {
        started
            .iter()
            .find(|s| s.conn == conn && s.id == id)
            .unwrap_or_else(|| panic!("{conn}/{id} started"))
    };

    // A cancels 1 (its own, and also B's id); B cancels "only-a" (A's only).
    a.peer.cancel(json!(1), "A gives up on 1").await;
    b.peer.cancel(json!("only-a"), "B aims at A").await;
    a.peer.sync(json!("sa")).await;
    b.peer.sync(json!("sb")).await;
    settle().await;

    let a1 = find("A", "1");
    assert!(a1.probe.was_cancelled(), "A's own request 1 was dropped");
    assert_eq!(
        a1.cancellation.reason(),
        Some(&CancelReason::peer(Some("A gives up on 1")))
    );
    for (conn, id) in [
        ("B", "1"),
        ("B", "\"x\""),
        ("A", "\"x\""),
        ("A", "\"only-a\""),
    ] {
        let s = find(conn, id);
        assert!(!s.probe.is_dropped(), "{conn}/{id} must still run");
        assert!(!s.cancellation.is_finished(), "{conn}/{id} not cancelled");
    }
    assert_eq!((a.registry.len(), b.registry.len()), (2, 2));

    // The survivors run to their end and are answered on their own
    // connection; A writes nothing for its cancelled 1.
    tokio::time::advance(Duration::from_secs(10)).await;
    let mut answered = Vec::new();
    for _ in 0..2 {
        let v = b.peer.recv().await.unwrap();
        assert_eq!(v["result"]["conn"], "B", "{v}");
        answered.push(v["id"].clone());
    }
    answered.sort_by_key(|v| v.to_string());
    assert_eq!(answered, vec![json!("x"), json!(1)]);
    let mut answered = Vec::new();
    for _ in 0..2 {
        let v = a.peer.recv().await.unwrap();
        assert_eq!(v["result"]["conn"], "A", "{v}");
        answered.push(v["id"].clone());
    }
    answered.sort_by_key(|v| v.to_string());
    assert_eq!(answered, vec![json!("only-a"), json!("x")]);
    assert!(find("B", "1").probe.is_finished());
    for conn in [a, b] {
        assert!(conn.peer.close().await.is_empty(), "nothing else written");
        conn.served.await.unwrap().unwrap();
        assert!(conn.registry.is_empty());
    }
}

use crate::support::http as http_support;

#[tokio::test]
async fn http_cancel_for_another_connections_id_affects_nothing() {
    use http_support::{
        modern_headers, post, raw_post, read_until, text, tool_call, Conn as Http, Proto,
    };
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let svc = {
        let inner = work_service(tx);
        let release = release.clone();
        // `work` for connection B waits for the release instead of a timer.
        service_fn(move |req: McpRequest| {
            let inner = inner.clone();
            let release = release.clone();
            async move {
                let is_b = req.params_as::<Value>().unwrap_or_default()["arguments"]["conn"] == "B";
                let call = inner.oneshot(req);
                if !is_b {
                    return call.await;
                }
                tokio::pin!(call);
                tokio::select! {
                    biased;
                    r = &mut call => r,
                    () = release.notified() => Ok(json!({"resultType": "complete", "conn": "B", "released": true})),
                }
            }
        })
    };
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(StreamableHttpService::new(svc), Proto::H1, closed_tx).await;

    // Connection A (a raw socket) and connection B (hyper) both call id 1.
    let headers = modern_headers("work");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut a = tokio::net::TcpStream::connect(addr).await.unwrap();
    a.write_all(&raw_post(
        &tool_call(1, "work", json!({"conn": "A"})),
        &extra,
    ))
    .await
    .unwrap();
    let mut b = Http::connect(addr, Proto::H1).await;
    let b_call = tokio::spawn(b.send(post(&tool_call(1, "work", json!({"conn": "B"})), &headers)));
    let mut started = [next_started(&mut rx).await, next_started(&mut rx).await];
    started.sort_by(|x, y| x.conn.cmp(&y.conn));
    let [sa, sb] = started;
    assert_eq!((sa.conn.as_str(), sb.conn.as_str()), ("A", "B"));

    // A third connection posts notifications/cancelled for id 1: without
    // sessions it names no request, so it is accepted (202) and does nothing.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "not yours"}});
    let mut cancel_headers = modern_headers("work");
    cancel_headers.retain(|(k, _)| *k != "Mcp-Name");
    cancel_headers.iter_mut().for_each(|(k, v)| {
        if *k == "Mcp-Method" {
            *v = "notifications/cancelled".into();
        }
    });
    let extra_c: Vec<(&str, &str)> = cancel_headers
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    c.write_all(&raw_post(&cancel, &extra_c)).await.unwrap();
    let seen = read_until(&mut c, "\r\n\r\n").await;
    assert!(seen.starts_with("HTTP/1.1 202"), "{seen}");

    // A closes its connection: that cancels A's request 1, and only it.
    drop(a);
    tokio::time::timeout(BOUND, async {
        while !sa.probe.is_dropped() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("A's handler dropped");
    assert_eq!(
        sa.cancellation.reason(),
        Some(&CancelReason::ClientDisconnected)
    );
    assert!(!sb.probe.is_dropped(), "B's request 1 still runs");
    assert!(!sb.cancellation.is_finished());

    // B's request is answered.
    release.notify_one();
    let res = tokio::time::timeout(BOUND, b_call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let body = text(res).await;
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        (v["id"].clone(), v["result"]["conn"].clone()),
        (json!(1), json!("B"))
    );
}

// ---------------------------------------------------------------------------
// Oversize messages.

#[tokio::test]
async fn an_oversize_line_is_refused_the_connection_keeps_working_and_memory_is_bounded() {
    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut conn = connect(
        work_service(tx),
        StdioServer::new().max_line_bytes(LIMIT),
        64 * 1024,
    );
    let chunk = vec![b'x'; 64 * 1024];

    let baseline = start_peak();
    let Peer { mut w, mut r } = conn.peer;
    let writer = async {
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{\"pad\":\"")
            .await
            .unwrap();
        for _ in 0..SENT / chunk.len() {
            w.write_all(&chunk).await.unwrap();
        }
        w.write_all(b"\"}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        w.flush().await.unwrap();
    };
    let reader = async {
        let mut lines = Vec::new();
        for _ in 0..2 {
            let line = tokio::time::timeout(BOUND, r.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            lines.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        lines
    };
    let ((), lines) = tokio::join!(writer, reader);
    let peak = peak_above(baseline);

    let err = &lines[0];
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert!(
        err.get("id").is_none(),
        "the id of an oversize line is not read: {err}"
    );
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "a clear error: {message}"
    );
    assert_eq!(
        lines[1],
        json!({"jsonrpc": "2.0", "id": 2, "result": {}}),
        "still serving"
    );
    eprintln!("oversize: {SENT} bytes sent, limit {LIMIT}, peak allocation growth {peak} bytes");
    assert!(
        peak < 3 * LIMIT as isize,
        "the framing buffered {peak} bytes for a {SENT}-byte line (limit {LIMIT})"
    );
    conn.peer = Peer { w, r };
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_oversize_http_body_is_refused_with_413_memory_is_bounded_and_the_server_keeps_serving()
{
    use http_support::{modern_headers, read_until, Proto};
    use tokio::io::AsyncReadExt;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    let (tx, _rx) = mpsc::unbounded_channel();
    let endpoint = StreamableHttpService::new(work_service(tx)).max_body_bytes(LIMIT);
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(endpoint, Proto::H1, closed_tx).await;

    // A chunked body (no Content-Length to refuse up front) of 64 MiB.
    let mut head =
        String::from("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n");
    for (k, v) in modern_headers("work") {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let chunk_body = vec![b' '; 64 * 1024];
    let mut chunk = format!("{:x}\r\n", chunk_body.len()).into_bytes();
    chunk.extend_from_slice(&chunk_body);
    chunk.extend_from_slice(b"\r\n");

    let baseline = start_peak();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let writer = async {
        let res: io::Result<()> = async {
            wr.write_all(head.as_bytes()).await?;
            for _ in 0..SENT / chunk_body.len() {
                wr.write_all(&chunk).await?;
            }
            wr.write_all(b"0\r\n\r\n").await
        }
        .await;
        if res.is_err() {
            // The server stopped reading and closed: the answer is what
            // counts, so leave the reader to it.
            std::future::pending::<()>().await;
        }
    };
    let reader = async {
        let mut buf = Vec::new();
        let mut part = [0u8; 4096];
        loop {
            let n = rd.read(&mut part).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&part[..n]);
            if String::from_utf8_lossy(&buf).contains("}") {
                break;
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    // The server answers while the body is still coming; stop writing then.
    tokio::pin!(writer);
    let response = tokio::select! {
        biased;
        r = reader => r,
        () = &mut writer => panic!("the server read the whole {SENT}-byte body"),
    };
    let peak = peak_above(baseline);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response.contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "a clear error: {response}"
    );
    eprintln!("oversize HTTP body: limit {LIMIT}, peak allocation growth {peak} bytes");
    assert!(
        peak < 3 * LIMIT as isize,
        "buffered {peak} bytes of an oversize body"
    );

    // The server keeps serving.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut headers = modern_headers("");
    headers.retain(|(k, _)| *k != "Mcp-Name");
    headers.iter_mut().for_each(|(k, v)| {
        if *k == "Mcp-Method" {
            *v = "ping".into();
        }
    });
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.write_all(&http_support::raw_post(&ping, &extra))
        .await
        .unwrap();
    let seen = read_until(&mut s, "\"result\"").await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

// ---------------------------------------------------------------------------
// Reasons in logs.

/// A `MakeWriter` collecting everything into one shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

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

#[tokio::test(start_paused = true)]
async fn a_huge_reason_with_control_characters_is_truncated_and_sanitized_in_logs() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    // This thread only; the runtime is current-thread, so every task of the
    // server logs here.
    let _guard = tracing::subscriber::set_default(subscriber);

    // 1 MiB of text with C0 and C1 controls, escapes, NUL, DEL, CR/LF.
    let unit = "ok\u{0}\n\r\u{1b}[31mRED\u{7}\u{8}\u{7f}\u{85}\u{9b}\t é";
    let mut reason = String::new();
    while reason.len() < 1 << 20 {
        reason.push_str(unit);
    }
    let expected = for_log(&reason);

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

    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
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

// ---------------------------------------------------------------------------
// A peer that stops reading; a flood of unknown cancels.

#[tokio::test]
async fn a_reader_that_stops_reading_gets_backpressure_with_flat_memory_and_no_deadlock() {
    const N: usize = 20_000;
    const MAX_IN_FLIGHT: usize = 16;
    let (tx, _rx) = mpsc::unbounded_channel();
    let cfg = StdioServer::new()
        .write_queue(4)
        .max_in_flight(MAX_IN_FLIGHT);
    let conn = connect(work_service(tx), cfg, 4 * 1024);
    let Peer { mut w, r } = conn.peer;
    let pad = "p".repeat(200);
    let lines: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut l = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": i, "method": "echo",
                "params": {"pad": pad}}))
            .unwrap();
            l.push(b'\n');
            l
        })
        .collect();

    let baseline = start_peak();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    // The peer writes everything and never reads (until told to).
    let writer = tokio::spawn(async move {
        for l in &lines {
            w.write_all(l).await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
        }
        w
    });
    settle().await;
    let stalled = written.load(Ordering::SeqCst);
    let live_at_stall = live();
    settle().await;
    settle().await;
    assert_eq!(
        written.load(Ordering::SeqCst),
        stalled,
        "the server stopped reading"
    );
    assert!(
        stalled < N,
        "the server read all {N} requests although nobody read its answers"
    );
    // In flight (at most MAX_IN_FLIGHT), the queue (4) and the writer's
    // message, the refusal the reader waits to queue, and what the two 4 KiB
    // pipes and the reader's buffer hold.
    assert!(
        stalled <= MAX_IN_FLIGHT + 4 + 2 + 64,
        "{stalled} requests accepted before backpressure"
    );
    assert!(conn.registry.len() <= MAX_IN_FLIGHT);
    let peak = peak_above(baseline);
    let growth = live() - live_at_stall;
    eprintln!(
        "stopped reader: {stalled} of {N} requests read, in flight {}, peak growth {peak} bytes, \
         growth while stalled {growth} bytes",
        conn.registry.len()
    );
    assert!(
        peak < MIB,
        "peak growth {peak} bytes while the peer did not read"
    );
    assert!(
        growth.abs() < 4 * KIB,
        "memory not flat while stalled: {growth} bytes"
    );

    // The peer reads again: every request gets exactly one answer (its
    // result, or a busy error), nothing is lost, nothing deadlocks.
    let mut r = r;
    let mut answered = vec![0u8; N];
    let mut busy = 0;
    for _ in 0..N {
        let line = tokio::time::timeout(BOUND, r.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        let id = v["id"].as_u64().unwrap_or_else(|| panic!("{v}")) as usize;
        answered[id] += 1;
        if v.get("error").is_some() {
            busy += 1;
        } else {
            assert_eq!(v["result"]["params"]["pad"], pad.as_str());
        }
    }
    assert!(
        answered.iter().all(|n| *n == 1),
        "each request answered exactly once"
    );
    eprintln!(
        "stopped reader: after reading again, {} results, {busy} busy errors",
        N - busy
    );
    let w = writer.await.unwrap();
    let peer = Peer { w, r };
    assert!(peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
}

/// Writes one `notifications/cancelled` line for each id in `ids` (even
/// ids as integers, odd ones as strings), as fast as the pipe takes them,
/// checking now and then that `registry` keeps its size.
async fn cancel_flood(
    w: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ids: std::ops::Range<usize>,
    registry: &InFlight,
) {
    let size = registry.len();
    let mut line = Vec::with_capacity(256);
    for i in ids {
        line.clear();
        let id = if i % 2 == 0 {
            json!(i)
        } else {
            json!(format!("unknown-{i}"))
        };
        serde_json::to_writer(
            &mut line,
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "flood"}}),
        )
        .unwrap();
        line.push(b'\n');
        w.write_all(&line).await.unwrap();
        if i % 1000 == 0 {
            assert_eq!(registry.len(), size, "registry unchanged during the flood");
        }
    }
}

#[tokio::test]
async fn a_flood_of_unknown_id_cancels_leaves_memory_and_registry_flat_and_writes_nothing() {
    const FLOOD: usize = 100_000;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut conn = connect(work_service(tx), StdioServer::new(), 64 * 1024);
    conn.peer.send(work(json!("keep"), "A", None)).await;
    let keep = next_started(&mut rx).await;
    // Warm-up, the same way: the pipe, the line buffers and the tasks'
    // storage reach their working size, which the measurement must not count.
    cancel_flood(&mut conn.peer.w, 0..20_000, &conn.registry).await;
    conn.peer.sync(json!("warm")).await;
    assert_eq!(conn.registry.len(), 1);

    let baseline = start_peak();
    cancel_flood(&mut conn.peer.w, 0..FLOOD, &conn.registry).await;
    // Nothing was written for any of them: the ping's answer is the next line.
    let lines = conn.peer.sync(json!("after")).await;
    let peak = peak_above(baseline);
    let growth = live() - baseline;
    eprintln!(
        "cancel flood: {FLOOD} unknown ids, peak growth {peak} bytes, net growth {growth} bytes"
    );
    assert_eq!(
        lines,
        vec![json!({"jsonrpc": "2.0", "id": "after", "result": {}})]
    );
    assert_eq!(conn.registry.len(), 1, "registry unchanged");
    assert!(
        !keep.probe.is_dropped() && !keep.cancellation.is_finished(),
        "the real request runs on"
    );
    assert!(
        peak < 256 * KIB,
        "peak growth {peak} bytes during the flood"
    );
    // A few tens of KiB of one-time buffer growth are seen (the same after
    // 20 000 cancels as after 100 000); keeping as little as one byte per
    // cancel would be 100 000 bytes.
    assert!(
        growth.abs() < 64 * KIB,
        "memory not back to flat: {growth} bytes"
    );
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
    assert!(keep.probe.was_cancelled());
}

// ---------------------------------------------------------------------------
// Progress that must not keep a request alive.

fn progress(token: &Value, value: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": token, "progress": value}})
}

#[tokio::test(start_paused = true)]
async fn progress_that_does_not_increase_cannot_keep_a_request_past_its_idle_limit() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(60)))
        .service(client.clone());
    let t0 = tokio::time::Instant::now();
    let mut call = tokio::spawn(svc.oneshot(McpRequest::new("victim", "tools/call")));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();

    // One real increase at 0.5 s: the idle limit now ends at 1.5 s.
    tokio::time::sleep(Duration::from_millis(500)).await;
    peer.send(progress(&token, json!(10))).await;
    // Then, every 100 ms, values that do not increase (smaller, equal, out
    // of range, of the wrong type), and progress for tokens that are not
    // this request's ("1" is not 1).
    let hostile: Vec<Vec<u8>> = [
        progress(&token, json!(9)),
        progress(&token, json!(10)),
        progress(&token, json!(-1e308)),
        progress(&token, json!(10.0)),
        progress(&token, json!("11")),
        progress(&token, json!(null)),
        progress(&json!("someone-else"), json!(1000)),
        progress(&json!(token.to_string()), json!(1000)),
    ]
    .iter()
    .map(|v| v.to_string().into_bytes())
    .chain([
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":1e400}}}}"#).into_bytes(),
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":11"#).into_bytes(),
    ])
    .collect();
    let mut sent = 0;
    let mut next = hostile.iter().cycle();
    let err = loop {
        tokio::select! {
            r = &mut call => break r.unwrap().unwrap_err(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                peer.send_raw(next.next().unwrap()).await;
                sent += 1;
            }
        }
    };
    let elapsed = t0.elapsed();
    let elapsed_err = err
        .downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(elapsed_err.limit(), Limit::Idle);
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_millis(1510),
        "ended at {elapsed:?}: 1 s after the last increase (0.5 s)"
    );
    assert!(sent >= 9, "hostile progress kept coming ({sent} messages)");
    eprintln!(
        "non-increasing progress: idle limit fired at {elapsed:?} after {sent} hostile messages"
    );
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["method"].clone(), v["params"]["requestId"].clone()),
        (json!("notifications/cancelled"), json!("victim"))
    );
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_keeps_a_request_past_its_hard_maximum() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(3)))
        .service(client.clone());
    let t0 = tokio::time::Instant::now();
    let mut call = tokio::spawn(svc.oneshot(McpRequest::new("m", "tools/call")));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();
    // Strictly increasing progress every 100 ms, in ever bigger steps, plus
    // keep-alive-like noise: the idle limit never fires, the maximum does.
    let mut step = 1.0_f64;
    let mut sent = 0;
    let err = loop {
        tokio::select! {
            r = &mut call => break r.unwrap().unwrap_err(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                step *= 10.0;
                peer.send(progress(&token, json!(step.min(f64::MAX)))).await;
                peer.send(json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "still here"}})).await;
                sent += 1;
            }
        }
    };
    let elapsed = t0.elapsed();
    assert_eq!(
        err.downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("{err}"))
            .limit(),
        Limit::Max
    );
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_millis(3010),
        "ended at {elapsed:?}"
    );
    assert!(sent >= 29, "progress kept coming until the end ({sent})");
    eprintln!("increasing progress: hard maximum fired at {elapsed:?} after {sent} reports");
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["method"].clone(), v["params"]["requestId"].clone()),
        (json!("notifications/cancelled"), json!("m"))
    );
}
