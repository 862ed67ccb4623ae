//! The server's lifecycle: work it runs outside a request's response
//! (a 2025-era handler whose client hung up) is reached by shutdown, the
//! drain grace and a session's `DELETE`, counted by the in-flight bound,
//! and waited for by `serve`; a `subscriptions/listen` the server tears
//! down ends with `notifications/cancelled`; every state in which a peer
//! holds a connection has a timer ([`crate::connection_timers`]).
//!
//! Time is paused in every test. The adapter is called directly where no
//! socket is needed; `serve` tests run the server in the test's runtime on
//! loopback sockets, where the paused clock advances only once no socket
//! event is ready (tokio polls the sockets before it moves the clock).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::BoxError;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
use tower_mcp_cancel::{CancelReason, Cancelled, McpRequest};

use crate::support::drain::{service, GRACE};
use crate::support::http::{tool_call, Tools};

/// A 2025-era POST (`MCP-Protocol-Version: 2025-11-25`, no modern `_meta`).
fn legacy_post(id: i64, method: &str, params: Value) -> Request<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(Full::new(serde_json::to_vec(&body).unwrap().into()))
        .unwrap()
}

/// A 2026 POST of `body` (which carries its `_meta`).
fn modern_post(body: &Value) -> Request<Full<Bytes>> {
    let method = body["method"].as_str().unwrap();
    let mut b = Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        b = b.header("mcp-name", name);
    }
    b.body(Full::new(serde_json::to_vec(body).unwrap().into()))
        .unwrap()
}

/// Starts a request whose response is awaited in a task: aborting the task
/// is the client hanging up.
fn start<S>(svc: &S, req: Request<Full<Bytes>>) -> tokio::task::JoinHandle<(StatusCode, String)>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<tower_mcp_cancel::transport::http::ResponseBody>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let svc = svc.clone();
    tokio::spawn(async move {
        let res = svc.oneshot(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

/// The JSON-RPC messages of an SSE body (its `data:` lines) or a JSON body.
fn messages(body: &str) -> Vec<Value> {
    let data: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if data.is_empty() {
        serde_json::from_str(body).into_iter().collect()
    } else {
        data
    }
}

// ---------------------------------------------------------------------------
// subscriptions/listen torn down by the server

#[tokio::test(start_paused = true)]
async fn a_listen_torn_down_by_the_server_ends_its_stream_with_notifications_cancelled() {
    let mcp = service_fn(|req: McpRequest| async move {
        assert_eq!(req.method(), "subscriptions/listen");
        Err::<Value, BoxError>(Box::new(Cancelled::new(CancelReason::Other(
            "subscription closed by the server".into(),
        ))))
    });
    let svc = StreamableHttpService::new(mcp);
    let listen = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
    "notifications": {"toolsListChanged": true},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let (status, body) = start(&svc, modern_post(&listen)).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let last = messages(&body).pop().unwrap_or(Value::Null);
    assert_eq!(last["method"], "notifications/cancelled", "{body}");
    assert_eq!(last["params"]["requestId"], 7, "{body}");
    assert!(last["params"]["reason"].is_string(), "{body}");
    assert!(last.get("id").is_none(), "a notification: {body}");
}

#[tokio::test]
async fn the_http_client_ends_a_listen_the_server_tore_down_as_cancelled() {
    use tower_mcp_cancel::transport::http::HttpClient;
    let mcp = service_fn(|req: McpRequest| async move {
        if req.method() == "subscriptions/listen" {
            return Err::<Value, BoxError>(Box::new(Cancelled::new(CancelReason::Other(
                "subscription closed by the server".into(),
            ))));
        }
        Ok(json!({"resultType": "complete"}))
    });
    let shutdown = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        StreamableHttpService::new(mcp),
        shutdown.clone(),
    ));

    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let listen = McpRequest::new(7, "subscriptions/listen")
        .with_params(json!({"notifications": {"toolsListChanged": true}}));
    let err = tokio::time::timeout(crate::support::http::WAIT, client.oneshot(listen))
        .await
        .expect("the call ended")
        .expect_err("a torn-down listen has no result");
    let cancelled = err
        .downcast_ref::<Cancelled>()
        .unwrap_or_else(|| panic!("not Cancelled: {err}"));
    assert!(
        matches!(cancelled.reason(), CancelReason::Peer(Some(r)) if r.contains("subscription closed")),
        "{cancelled:?}"
    );
    shutdown.cancel();
}
// ---------------------------------------------------------------------------
// detached 2025-era handlers: shutdown and the drain grace reach them

#[tokio::test(start_paused = true)]
async fn a_legacy_request_whose_client_hung_up_is_cancelled_by_shutdown_after_the_grace() {
    let (recorder, mut events) = Recorder::new();
    let shutdown = CancellationToken::new();
    let svc = StreamableHttpService::new(service(recorder))
        .shutdown(shutdown.clone())
        .drain_grace(GRACE);
    let call = start(&svc, legacy_post(1, "work", json!({"ms": 60_000})));
    assert_eq!(events.next().await, Event::Started(1.into()));
    // The client hangs up: a 2025 request is detached, not cancelled.
    call.abort();
    let _ = call.await;
    assert!(
        events.try_next().is_none(),
        "a disconnect does not cancel it"
    );

    let t0 = Instant::now();
    shutdown.cancel();
    let mut seen = events
        .until(|e| matches!(e, Event::Dropped(_) | Event::Done(_)))
        .await;
    assert_eq!(
        seen.last(),
        Some(&Event::Dropped(1.into())),
        "the detached handler was dropped by the shutdown, not left to finish: {seen:?}"
    );
    assert_eq!(t0.elapsed(), GRACE, "dropped when the grace was over");
    if !seen.iter().any(|e| matches!(e, Event::Token(..))) {
        seen = events.until(|e| matches!(e, Event::Token(..))).await;
    }
    assert!(
        seen.contains(&Event::Token(1.into(), Some(CancelReason::Shutdown))),
        "its token fired with Shutdown: {seen:?}"
    );
}

/// A response future that records its drop: hyper drops it when the
/// client's connection is gone, which orders the test after the detach.
struct NoteDrop<F> {
    inner: Pin<Box<F>>,
    recorder: Recorder,
}

impl<F: Future> Future for NoteDrop<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<F> Drop for NoteDrop<F> {
    fn drop(&mut self) {
        self.recorder.note("response dropped");
    }
}

#[tokio::test(start_paused = true)]
async fn serve_returns_only_after_a_detached_legacy_handler_ended() {
    let (tools, mut events) = Tools::new();
    let shutdown = CancellationToken::new();
    let svc = StreamableHttpService::new(tools.service())
        .shutdown(shutdown.clone())
        .drain_grace(GRACE);
    let recorder = tools.recorder();
    let app = service_fn(move |req: Request<hyper::body::Incoming>| NoteDrop {
        inner: Box::pin(svc.clone().oneshot(req)),
        recorder: recorder.clone(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut server = tokio::spawn(serve(listener, app, shutdown.clone()));

    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "wait_release", "arguments": {}}}))
    .unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    events.until(|e| *e == Event::Started(1.into())).await;
    drop(client);
    events
        .until(|e| *e == Event::Note("response dropped"))
        .await;

    shutdown.cancel();
    tokio::select! {
        biased;
        seen = events.until(|e| matches!(e, Event::Dropped(_) | Event::Done(_))) => {
            assert_eq!(seen.last(), Some(&Event::Dropped(1.into())), "{seen:?}");
        }
        _ = &mut server => panic!("serve returned while a detached handler still ran"),
    }
    tokio::time::timeout(GRACE, server)
        .await
        .expect("serve returned once the detached handler ended")
        .unwrap();
}

// ---------------------------------------------------------------------------
// the bound on the work one adapter runs

#[tokio::test(start_paused = true)]
async fn past_the_default_bound_a_request_is_refused_with_503_and_detached_handlers_count() {
    // The documented default: 1024 requests at once, attached or detached.
    const BOUND: i64 = 1024;
    let (tools, mut events) = Tools::new();
    let svc = StreamableHttpService::new(tools.service());
    for id in 0..BOUND {
        let call = start(
            &svc,
            legacy_post(id, "tools/call", json!({"name": "hang", "arguments": {}})),
        );
        events.until(|e| *e == Event::Started(id.into())).await;
        // Half of them are detached (their clients hung up).
        if id % 2 == 0 {
            call.abort();
            let _ = call.await;
        }
    }
    let echo = tool_call(BOUND, "echo", json!({"text": "one too many"}));
    let (status, body) = start(&svc, modern_post(&echo)).await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let error: Value = serde_json::from_str(&body).expect("a JSON-RPC error body");
    assert_eq!(error["id"], BOUND, "{body}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in flight")),
        "{body}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_bound_counts_a_request_until_its_end_and_takes_any_value() {
    let (tools, mut events) = Tools::new();
    let svc = StreamableHttpService::new(tools.service()).max_in_flight(0);
    let held = start(&svc, modern_post(&tool_call(1, "wait_release", json!({}))));
    events.until(|e| *e == Event::Started(1.into())).await;

    let res = svc
        .clone()
        .oneshot(modern_post(&tool_call(2, "echo", json!({"text": "x"}))))
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "0 is taken as 1"
    );
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(res.headers()["content-type"], "application/json");

    tools.release.notify_one();
    assert_eq!(held.await.unwrap().0, StatusCode::OK);
    let (status, body) = start(
        &svc,
        modern_post(&tool_call(3, "echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "the place was given back at the end: {body}"
    );

    let huge = StreamableHttpService::new(tools.service()).max_in_flight(usize::MAX);
    let (status, _) = start(
        &huge,
        modern_post(&tool_call(4, "echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_session_delete_reaches_a_detached_handler_and_gives_its_place_back() {
    use tower_mcp_cancel::transport::http::SessionLimits;
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
    let svc = StreamableHttpService::new(mcp)
        .stateful_sessions(SessionLimits::new())
        .max_in_flight(1);
    let init = legacy_post(
        0,
        "initialize",
        json!({"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}),
    );
    let res = svc.clone().oneshot(init).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let session = res.headers()["mcp-session-id"].clone();
    let in_session = |mut req: Request<Full<Bytes>>| {
        req.headers_mut().insert("mcp-session-id", session.clone());
        req
    };

    let call = start(
        &svc,
        in_session(legacy_post(
            1,
            "tools/call",
            json!({"name": "hang", "arguments": {}}),
        )),
    );
    events.until(|e| *e == Event::Started(1.into())).await;
    call.abort();
    let _ = call.await;
    let echo = || {
        in_session(legacy_post(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        ))
    };
    let (status, _) = start(&svc, echo()).await.unwrap();
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the detached handler holds the place"
    );

    let delete = in_session(
        Request::delete("http://127.0.0.1/mcp")
            .body(Full::new(Bytes::new()))
            .unwrap(),
    );
    assert_eq!(
        svc.clone().oneshot(delete).await.unwrap().status(),
        StatusCode::OK
    );
    events.until(|e| *e == Event::Dropped(1.into())).await;

    let res = svc
        .clone()
        .oneshot(legacy_post(
            3,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "the place was given back");
}
