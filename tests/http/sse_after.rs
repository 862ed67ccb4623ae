//! `sse_after`: a handler that stays silent past the delay gets a
//! `text/event-stream` response — a comment at once, keep-alive comments at
//! the keep-alive interval, then its answer — instead of a JSON body only at
//! the end. Keep-alives are not progress, and a disconnect still cancels.
//!
//! The timing is checked in-process on tokio's paused clock; the wire shape,
//! our client reading it, and cancellation over real loopback sockets.
#![cfg(all(feature = "http", feature = "test-util"))]

use crate::support::http as http_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::BoxError;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};
use tower_mcp_cancel::{
    CancelReason, Cancellation, Elapsed, Limit, McpRequest, ProgressResetLayer,
};

/// A handler that answers when `release` is notified; its future holds the
/// probe's guard, and it hands out its request's cancellation.
#[derive(Clone)]
struct Slow {
    release: Arc<Notify>,
    probe: DropProbe,
    cancellation: Arc<Mutex<Option<Cancellation>>>,
}

impl Slow {
    fn new() -> (Self, DropProbe) {
        let probe = DropProbe::default();
        (
            Self {
                release: Arc::new(Notify::new()),
                probe: probe.clone(),
                cancellation: Arc::default(),
            },
            probe,
        )
    }

    fn service(
        &self,
    ) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send> + Clone + Send
    {
        let this = self.clone();
        service_fn(move |req: McpRequest| {
            let this = this.clone();
            async move {
                let guard = this.probe.guard();
                *this.cancellation.lock().unwrap() =
                    RequestContext::of(&req).cancellation().cloned();
                this.release.notified().await;
                guard.finish();
                Ok::<_, BoxError>(json!({"resultType": "complete", "released": true}))
            }
        })
    }
}

fn request(id: i64) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::post("http://127.0.0.1/mcp");
    for (k, v) in modern_headers("slow") {
        b = b.header(k, v);
    }
    b.body(Full::new(Bytes::from(
        serde_json::to_vec(&tool_call(id, "slow", json!({}))).unwrap(),
    )))
    .unwrap()
}

fn data(frame: http_body::Frame<Bytes>) -> String {
    String::from_utf8_lossy(frame.data_ref().expect("a data frame")).into_owned()
}

#[tokio::test(start_paused = true)]
async fn silent_handler_switches_to_sse_at_the_delay_paused_clock() {
    let (slow, probe) = Slow::new();
    let svc = StreamableHttpService::new(slow.service())
        .sse_after(Some(Duration::from_secs(30)))
        .keep_alive(Some(Duration::from_secs(15)));
    let start = Instant::now();
    let mut fut = Box::pin(svc.oneshot(request(1)));

    // Nothing before the delay...
    assert!(tokio::time::timeout(Duration::from_secs(29), &mut fut)
        .await
        .is_err());
    // ...then the response head, as SSE, at the delay exactly.
    let res = tokio::time::timeout(Duration::from_secs(5), &mut fut)
        .await
        .expect("switched to SSE")
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    assert_eq!(res.headers()["x-accel-buffering"], "no");
    let mut body = res.into_body();

    // A comment at once, then one per keep-alive interval.
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(data(first), ":\n\n");
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    for n in 1..=2u64 {
        let ka = body.frame().await.unwrap().unwrap();
        assert_eq!(data(ka), ":\n\n");
        assert_eq!(start.elapsed(), Duration::from_secs(30 + 15 * n));
    }
    assert!(!probe.is_dropped(), "the handler is still running");

    // The answer ends the stream.
    slow.release.notify_one();
    let answer = data(body.frame().await.unwrap().unwrap());
    let line = answer
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or_else(|| panic!("no data line: {answer:?}"));
    let v: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["id"], 1);
    assert_eq!(v["result"]["released"], true);
    assert!(body.frame().await.is_none());
    assert!(probe.is_finished() && !probe.was_cancelled());
}

#[tokio::test(start_paused = true)]
async fn without_sse_after_the_answer_is_json_at_the_end() {
    let (slow, _probe) = Slow::new();
    let svc = StreamableHttpService::new(slow.service()).sse_after(None);
    let mut fut = Box::pin(svc.oneshot(request(2)));
    assert!(tokio::time::timeout(Duration::from_secs(3600), &mut fut)
        .await
        .is_err());
    slow.release.notify_one();
    let res = fut.await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["released"], true);
}

#[tokio::test(start_paused = true)]
async fn the_default_switches_after_ten_seconds_and_a_quick_answer_stays_json() {
    // The documented default of `sse_after`: 10 s.
    let (slow, _probe) = Slow::new();
    let svc = StreamableHttpService::new(slow.service());
    let mut fut = Box::pin(svc.clone().oneshot(request(3)));
    assert!(tokio::time::timeout(Duration::from_millis(9_999), &mut fut)
        .await
        .is_err());
    let res = tokio::time::timeout(Duration::from_millis(2), &mut fut)
        .await
        .expect("switched")
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");

    // A handler that answers before the delay is still answered with JSON.
    let (quick, _probe) = Slow::new();
    quick.release.notify_one();
    let res = StreamableHttpService::new(quick.service())
        .oneshot(request(4))
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_switched_stream_cancels_the_handler() {
    let (slow, probe) = Slow::new();
    let svc = StreamableHttpService::new(slow.service()).sse_after(Some(Duration::from_secs(1)));
    let res = svc.oneshot(request(5)).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    assert_eq!(data(body.frame().await.unwrap().unwrap()), ":\n\n");
    assert!(!probe.is_dropped());
    drop(body); // the client went away
    assert!(probe.was_cancelled(), "the handler future was dropped");
    let c = slow.cancellation.lock().unwrap().clone().unwrap();
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
}

/// Reads from `stream` until `done(&text)` holds (bounded).
async fn read_while(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
    done: impl Fn(&str) -> bool,
) {
    let mut chunk = [0u8; 4096];
    bounded(async {
        while !done(&String::from_utf8_lossy(buf)) {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(buf));
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
}

#[tokio::test]
async fn over_loopback_the_switch_is_sse_with_keep_alives_then_the_answer() {
    let (addr, tools, mut events) = serve_tools(Proto::H1, |s| {
        s.sse_after(Some(Duration::from_millis(20)))
            .keep_alive(Some(Duration::from_millis(10)))
    })
    .await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers = modern_headers("wait_release");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream
        .write_all(&raw_post(&tool_call(1, "wait_release", json!({})), &extra))
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The head, the first comment and two keep-alives, with no answer yet.
    read_while(&mut stream, &mut buf, |t| t.matches(":\n\n").count() >= 3).await;
    let seen = String::from_utf8_lossy(&buf).into_owned();
    assert!(seen.contains("content-type: text/event-stream"), "{seen}");
    assert!(!seen.contains("released"), "{seen}");
    tools.release.notify_one();
    read_while(&mut stream, &mut buf, |t| t.contains("\"released\":true")).await;
    let seen = events.until(|e| matches!(e, Event::Done(_))).await;
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Dropped(_))),
        "{seen:?}"
    );
}

/// The adapter, reporting each response head's content type on `heads`.
async fn serve_reporting_heads(
    configure: impl FnOnce(StreamableHttpService<()>) -> StreamableHttpService<()>,
) -> (
    std::net::SocketAddr,
    Tools,
    Events,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tools, events) = Tools::new();
    let template = configure(StreamableHttpService::new(()));
    let svc = tower::Layer::layer(&template, tools.service());
    let (tx, heads) = tokio::sync::mpsc::unbounded_channel();
    let svc = tower::Layer::layer(
        &tower::util::MapResponseLayer::new(move |res: http::Response<_>| {
            let ct = res
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap_or("").to_owned())
                .unwrap_or_default();
            let _ = tx.send(ct);
            res
        }),
        svc,
    );
    let addr = serve(svc, Proto::H1, tools.recorder()).await;
    (addr, tools, events, heads)
}

#[tokio::test]
async fn our_client_reads_the_switched_stream_and_keep_alives_are_not_progress() {
    let (addr, tools, mut events, mut heads) = serve_reporting_heads(|s| {
        s.sse_after(Some(Duration::from_millis(5)))
            .keep_alive(Some(Duration::from_millis(5)))
    })
    .await;
    let http = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());

    // The answer arrives on the stream after the switch.
    let mut c = http.clone();
    let call = tokio::spawn(async move {
        c.ready()
            .await
            .unwrap()
            .call(
                McpRequest::without_id("tools/call")
                    .with_params(json!({"name": "wait_release", "arguments": {}})),
            )
            .await
    });
    assert_eq!(
        bounded(heads.recv()).await.unwrap(),
        "text/event-stream",
        "switched while the handler waits"
    );
    tools.release.notify_one();
    let r = bounded(call).await.unwrap().unwrap();
    assert_eq!(r["released"], true);

    // A silent handler: keep-alives flow, yet the idle limit fires, and the
    // closed stream cancels the handler on the server.
    let mut c = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(200)))
        .service(http);
    let err = bounded(c.ready().await.unwrap().call(
        McpRequest::without_id("tools/call").with_params(json!({"name": "hang", "arguments": {}})),
    ))
    .await
    .unwrap_err();
    let e = err.downcast_ref::<Elapsed>().expect("an idle timeout");
    assert_eq!(e.limit(), Limit::Idle);
    assert_eq!(bounded(heads.recv()).await.unwrap(), "text/event-stream");
    let mut dropped = false;
    let mut token = false;
    while !(dropped && token) {
        match events.next().await {
            Event::Dropped(_) => dropped = true,
            Event::Token(_, r) => {
                assert_eq!(r, Some(CancelReason::ClientDisconnected));
                token = true;
            }
            _ => {}
        }
    }
}
