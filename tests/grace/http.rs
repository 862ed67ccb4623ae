//! Grace over Streamable HTTP, the adapter driven in memory (a dropped
//! response future is a disconnect): a 2026 client's disconnect, a
//! `TimeoutLayer` expiry and the shutdown × finished within the grace /
//! dropped after it / no grace; nothing sent during a grace; the in-flight
//! bound with work in grace.
#![cfg(feature = "http")]

use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Events, Recorder};
use tower_mcp_cancel::transport::http::StreamableHttpService;
use tower_mcp_cancel::{MethodPolicy, TimeoutLayer};

use crate::handler::{cleanup_params, handler, Svc};
use crate::support::http::{modern_headers, post};

type Endpoint = StreamableHttpService<Svc>;

fn endpoint(grace_ms: Option<u64>, wrap: impl FnOnce(Svc) -> Svc) -> (Endpoint, Events) {
    let (rec, ev) = Recorder::new();
    let mut ep = StreamableHttpService::new(wrap(handler(rec)));
    if let Some(ms) = grace_ms {
        ep = ep.grace(MethodPolicy::new(Duration::from_millis(ms)));
    }
    (ep, ev)
}

fn cleanup_call(n: i64, ms: u64) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut params = cleanup_params(ms);
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": format!("p{n}")
    });
    let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params});
    post(&body, &modern_headers("cleanup"))
}

fn id(n: i64) -> RequestId {
    RequestId::from(n)
}

/// Starts request 1, disconnects once its handler runs; returns how it
/// ended and how long after the disconnect.
async fn disconnect(grace_ms: Option<u64>, cleanup_ms: u64) -> (Event, Duration) {
    let (ep, mut ev) = endpoint(grace_ms, |s| s);
    let mut res = Box::pin(ep.oneshot(cleanup_call(1, cleanup_ms)));
    tokio::select! {
        r = &mut res => panic!("answered: {:?}", r.map(|r| r.status())),
        e = ev.next() => assert_eq!(e, Event::Started(id(1))),
    }
    let t0 = Instant::now();
    drop(res);
    let end = ev.next().await;
    (end, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn disconnect_cleanup_finishes_within_the_grace() {
    assert_eq!(
        disconnect(Some(500), 100).await,
        (Event::Done(id(1)), Duration::from_millis(100))
    );
}

#[tokio::test(start_paused = true)]
async fn disconnect_cleanup_is_dropped_after_the_grace() {
    assert_eq!(
        disconnect(Some(500), 10_000).await,
        (Event::Dropped(id(1)), Duration::from_millis(500))
    );
}

#[tokio::test(start_paused = true)]
async fn disconnect_without_a_grace_drops_at_once() {
    assert_eq!(
        disconnect(None, 100).await,
        (Event::Dropped(id(1)), Duration::ZERO)
    );
}

/// A `TimeoutLayer` of 1 s: the answer (the whole body) at the deadline;
/// then the handler's end.
async fn timeout(grace_ms: Option<u64>, cleanup_ms: u64) -> (Duration, Event, Duration) {
    let (ep, mut ev) = endpoint(grace_ms, |s| {
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(1)))
                .service(s),
        )
    });
    let t0 = Instant::now();
    let res = ep.oneshot(cleanup_call(1, cleanup_ms)).await.unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let answered = t0.elapsed();
    let text = String::from_utf8_lossy(&body).into_owned();
    assert!(
        text.contains("\"error\"") && text.contains("\"id\":1"),
        "{text}"
    );
    assert!(
        !text.contains("late") && !text.contains("cleaning"),
        "{text}"
    );
    assert!(!text.contains("progress"), "{text}");
    let events = ev
        .until(|e| matches!(e, Event::Done(_) | Event::Dropped(_)))
        .await;
    (answered, events.last().cloned().unwrap(), t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn timeout_answers_at_the_deadline_and_the_cleanup_finishes_in_the_grace() {
    let (answered, end, ended) = timeout(Some(500), 100).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(
        (end, ended),
        (Event::Done(id(1)), Duration::from_millis(1100))
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_answers_at_the_deadline_and_the_handler_is_dropped_after_the_grace() {
    let (answered, end, ended) = timeout(Some(500), 10_000).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(
        (end, ended),
        (Event::Dropped(id(1)), Duration::from_millis(1500))
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_without_a_grace_drops_at_the_deadline() {
    let (answered, end, ended) = timeout(None, 100).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(
        (end, ended),
        (Event::Dropped(id(1)), Duration::from_secs(1))
    );
}

/// The shutdown: the pending request is answered `503` at once, its
/// handler ends in its grace.
async fn shutdown(grace_ms: Option<u64>, cleanup_ms: u64) -> (u16, Event, Duration) {
    let token = CancellationToken::new();
    let (ep, mut ev) = endpoint(grace_ms, |s| s);
    let ep = ep.shutdown(token.clone());
    let mut res = Box::pin(ep.oneshot(cleanup_call(1, cleanup_ms)));
    tokio::select! {
        r = &mut res => panic!("answered: {:?}", r.map(|r| r.status())),
        e = ev.next() => assert_eq!(e, Event::Started(id(1))),
    }
    let t0 = Instant::now();
    token.cancel();
    let res = res.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::ZERO, "answered at the shutdown");
    let status = res.status().as_u16();
    let end = ev.next().await;
    (status, end, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn shutdown_answers_at_once_and_the_cleanup_finishes_in_the_grace() {
    assert_eq!(
        shutdown(Some(500), 100).await,
        (503, Event::Done(id(1)), Duration::from_millis(100))
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_answers_at_once_and_drops_after_the_grace() {
    assert_eq!(
        shutdown(Some(500), 10_000).await,
        (503, Event::Dropped(id(1)), Duration::from_millis(500))
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_without_a_grace_drops_at_once() {
    assert_eq!(
        shutdown(None, 100).await,
        (503, Event::Dropped(id(1)), Duration::ZERO)
    );
}

#[tokio::test(start_paused = true)]
async fn work_in_its_grace_keeps_its_place_under_the_in_flight_bound() {
    let (ep, mut ev) = endpoint(Some(500), |s| s);
    // Clones share the bound.
    let ep = ep.max_in_flight(1);
    let mut res = Box::pin(ep.clone().oneshot(cleanup_call(1, 10_000)));
    tokio::select! {
        r = &mut res => panic!("answered: {:?}", r.map(|r| r.status())),
        e = ev.next() => assert_eq!(e, Event::Started(id(1))),
    }
    drop(res);
    // In its grace: the place is still taken.
    let busy = ep.clone().oneshot(cleanup_call(2, 0)).await.unwrap();
    assert_eq!(busy.status(), 503);
    assert!(ev.try_next().is_none(), "still in its grace");
    assert_eq!(ev.next().await, Event::Dropped(id(1)));
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "other", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    }});
    let ok = ep
        .oneshot(post(&body, &modern_headers("other")))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let text: Value =
        serde_json::from_slice(&ok.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(text["id"], json!(3));
}

/// Under `serve`, a shutdown's cancel is answered at once, and `serve`
/// returns only once the handler's cleanup in its grace ended (real
/// sockets: the cleanup waits for the test, not for a clock).
#[tokio::test]
async fn serve_returns_only_once_the_grace_ended() {
    use std::sync::Arc;
    use tokio::net::TcpListener;
    use tower::service_fn;
    use tower_mcp_cancel::notify::RequestContext;
    use tower_mcp_cancel::transport::http::serve;
    use tower_mcp_cancel::McpRequest;

    use crate::support::http::{bounded, Conn, Proto};

    let (rec, mut ev) = Recorder::new();
    let release = Arc::new(tokio::sync::Notify::new());
    let cleanup_done = release.clone();
    let svc: Svc = BoxCloneService::new(service_fn(move |req: McpRequest| {
        let (rec, release) = (rec.clone(), cleanup_done.clone());
        async move {
            let guard = rec.start(&req);
            RequestContext::of(&req).token().cancelled().await;
            release.notified().await; // the cleanup
            guard.finish();
            Ok::<_, tower::BoxError>(json!({}))
        }
    }));
    let shutdown = CancellationToken::new();
    let ep = StreamableHttpService::new(svc)
        .shutdown(shutdown.clone())
        .grace(MethodPolicy::new(Duration::from_secs(3600)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener, ep, shutdown.clone()));
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let call = tokio::spawn(conn.send(cleanup_call(1, 0)));
    assert_eq!(bounded(ev.next()).await, Event::Started(id(1)));

    shutdown.cancel();
    let res = bounded(call).await.unwrap().expect("answered");
    assert_eq!(res.status(), 503, "the shutdown's answer, at once");
    tokio::task::yield_now().await;
    assert!(
        !server.is_finished(),
        "returned with a handler in its grace"
    );
    assert!(ev.try_next().is_none(), "the cleanup still runs");
    release.notify_one();
    assert_eq!(bounded(ev.next()).await, Event::Done(id(1)));
    bounded(server).await.unwrap();
}

/// Disconnects from a `tools/call` of `tool` (`cleanup` spending 100 ms,
/// or `hang`) under the grace `policy`: how it ended, how long after.
async fn disconnected_tool(policy: MethodPolicy<Duration>, tool: &str) -> (Event, Duration) {
    let (rec, mut ev) = Recorder::new();
    let ep = StreamableHttpService::new(handler(rec)).grace(policy);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {"ms": 100},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let req = post(&body, &modern_headers(tool));
    let mut res = Box::pin(ep.oneshot(req));
    tokio::select! {
        r = &mut res => panic!("answered: {:?}", r.map(|r| r.status())),
        e = ev.next() => assert_eq!(e, Event::Started(id(1))),
    }
    let t0 = Instant::now();
    drop(res);
    let end = ev.next().await;
    (end, t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_tools_grace_comes_before_its_methods() {
    let ms = Duration::from_millis;
    let policy = MethodPolicy::new(Duration::ZERO)
        .method("tools/call", ms(500))
        .tool("cleanup", ms(50));
    assert_eq!(
        disconnected_tool(policy.clone(), "cleanup").await,
        (Event::Dropped(id(1)), ms(50))
    );
    assert_eq!(
        disconnected_tool(policy, "hang").await,
        (Event::Dropped(id(1)), ms(500))
    );
    let policy = MethodPolicy::new(Duration::ZERO).tool("cleanup", ms(500));
    assert_eq!(
        disconnected_tool(policy, "cleanup").await,
        (Event::Done(id(1)), ms(100))
    );
}
