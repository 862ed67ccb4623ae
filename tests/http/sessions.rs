//! 2025-era sessions (`StreamableHttpService::stateful_sessions`): minted by
//! a legacy `initialize`; a session's `notifications/cancelled` drops only
//! its own request (also in a race with the handler's end, after which
//! nothing is written); `DELETE` cancels what is in flight; unknown,
//! ended and expired sessions get `404`; the bound refuses, never evicts;
//! modern requests stay stateless. The adapter is called directly (no
//! sockets), so the clock can be paused.
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::transport::http::{ResponseBody, SessionLimits, StreamableHttpService};
use tower_mcp_cancel::{CancelReason, McpRequest};

use crate::support::http::{modern_headers, tool_call, Event, Events, Tools};

type Endpoint = BoxCloneService<Request<Full<Bytes>>, Response<ResponseBody>, Infallible>;

/// The test tools behind an adapter with legacy sessions; `initialize` is
/// answered as a 2025 server does.
fn endpoint(limits: SessionLimits) -> (Endpoint, Tools, Events) {
    let (tools, events) = Tools::new();
    let inner = tools.service();
    let mcp = service_fn(move |req: McpRequest| {
        let inner = inner.clone();
        async move {
            if req.method() == "initialize" {
                return Ok::<_, BoxError>(json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "test", "version": "0"},
                }));
            }
            inner.oneshot(req).await
        }
    });
    let svc = StreamableHttpService::new(mcp).stateful_sessions(limits);
    (BoxCloneService::new(svc), tools, events)
}

fn request(
    method: http::Method,
    body: Option<&Value>,
    session: Option<&str>,
) -> Request<Full<Bytes>> {
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
    b.body(Full::new(Bytes::from(body))).unwrap()
}

fn post(body: &Value, session: Option<&str>) -> Request<Full<Bytes>> {
    request(http::Method::POST, Some(body), session)
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}})
}

fn legacy_call(id: i64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {}}})
}

fn cancelled(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "user\nstop\u{1b}[31m"}})
}

async fn body(res: Response<ResponseBody>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn send(ep: &Endpoint, req: Request<Full<Bytes>>) -> (u16, Option<String>, String) {
    let res = ep.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let session = res
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, body(res).await)
}

/// A legacy `initialize` (no `MCP-Protocol-Version`, as 2025-03-26 clients
/// send it) opens a session; its id.
async fn open(ep: &Endpoint) -> String {
    let (status, session, text) = send(ep, post(&initialize(0), None)).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    session.expect("initialize answered with Mcp-Session-Id")
}

/// Starts a call whose response is awaited in a task.
fn start(ep: &Endpoint, req: Request<Full<Bytes>>) -> tokio::task::JoinHandle<(u16, String)> {
    let ep = ep.clone();
    tokio::spawn(async move {
        let res = ep.oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        (status, body(res).await)
    })
}

/// Asserts that no handler was dropped among the events seen so far.
fn no_drop(events: &mut Events) {
    let seen = events.drain();
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Dropped(_))),
        "{seen:?}"
    );
}

async fn started(events: &mut Events, id: i64) {
    let want = Event::Started(id.into());
    events.until(|e| *e == want).await;
}

#[tokio::test]
async fn initialize_mints_a_random_visible_ascii_session_id() {
    let (ep, _tools, _events) = endpoint(SessionLimits::new());
    let a = open(&ep).await;
    let b = open(&ep).await;
    assert_ne!(a, b);
    for id in [&a, &b] {
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
    // A session's request is served in it.
    let (status, session, text) = send(&ep, post(&legacy_call(1, "echo"), Some(&a))).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(session, None, "only initialize carries the id");
}

#[tokio::test]
async fn a_failed_initialize_keeps_no_session() {
    // The plain test tools answer initialize with -32601.
    let (tools, _events) = Tools::new();
    let ep = StreamableHttpService::new(tools.service())
        .stateful_sessions(SessionLimits::new().max_sessions(1));
    let ep = BoxCloneService::new(ep);
    for _ in 0..3 {
        let (status, session, _) = send(&ep, post(&initialize(0), None)).await;
        assert_eq!(status, 404);
        assert_eq!(session, None);
    }
}

#[tokio::test]
async fn a_cancel_drops_only_the_request_of_its_own_session() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let a = open(&ep).await;
    let b = open(&ep).await;
    let call_a = start(&ep, post(&legacy_call(1, "hang"), Some(&a)));
    started(&mut events, 1).await;
    let call_b = start(&ep, post(&legacy_call(2, "hang"), Some(&b)));
    started(&mut events, 2).await;

    // Session B names A's request: nothing happens.
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&b))).await;
    assert_eq!(status, 202);
    // Session B cancels its own.
    let (status, _, _) = send(&ep, post(&cancelled(2), Some(&b))).await;
    assert_eq!(status, 202);
    let seen = events.until(|e| *e == Event::Dropped(2.into())).await;
    assert!(!seen.contains(&Event::Dropped(1.into())), "{seen:?}");
    let (status, text) = call_b.await.unwrap();
    assert_eq!(
        (status, text.as_str()),
        (204, ""),
        "nothing is answered for a cancelled request"
    );
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    assert_eq!(
        reason,
        Some(CancelReason::Peer(Some("user stop [31m".into()))),
        "the reason is sanitized"
    );
    assert!(!call_a.is_finished(), "A's request still runs");

    // A cancel without a session id resolves nothing either.
    let (status, _, _) = send(&ep, post(&cancelled(1), None)).await;
    assert_eq!(status, 202);
    no_drop(&mut events);
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&a))).await;
    assert_eq!(status, 202);
    events.until(|e| *e == Event::Dropped(1.into())).await;
    assert_eq!(call_a.await.unwrap().0, 204);
}

/// The same id in two sessions: each session's cancel reaches its own.
#[tokio::test]
async fn ids_are_per_session() {
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let a = open(&ep).await;
    let b = open(&ep).await;
    let call_a = start(&ep, post(&legacy_call(7, "hang"), Some(&a)));
    started(&mut events, 7).await;
    let call_b = start(&ep, post(&legacy_call(7, "hang"), Some(&b)));
    started(&mut events, 7).await;
    send(&ep, post(&cancelled(7), Some(&a))).await;
    assert_eq!(call_a.await.unwrap().0, 204);
    events.until(|e| *e == Event::Dropped(7.into())).await;
    assert!(!call_b.is_finished());
    // A duplicate id within one session is refused without that id.
    let (status, _, text) = send(&ep, post(&legacy_call(7, "echo"), Some(&b))).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("id").is_none() || v["id"].is_null(), "{v}");
    call_b.abort();
}

/// The race the spec names: a cancel arriving while the handler finishes.
/// Whichever the lifecycle sees first decides, once: a cancel seen first
/// means nothing is written; a cancel after the end changes nothing.
#[tokio::test]
async fn a_cancel_racing_the_end_never_writes_after_it() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;

    // The handler's result is ready and the cancel lands before the
    // lifecycle polls again: the cancel wins, nothing is answered.
    let call = start(&ep, post(&legacy_call(1, "wait_release"), Some(&s)));
    started(&mut events, 1).await;
    tools.release.notify_one();
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&s))).await;
    assert_eq!(status, 202);
    assert_eq!(call.await.unwrap(), (204, String::new()));

    // The answer went out first: the late cancel finds nothing in flight.
    let call = start(&ep, post(&legacy_call(2, "wait_release"), Some(&s)));
    started(&mut events, 2).await;
    tools.release.notify_one();
    let (status, text) = call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["result"]["released"],
        true
    );
    events.until(|e| *e == Event::Done(2.into())).await;
    let (status, _, _) = send(&ep, post(&cancelled(2), Some(&s))).await;
    assert_eq!(status, 202);
    no_drop(&mut events);
}

#[tokio::test]
async fn delete_ends_the_session_and_cancels_its_work() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let call = start(&ep, post(&legacy_call(3, "hang"), Some(&s)));
    started(&mut events, 3).await;
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&s))).await;
    assert_eq!(status, 200);
    events.until(|e| *e == Event::Dropped(3.into())).await;
    assert_eq!(call.await.unwrap().0, 204);
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    assert_eq!(reason, Some(CancelReason::TransportClosed));
    // Ended: every later use is 404.
    let (status, _, _) = send(&ep, post(&legacy_call(4, "echo"), Some(&s))).await;
    assert_eq!(status, 404);
    let (status, _, _) = send(&ep, post(&cancelled(4), Some(&s))).await;
    assert_eq!(status, 404);
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&s))).await;
    assert_eq!(status, 404);
    // DELETE without a session id; GET stays 405.
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, None)).await;
    assert_eq!(status, 400);
    let (status, _, _) = send(&ep, request(http::Method::GET, None, Some(&s))).await;
    assert_eq!(status, 405);
}

/// A legacy request's disconnect still does not cancel it (2025 rule),
/// but the session can: the detached call stays registered.
#[tokio::test]
async fn a_disconnect_detaches_and_the_session_can_still_cancel() {
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let call = start(&ep, post(&legacy_call(5, "hang"), Some(&s)));
    started(&mut events, 5).await;
    call.abort();
    let _ = call.await;
    // Had the disconnect dropped the call, its drop would be recorded now.
    no_drop(&mut events);
    send(&ep, post(&cancelled(5), Some(&s))).await;
    events.until(|e| *e == Event::Dropped(5.into())).await;
}

#[tokio::test(start_paused = true)]
async fn unknown_and_expired_sessions_get_404() {
    let (ep, _tools, _events) =
        endpoint(SessionLimits::new().idle_timeout(Duration::from_secs(60)));
    let unknown = "0".repeat(64);
    let (status, _, text) = send(&ep, post(&legacy_call(1, "echo"), Some(&unknown))).await;
    assert_eq!(status, 404, "{text}");
    let (status, _, _) = send(&ep, post(&legacy_call(1, "echo"), Some("bad id"))).await;
    assert_eq!(status, 404);

    let s = open(&ep).await;
    tokio::time::advance(Duration::from_secs(59)).await;
    let (status, _, _) = send(&ep, post(&legacy_call(1, "echo"), Some(&s))).await;
    assert_eq!(status, 200, "used in time");
    tokio::time::advance(Duration::from_secs(61)).await;
    let (status, _, _) = send(&ep, post(&legacy_call(2, "echo"), Some(&s))).await;
    assert_eq!(status, 404, "expired");
}

#[tokio::test(start_paused = true)]
async fn at_the_bound_initialize_is_refused_and_no_live_session_is_evicted() {
    let (ep, _tools, _events) = endpoint(
        SessionLimits::new()
            .max_sessions(2)
            .idle_timeout(Duration::from_secs(60)),
    );
    let a = open(&ep).await;
    let b = open(&ep).await;
    let (status, session, text) = send(&ep, post(&initialize(0), None)).await;
    assert_eq!(status, 503, "{text}");
    assert_eq!(session, None);
    assert!(text.contains("maximum of 2 legacy sessions"), "{text}");
    for s in [&a, &b] {
        let (status, _, _) = send(&ep, post(&legacy_call(1, "echo"), Some(s))).await;
        assert_eq!(status, 200, "live sessions kept");
    }
    // Room again: after a DELETE, or once one has expired.
    send(&ep, request(http::Method::DELETE, None, Some(&a))).await;
    let c = open(&ep).await;
    tokio::time::advance(Duration::from_secs(30)).await;
    send(&ep, post(&legacy_call(2, "echo"), Some(&c))).await;
    tokio::time::advance(Duration::from_secs(31)).await;
    let d = open(&ep).await; // b expired (61 s idle), c has not (31 s)
    let (status, _, _) = send(&ep, post(&legacy_call(3, "echo"), Some(&b))).await;
    assert_eq!(status, 404);
    let (status, _, _) = send(&ep, post(&legacy_call(3, "echo"), Some(&d))).await;
    assert_eq!(status, 200);
}

/// 2026-07-28 requests stay stateless: no session minted, an
/// `Mcp-Session-Id` on them ignored (not even an unknown one is `404`),
/// and their cancellation is their disconnect.
#[tokio::test]
async fn modern_requests_stay_stateless() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let mut req = post(&tool_call(1, "echo", json!({"text": "hi"})), None);
    for (k, v) in modern_headers("echo") {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    req.headers_mut()
        .insert("mcp-session-id", "0".repeat(64).parse().unwrap());
    let (status, session, text) = send(&ep, req).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(session, None);

    // A modern request in flight is not in any session's registry.
    let mut req = post(&tool_call(2, "hang", json!({})), None);
    for (k, v) in modern_headers("hang") {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    req.headers_mut()
        .insert("mcp-session-id", s.parse().unwrap());
    let call = start(&ep, req);
    started(&mut events, 2).await;
    send(&ep, post(&cancelled(2), Some(&s))).await;
    let last = tools.last.lock().unwrap().clone().unwrap();
    assert!(!last.is_cancelled(), "a session's cancel cannot reach it");
    call.abort();
    events.until(|e| *e == Event::Dropped(2.into())).await;
}

/// Without the option nothing changes: no session, DELETE is 405.
#[tokio::test]
async fn without_the_option_there_are_no_sessions() {
    let (tools, _events) = Tools::new();
    let mut ep = StreamableHttpService::new(tools.service());
    let res = ep
        .call(request(http::Method::DELETE, None, Some("x")))
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
}

/// An `initialize` that does send a 2025 `MCP-Protocol-Version` opens a
/// session too; one with a modern `_meta` body does not (it is a 2026
/// request, served statelessly).
#[tokio::test]
async fn initialize_with_a_2025_version_header_opens_a_session() {
    let (ep, _tools, _events) = endpoint(SessionLimits::new());
    let mut req = post(&initialize(0), None);
    req.headers_mut()
        .insert("mcp-protocol-version", "2025-06-18".parse().unwrap());
    let (status, session, text) = send(&ep, req).await;
    assert_eq!(status, 200, "{text}");
    assert!(session.is_some());

    let mut body = initialize(1);
    body["params"]["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let mut req = post(&body, None);
    for (k, v) in [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "initialize"),
    ] {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    let (_, session, _) = send(&ep, req).await;
    assert_eq!(session, None, "no session for a modern request");
}

/// While the adapter drains (shutdown token fired, a grace running), a new
/// request gets `503`, but a session's `notifications/cancelled` and
/// `DELETE` are still served: they only end work.
#[tokio::test(start_paused = true)]
async fn a_draining_server_refuses_new_work_but_still_serves_cancels() {
    let (tools, mut events) = Tools::new();
    let inner = tools.service();
    let mcp = service_fn(move |req: McpRequest| {
        let inner = inner.clone();
        async move {
            if req.method() == "initialize" {
                return Ok::<_, BoxError>(json!({"protocolVersion": "2025-11-25"}));
            }
            inner.oneshot(req).await
        }
    });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ep = BoxCloneService::new(
        StreamableHttpService::new(mcp)
            .stateful_sessions(SessionLimits::new())
            .shutdown(shutdown.clone())
            .drain_grace(Duration::from_secs(3600)),
    );
    let s = open(&ep).await;
    let t = open(&ep).await;
    let call = start(&ep, post(&legacy_call(1, "hang"), Some(&s)));
    started(&mut events, 1).await;
    let other = start(&ep, post(&legacy_call(2, "hang"), Some(&t)));
    started(&mut events, 2).await;
    shutdown.cancel();

    let (status, _, _) = send(&ep, post(&legacy_call(3, "echo"), Some(&s))).await;
    assert_eq!(status, 503, "no new work while draining");
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&s))).await;
    assert_eq!(status, 202);
    events.until(|e| *e == Event::Dropped(1.into())).await;
    assert_eq!(call.await.unwrap().0, 204);
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&t))).await;
    assert_eq!(status, 200);
    events.until(|e| *e == Event::Dropped(2.into())).await;
    assert_eq!(other.await.unwrap().0, 204);
}

/// An adapter with legacy sessions whose `initialize` is refused with the
/// 2025 lifecycle's own example (`-32602` "Unsupported protocol version")
/// when the client asks for `1999-01-01`, after a notification first when
/// it asks for `1999-01-02` (an SSE answer), and answered otherwise.
fn picky_endpoint(limits: SessionLimits) -> Endpoint {
    let mcp = service_fn(|req: McpRequest| async move {
        let params: Value = req.params_as().unwrap_or_default();
        let asked = params["protocolVersion"].as_str().unwrap_or("");
        if asked == "1999-01-02" {
            tower_mcp_cancel::notify::RequestContext::of(&req)
                .notify(
                    "notifications/message",
                    &json!({"level": "info", "data": "checking"}),
                )
                .await;
        }
        if asked.starts_with("1999") {
            return Err::<Value, BoxError>(Box::new(
                tower_mcp_cancel::jsonrpc::ErrorObject::new(-32602, "Unsupported protocol version")
                    .with_data(json!({"supported": ["2025-11-25"], "requested": asked})),
            ));
        }
        Ok(json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "serverInfo": {"name": "test", "version": "0"}}))
    });
    BoxCloneService::new(StreamableHttpService::new(mcp).stateful_sessions(limits))
}

fn initialize_asking(id: i64, version: &str) -> Value {
    let mut v = initialize(id);
    v["params"]["protocolVersion"] = json!(version);
    v
}

/// The session id belongs only on the response that carries an
/// `InitializeResult`: an `initialize` answered with a JSON-RPC error (HTTP
/// 200, as every other error) mints none and holds no place under the
/// bound.
#[tokio::test]
async fn an_initialize_answered_with_an_error_mints_no_session() {
    let ep = picky_endpoint(SessionLimits::new().max_sessions(1));
    for id in 0..3 {
        let (status, session, text) =
            send(&ep, post(&initialize_asking(id, "1999-01-01"), None)).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(session, None, "a refused handshake carries no session id");
    }
    // The bound (1) is still free.
    let (status, session, text) = send(&ep, post(&initialize(9), None)).await;
    assert_eq!(status, 200, "{text}");
    assert!(session.is_some(), "{text}");
}

/// The SSE twin: a refused `initialize` whose answer streams (a
/// notification came first) had its headers sent before the answer was
/// known; the session it named is ended with that answer, so it holds no
/// place and its id is unknown afterwards.
#[tokio::test]
async fn a_streamed_initialize_error_ends_the_session_it_named() {
    let ep = picky_endpoint(SessionLimits::new().max_sessions(1));
    let (status, session, text) = send(&ep, post(&initialize_asking(0, "1999-01-02"), None)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("-32602"), "{text}");
    if let Some(s) = session {
        let (status, _, _) = send(&ep, post(&legacy_call(1, "echo"), Some(&s))).await;
        assert_eq!(status, 404, "the refused handshake's session is gone");
    }
    let (status, session, text) = send(&ep, post(&initialize(9), None)).await;
    assert_eq!(status, 200, "{text}");
    assert!(session.is_some(), "the bound is free again: {text}");
}

/// RFC 9110 §15.5.6: `Allow` lists the methods the resource supports; with
/// legacy sessions on, that includes `DELETE`.
#[tokio::test]
async fn get_is_405_with_an_allow_that_lists_every_method_served() {
    let (ep, _tools, _events) = endpoint(SessionLimits::new());
    let res = ep
        .clone()
        .oneshot(request(http::Method::GET, None, None))
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let allow = res.headers().get(http::header::ALLOW).unwrap();
    let mut methods: Vec<&str> = allow.to_str().unwrap().split(',').map(str::trim).collect();
    methods.sort_unstable();
    assert_eq!(methods, ["DELETE", "POST"]);

    // Without sessions, POST only.
    let (tools, _events) = Tools::new();
    let res = StreamableHttpService::new(tools.service())
        .oneshot(request(http::Method::GET, None, None))
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers().get(http::header::ALLOW).unwrap(), "POST");
}

/// A `MakeWriter` collecting log output into one shared buffer.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// Captures this thread's logs (the test runtime is current-thread)
    /// until the guards drop.
    fn capture() -> (Self, (tracing::subscriber::DefaultGuard, tracing::Dispatch)) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // With a single live dispatcher, tracing-core computes a callsite's
        // interest from the default of the thread that first hits it: a
        // concurrent test's thread, with no subscriber, would disable that
        // callsite for this one too. A second live dispatcher makes it ask
        // every dispatcher (and rebuilds the cache).
        let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        (logs, (guard, second))
    }

    /// Asserts every line is short and free of control characters.
    fn assert_bounded(&self) -> String {
        let out = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        for line in out.lines() {
            assert!(line.len() < 2048, "a log line of {} bytes", line.len());
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        out
    }
}

/// A session's `notifications/cancelled` names a request id from the wire:
/// logged bounded and clean, whether the id names a request or not.
#[tokio::test]
async fn a_session_cancel_logs_a_bounded_request_id() {
    let (logs, _guard) = Logs::capture();
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let huge = format!("{}\u{1b}[31m\u{85}", "i\n".repeat(500_000));
    let mut call = legacy_call(0, "hang");
    call["id"] = json!(huge);
    let running = start(&ep, post(&call, Some(&s)));
    events.until(|e| matches!(e, Event::Started(_))).await;
    for id in [json!(huge), json!(format!("{huge}-unknown"))] {
        let mut n = cancelled(0);
        n["params"]["requestId"] = id;
        let (status, _, _) = send(&ep, post(&n, Some(&s))).await;
        assert_eq!(status, 202);
    }
    assert_eq!(running.await.unwrap().0, 204);
    let out = logs.assert_bounded();
    assert!(
        out.lines()
            .filter(|l| l.contains("notifications/cancelled from a legacy session"))
            .count()
            == 2,
        "{out}"
    );
}

/// The disconnect twin: an `initialize` whose response future is dropped
/// before its answer (the client went away) never delivered its session id,
/// so its session holds no place either.
#[tokio::test]
async fn an_initialize_dropped_before_its_answer_holds_no_place() {
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let wait = release.clone();
    let mcp = service_fn(move |req: McpRequest| {
        let wait = wait.clone();
        async move {
            let params: Value = req.params_as().unwrap_or_default();
            if params["protocolVersion"] == "slow" {
                wait.notified().await;
            }
            Ok::<_, BoxError>(json!({"protocolVersion": "2025-11-25", "capabilities": {},
                "serverInfo": {"name": "test", "version": "0"}}))
        }
    });
    let ep: Endpoint = BoxCloneService::new(
        StreamableHttpService::new(mcp).stateful_sessions(SessionLimits::new().max_sessions(1)),
    );
    let mut slow = Box::pin(
        ep.clone()
            .oneshot(post(&initialize_asking(0, "slow"), None)),
    );
    // One poll mints the session and leaves the handler waiting.
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(slow.as_mut().poll(cx))).await;
    assert!(first.is_pending());
    drop(slow);
    let (status, session, text) = send(&ep, post(&initialize(1), None)).await;
    assert_eq!(status, 200, "{text}");
    assert!(session.is_some(), "{text}");
    release.notify_waiters();
}
