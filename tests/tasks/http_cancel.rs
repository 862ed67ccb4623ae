//! The twins over Streamable HTTP (loopback, the crate's `serve`) of
//! [`crate::transport_cancel`]: the creating request is cancelled while
//! the task's record is held at a [`Gate`] in the store's `create` — by a
//! 2026 client closing its response stream (HTTP/1.1: the connection;
//! HTTP/2: the stream), by a 2025 session's POSTed
//! `notifications/cancelled`, or by the server's shutdown — with and
//! without the adapter's grace. Each time: the client never gets a
//! `CreateTaskResult`, the work is dropped, no task is left running, and
//! the record, if written, is terminal (`cancelled`; `failed` "shut down"
//! for the shutdown), never `working`.
//!
//! Every wait is on an event (the gate's `arrived`, the work's token, its
//! drop probe, `drained()`), bounded by [`END_BOUND`] of real time.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, Layer};
use tower_mcp_cancel::tasks::{
    MemoryStore, TaskContext, TaskPolicy, TaskStore, TasksHandle, TasksLayer, EXTENSION,
};
use tower_mcp_cancel::test_util::{DropProbe, Fault, FaultyStore, Gate, Op};
use tower_mcp_cancel::transport::http::{serve, SessionLimits, StreamableHttpService};
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest, MethodPolicy, RequestContext};

use crate::harness::END_BOUND;
use crate::support::http::{modern_headers, post, session_request, Conn, Proto};

/// The grace of the adapter, when a test gives it one: far longer than
/// [`END_BOUND`], so that a work dropped only when the grace is over fails.
pub(crate) const GRACE: Duration = Duration::from_secs(600);

/// One call of the tool: its drop probe, its task id, and the cancellation
/// its handler sees (the task's).
pub(crate) struct Work {
    probe: DropProbe,
    task: Option<String>,
    cancellation: Option<Cancellation>,
}

/// `initialize` (for 2025 sessions), and `tools/call` of `sleep`: reports
/// its [`Work`] at its first poll, then sleeps for ten minutes.
pub(crate) fn tool(
    works: mpsc::UnboundedSender<Work>,
) -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(service_fn(move |req: McpRequest| {
        let works = works.clone();
        async move {
            if req.method() == "initialize" {
                return Ok(json!({
                    "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "twin", "version": "1"}
                }));
            }
            let (probe, guard) = DropProbe::new();
            let _ = works.send(Work {
                probe,
                task: TaskContext::of(&req).map(|t| t.id().to_owned()),
                cancellation: RequestContext::of(&req).cancellation().cloned(),
            });
            tokio::time::sleep(Duration::from_secs(600)).await;
            guard.finish();
            Ok::<_, BoxError>(json!({"content": [{"type": "text", "text": "done"}]}))
        }
    }))
}

/// A loopback server whose store holds the first `create` at `gate`.
struct Server {
    addr: SocketAddr,
    store: FaultyStore<MemoryStore>,
    handle: TasksHandle,
    gate: Gate,
    works: mpsc::UnboundedReceiver<Work>,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

async fn server(grace: bool, sessions: bool) -> Server {
    let store = FaultyStore::new(MemoryStore::new());
    let gate = Gate::new();
    store.once(Op::Create, Fault::Gate(gate.clone()));
    // The store's own bound never stands in for the cancel.
    let tasks = TasksLayer::with_store(store.clone())
        .default_policy(TaskPolicy::optional())
        .store_timeout(GRACE);
    let handle = tasks.handle();
    let (tx, works) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let mut endpoint = StreamableHttpService::new(tasks.layer(tool(tx))).shutdown(shutdown.clone());
    if grace {
        endpoint = endpoint.grace(MethodPolicy::new(GRACE));
    }
    if sessions {
        endpoint = endpoint.stateful_sessions(SessionLimits::new());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(serve(listener, endpoint, shutdown.clone()));
    Server {
        addr,
        store,
        handle,
        gate,
        works,
        shutdown,
        served,
    }
}

pub(crate) async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(END_BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {END_BOUND:?}"))
}

pub(crate) fn declared() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}})
}

/// A 2026 `tools/call` of `sleep` that declares the extension.
fn modern_call(id: i64) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut meta = declared();
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {}, "_meta": meta}});
    post(&body, &modern_headers("sleep"))
}

/// The create is held at the gate: the tool's call has started (it
/// reports itself before its task is spawned).
async fn held(s: &mut Server) -> Work {
    bounded("the record's create at the gate", s.gate.arrived(1)).await;
    let work = bounded("the call's start", s.works.recv())
        .await
        .expect("the tool was called");
    assert!(work.task.is_some(), "the call is not a task");
    work
}

/// The server has seen the cancel: the work's token (the task's) fired
/// while the record is still held (`reason`).
pub(crate) async fn cancelled(work: &Work, what: &str) -> CancelReason {
    let c = work.cancellation.clone().expect("a cancellation");
    let what = format!("{what}: the work's token while the record is written");
    bounded(&what, c.token().cancelled()).await;
    c.reason().cloned().expect("a reason")
}

/// The gate is open: the work is dropped, no task runs, the record (if
/// written) ends `expected` (its JSON containing `says`), never `working`.
async fn ends(s: &Server, work: Work, expected: &str, says: &str, what: &str) {
    opened(&s.store, &s.handle, &s.gate, work, expected, says, what).await;
}

/// [`ends`], for any transport.
pub(crate) async fn opened(
    store: &FaultyStore<MemoryStore>,
    handle: &TasksHandle,
    gate: &Gate,
    work: Work,
    expected: &str,
    says: &str,
    what: &str,
) {
    gate.open();
    let id = work.task.clone().unwrap();
    if tokio::time::timeout(END_BOUND, work.probe.dropped())
        .await
        .is_err()
    {
        let record = store.inner().get(&id).await.unwrap();
        panic!(
            "{what}: the work still runs {END_BOUND:?} after the gate opened; running() = {}, record = {record:?}",
            handle.running()
        );
    }
    assert!(
        work.probe.was_cancelled(),
        "{what}: the work was not cancelled"
    );
    if tokio::time::timeout(END_BOUND, handle.drained())
        .await
        .is_err()
    {
        panic!(
            "{what}: running() = {} after the work's drop",
            handle.running()
        );
    }
    assert_eq!(handle.running(), 0, "{what}");
    if let Some(record) = store.inner().get(&id).await.unwrap() {
        let text = record.to_json(None).to_string();
        assert_eq!(record.status.as_str(), expected, "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
    }
}

/// The response the client got, if any: never a `CreateTaskResult`.
fn no_task(what: &str, status: u16, text: &str) {
    assert!(
        !text.contains("taskId") && !text.contains("\"result\""),
        "{what}: answered {status} {text}"
    );
}

async fn a_2026_client_gone(proto: Proto, grace: bool) {
    let what = format!("2026 over {proto:?}, grace {grace}");
    let mut s = server(grace, false).await;
    let mut conn = Conn::connect(s.addr, proto).await;
    let call = tokio::spawn(conn.send(modern_call(1)));
    let work = held(&mut s).await;
    // The client closes its response stream: HTTP/2 resets it, HTTP/1.1
    // closes the connection.
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled(), "{what}: answered");
    drop(conn);
    let reason = cancelled(&work, &what).await;
    assert_eq!(reason, CancelReason::ClientDisconnected, "{what}");
    ends(&s, work, "cancelled", "cancelled", &what).await;
    s.shutdown.cancel();
    bounded("serve's return", s.served).await.unwrap();
}

#[tokio::test]
async fn a_2026_client_gone_while_the_record_is_created_drops_the_work_and_ends_it_cancelled() {
    for proto in [Proto::H1, Proto::H2] {
        a_2026_client_gone(proto, false).await;
    }
}

#[tokio::test]
async fn a_2026_client_gone_while_the_record_is_created_with_the_grace_drops_the_work_and_ends_it_cancelled(
) {
    for proto in [Proto::H1, Proto::H2] {
        a_2026_client_gone(proto, true).await;
    }
}

/// Reads a whole response (bounded).
async fn answer(res: hyper::Result<http::Response<hyper::body::Incoming>>) -> (u16, String) {
    use http_body_util::BodyExt;
    let res = res.expect("a response");
    let status = res.status().as_u16();
    let body = bounded("the body", res.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn a_2025_session_cancel(grace: bool) {
    let what = format!("2025 session, grace {grace}");
    let mut s = server(grace, true).await;
    let mut conn = Conn::connect(s.addr, Proto::H2).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let res = bounded(
        "initialize",
        conn.send(session_request(Method::POST, Some(&init), None)),
    )
    .await
    .unwrap();
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let (status, text) = answer(Ok(res)).await;
    assert_eq!(status, 200, "{text}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {}, "_meta": declared()}});
    let call = tokio::spawn(conn.send(session_request(Method::POST, Some(&body), Some(&session))));
    let work = held(&mut s).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "stop"}});
    let res = bounded(
        "the cancel",
        conn.send(session_request(Method::POST, Some(&cancel), Some(&session))),
    )
    .await;
    assert_eq!(answer(res).await.0, 202, "{what}");
    let reason = cancelled(&work, &what).await;
    assert_eq!(reason, CancelReason::Peer(Some("stop".into())), "{what}");
    ends(&s, work, "cancelled", "cancelled", &what).await;
    let (status, text) = answer(bounded("the call's answer", call).await.unwrap()).await;
    no_task(&what, status, &text);
    assert_eq!((status, text.as_str()), (204, ""), "{what}");
    s.shutdown.cancel();
    bounded("serve's return", s.served).await.unwrap();
}

#[tokio::test]
async fn a_2025_session_cancel_while_the_record_is_created_drops_the_work_and_ends_it_cancelled() {
    a_2025_session_cancel(false).await;
}

#[tokio::test]
async fn a_2025_session_cancel_while_the_record_is_created_with_the_grace_drops_the_work_and_ends_it_cancelled(
) {
    a_2025_session_cancel(true).await;
}

async fn a_shutdown(grace: bool) {
    let what = format!("shutdown over HTTP, grace {grace}");
    let mut s = server(grace, false).await;
    let mut conn = Conn::connect(s.addr, Proto::H1).await;
    let call = tokio::spawn(conn.send(modern_call(1)));
    let work = held(&mut s).await;
    s.shutdown.cancel();
    let reason = cancelled(&work, &what).await;
    assert_eq!(reason, CancelReason::Shutdown, "{what}");
    ends(&s, work, "failed", "shut down", &what).await;
    match bounded("the call's answer", call).await.unwrap() {
        // The connection may close first: nothing was announced either.
        Err(_) => {}
        Ok(res) => {
            let (status, text) = answer(Ok(res)).await;
            no_task(&what, status, &text);
        }
    }
    drop(conn);
    bounded("serve's return", s.served).await.unwrap();
}

#[tokio::test]
async fn a_shutdown_while_the_record_is_created_over_http_drops_the_work_and_never_leaves_it_working(
) {
    a_shutdown(false).await;
}

#[tokio::test]
async fn a_shutdown_while_the_record_is_created_over_http_with_the_grace_drops_the_work_and_never_leaves_it_working(
) {
    a_shutdown(true).await;
}
