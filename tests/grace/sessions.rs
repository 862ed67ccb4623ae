//! Grace in a 2025-era session (the adapter called in memory): the
//! session's `notifications/cancelled` and its `DELETE` × finished within
//! the grace / dropped after it / no grace. The client hears what it hears
//! without a grace (nothing for the cancelled request), at once.
#![cfg(feature = "http")]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use std::convert::Infallible;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, ServiceExt};
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Events, Recorder};
use tower_mcp_cancel::transport::http::{ResponseBody, SessionLimits, StreamableHttpService};
use tower_mcp_cancel::{McpRequest, MethodPolicy};

use crate::handler::{cleanup_params, handler};
use crate::support::http::session_request as request;

type Endpoint = BoxCloneService<Request<Full<Bytes>>, Response<ResponseBody>, Infallible>;

fn endpoint(grace_ms: Option<u64>) -> (Endpoint, Events) {
    let (rec, ev) = Recorder::new();
    let inner = handler(rec);
    let svc = BoxCloneService::new(service_fn(move |req: McpRequest| {
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
    }));
    let mut ep = StreamableHttpService::new(svc).stateful_sessions(SessionLimits::new());
    if let Some(ms) = grace_ms {
        ep = ep.grace(MethodPolicy::new(Duration::from_millis(ms)));
    }
    (BoxCloneService::new(ep), ev)
}

async fn open(ep: &Endpoint) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"}}});
    let res = ep
        .clone()
        .oneshot(request(http::Method::POST, Some(&init), None))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_owned()
}

/// The call's status and body, and when the body ended.
async fn answered(ep: Endpoint, req: Request<Full<Bytes>>) -> (u16, String, Instant) {
    let res = ep.oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        String::from_utf8_lossy(&body).into_owned(),
        Instant::now(),
    )
}

#[derive(Clone, Copy)]
enum Cause {
    Cancel,
    Delete,
}

/// Starts a session's `cleanup` call, ends it by `cause`; returns the
/// call's status and body, when they came, and how and when the handler
/// ended (times since the cause).
async fn session_cause(
    cause: Cause,
    grace_ms: Option<u64>,
    cleanup_ms: u64,
) -> (u16, String, Duration, Event, Duration) {
    let (ep, mut ev) = endpoint(grace_ms);
    let s = open(&ep).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": cleanup_params(cleanup_ms)});
    let call = tokio::spawn(answered(
        ep.clone(),
        request(http::Method::POST, Some(&body), Some(&s)),
    ));
    assert_eq!(ev.next().await, Event::Started(RequestId::from(1)));
    let t0 = Instant::now();
    let status = match cause {
        Cause::Cancel => {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 1, "reason": "stop"}});
            ep.clone()
                .oneshot(request(http::Method::POST, Some(&note), Some(&s)))
                .await
                .unwrap()
                .status()
        }
        Cause::Delete => ep
            .clone()
            .oneshot(request(http::Method::DELETE, None, Some(&s)))
            .await
            .unwrap()
            .status(),
    };
    assert!(status.is_success(), "{status}");
    let end = ev.next().await;
    let ended = t0.elapsed();
    let (status, text, at) = call.await.unwrap();
    (status, text, at - t0, end, ended)
}

async fn check(cause: Cause, grace_ms: Option<u64>, cleanup_ms: u64, end: Event, ended: Duration) {
    let (status, text, answered, got, at) = session_cause(cause, grace_ms, cleanup_ms).await;
    assert!(
        !text.contains("late") && !text.contains("cleaning"),
        "{text}"
    );
    assert!(
        !text.contains("\"id\":1"),
        "nothing answered for the cancelled request: {status} {text}"
    );
    assert_eq!(answered, Duration::ZERO, "the client hears at the cancel");
    assert_eq!((got, at), (end, ended));
}

const ONE: fn() -> RequestId = || RequestId::from(1);

#[tokio::test(start_paused = true)]
async fn a_session_cancel_lets_the_cleanup_finish_in_the_grace() {
    check(
        Cause::Cancel,
        Some(500),
        100,
        Event::Done(ONE()),
        Duration::from_millis(100),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_drops_after_the_grace() {
    check(
        Cause::Cancel,
        Some(500),
        10_000,
        Event::Dropped(ONE()),
        Duration::from_millis(500),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_session_cancel_without_a_grace_drops_at_once() {
    check(
        Cause::Cancel,
        None,
        100,
        Event::Dropped(ONE()),
        Duration::ZERO,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_session_delete_lets_the_cleanup_finish_in_the_grace() {
    check(
        Cause::Delete,
        Some(500),
        100,
        Event::Done(ONE()),
        Duration::from_millis(100),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_session_delete_drops_after_the_grace() {
    check(
        Cause::Delete,
        Some(500),
        10_000,
        Event::Dropped(ONE()),
        Duration::from_millis(500),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_session_delete_without_a_grace_drops_at_once() {
    check(
        Cause::Delete,
        None,
        100,
        Event::Dropped(ONE()),
        Duration::ZERO,
    )
    .await;
}
