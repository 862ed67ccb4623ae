//! 2025-era sessions (`StreamableHttpService::stateful_sessions`): minted by
//! a legacy `initialize` (never by one answered with an error or dropped
//! before its answer); `DELETE` ends a session; unknown, ended and expired
//! sessions get `404`; the bound refuses, never evicts; modern requests stay
//! stateless. Cancelling in a session is [`crate::session_cancels`]'s. The
//! adapter is called directly (no sockets), so the clock can be paused.
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
use tower_mcp_cancel::McpRequest;

use crate::support::http::{modern_headers, tool_call, Event, Events, Tools};

type Endpoint = BoxCloneService<Request<Full<Bytes>>, Response<ResponseBody>, Infallible>;

/// The test tools behind an adapter with legacy sessions; `initialize` is
/// answered as a 2025 server does.
pub(crate) fn endpoint(limits: SessionLimits) -> (Endpoint, Tools, Events) {
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

pub(crate) use crate::support::http::session_request as request;

pub(crate) fn post(body: &Value, session: Option<&str>) -> Request<Full<Bytes>> {
    request(http::Method::POST, Some(body), session)
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}})
}

pub(crate) fn legacy_call(id: i64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {}}})
}

pub(crate) fn cancelled(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "user\nstop\u{1b}[31m"}})
}

async fn body(res: Response<ResponseBody>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) async fn send(
    ep: &Endpoint,
    req: Request<Full<Bytes>>,
) -> (u16, Option<String>, String) {
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
pub(crate) async fn open(ep: &Endpoint) -> String {
    let (status, session, text) = send(ep, post(&initialize(0), None)).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
    session.expect("initialize answered with Mcp-Session-Id")
}

/// Starts a call whose response is awaited in a task.
pub(crate) fn start(
    ep: &Endpoint,
    req: Request<Full<Bytes>>,
) -> tokio::task::JoinHandle<(u16, String)> {
    let ep = ep.clone();
    tokio::spawn(async move {
        let res = ep.oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        (status, body(res).await)
    })
}

/// Asserts that no handler was dropped among the events seen so far.
pub(crate) fn no_drop(events: &mut Events) {
    let seen = events.drain();
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Dropped(_))),
        "{seen:?}"
    );
}

pub(crate) async fn started(events: &mut Events, id: i64) {
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

/// A session's POSTs go through the same body limit as 2026 requests: a
/// request or a cancel over it is `413` naming the limit, and the session
/// goes on.
#[tokio::test]
async fn a_session_post_over_the_body_limit_is_refused_with_413() {
    let (tools, _events) = Tools::new();
    let inner = tools.service();
    let mcp = service_fn(move |req: McpRequest| {
        let inner = inner.clone();
        async move {
            if req.method() == "initialize" {
                return Ok::<_, BoxError>(json!({
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "serverInfo": {"name": "test", "version": "0"},
                }));
            }
            inner.oneshot(req).await
        }
    });
    let svc = StreamableHttpService::new(mcp)
        .stateful_sessions(SessionLimits::new())
        .max_body_bytes(1024);
    let ep: Endpoint = BoxCloneService::new(svc);
    let session = open(&ep).await;
    let pad = "x".repeat(4096);
    let big_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": pad}}});
    let big_cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": pad}});
    for big in [big_call, big_cancel] {
        let (status, _, text) = send(&ep, post(&big, Some(&session))).await;
        assert_eq!(status, 413, "{text}");
        assert!(text.contains("exceeds the limit of 1024 bytes"), "{text}");
    }
    let small = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let (status, _, text) = send(&ep, post(&small, Some(&session))).await;
    assert_eq!(status, 200, "{text}");
}
