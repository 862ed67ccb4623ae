//! Nothing of a request after its end: a task the handler spawned, holding
//! its `RequestContext`, is refused (and told so) once the request is
//! answered, over stdio and over HTTP; on the client side, progress that
//! comes for a call that ended, or that does not increase, neither reaches
//! the caller's `ProgressObserver` nor restarts the idle clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::settle;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{Elapsed, Limit, McpRequest, ProgressObserver, ProgressResetLayer};

use crate::support::stdio::pipe;

/// What a reporter the handler left behind was told when it tried to send
/// progress and a log message after the answer.
type Told = oneshot::Receiver<(bool, bool)>;

/// A handler that answers at once, leaving a reporter that, once `release`
/// is notified, reports progress and a log message through the request's
/// context and says what it was told on the returned channel.
fn leaves_a_reporter(
    release: Arc<Notify>,
) -> (
    impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static,
    Told,
) {
    let (told_tx, told) = oneshot::channel();
    let told_tx = Arc::new(Mutex::new(Some(told_tx)));
    let svc = service_fn(move |req: McpRequest| {
        let (release, told_tx) = (release.clone(), told_tx.clone());
        async move {
            let ctx = RequestContext::of(&req);
            tokio::spawn(async move {
                release.notified().await;
                let progress = ctx.progress(1.0, None, None).await;
                let log = ctx
                    .notify(
                        "notifications/message",
                        &json!({"level": "info", "data": "late"}),
                    )
                    .await;
                if let Some(tx) = told_tx.lock().unwrap().take() {
                    let _ = tx.send((progress, log));
                }
            });
            Ok::<_, BoxError>(json!({"resultType": "complete"}))
        }
    });
    (svc, told)
}

#[tokio::test]
async fn a_task_the_handler_spawned_sends_nothing_after_the_answer_over_stdio() {
    let release = Arc::new(Notify::new());
    let (svc, told) = leaves_a_reporter(release.clone());
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    peer.request(
        json!(1),
        "tools/call",
        json!({"name": "x", "_meta": {"progressToken": "t"}}),
    )
    .await;
    let answered = peer.until_response(json!(1)).await;
    assert_eq!(answered.len(), 1, "{answered:?}");
    release.notify_one();
    assert_eq!(told.await.unwrap(), (false, false), "(progress, log) sent");
    // Whatever was queued reaches the peer before the ping's answer.
    let rest = peer.sync(json!("s")).await;
    assert_eq!(rest.len(), 1, "written after the answer: {rest:?}");
    peer.close().await;
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_task_the_handler_spawned_sends_nothing_after_the_answer_over_http() {
    use http_body_util::BodyExt;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let release = Arc::new(Notify::new());
    let (svc, told) = leaves_a_reporter(release.clone());
    let svc = StreamableHttpService::new(()).layer(svc);
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "x",
            "_meta": {
                "progressToken": "t",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    let req = http::Request::post("http://127.0.0.1/mcp")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "x")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&body).unwrap(),
        )))
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    let mut body = res.into_body();
    // The answer, and then the body's end, while the reporter still holds
    // the request's context.
    let mut text = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            text.extend_from_slice(&data);
        }
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("\"resultType\":\"complete\""), "{text}");
    release.notify_one();
    assert_eq!(told.await.unwrap(), (false, false), "(progress, log) sent");
}

/// A stdio client under a `ProgressResetLayer` (idle 1 s), the raw server
/// peer, and the progress values the caller's observer saw.
struct Client {
    peer: crate::support::stdio::Peer,
    svc: tower_mcp_cancel::progress::ProgressReset<StdioClient>,
    seen: Arc<Mutex<Vec<f64>>>,
}

fn client() -> Client {
    let (peer, r, w) = pipe(64 * 1024);
    let svc = ProgressResetLayer::new(Duration::from_secs(1)).layer(StdioClient::new(r, w));
    Client {
        peer,
        svc,
        seen: Arc::default(),
    }
}

impl Client {
    /// A `tools/call` with id `id` and progress token `t`, observed.
    fn call(&self, id: i64) -> McpRequest {
        let seen = self.seen.clone();
        McpRequest::new(id, "tools/call")
            .with_params(json!({"name": "x", "_meta": {"progressToken": "t"}}))
            .with_extension(ProgressObserver::new(move |p| {
                seen.lock().unwrap().push(p.progress)
            }))
    }

    async fn progress(&mut self, p: f64) {
        self.peer
            .send(json!({
                "jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": p}
            }))
            .await;
        settle().await;
    }
}

#[tokio::test(start_paused = true)]
async fn progress_that_does_not_increase_neither_reaches_the_observer_nor_restarts_the_idle_clock()
{
    let mut c = client();
    let call = tokio::spawn(c.svc.clone().oneshot(c.call(1)));
    let sent = c.peer.recv().await.unwrap();
    assert_eq!(sent["id"], 1);
    tokio::time::advance(Duration::from_millis(500)).await;
    c.progress(5.0).await;
    // 1.1 s: idle for 600 ms. A repeat and a decrease do not count ...
    tokio::time::advance(Duration::from_millis(600)).await;
    c.progress(5.0).await;
    c.progress(3.0).await;
    // ... so at 1.5 s, 1 s after the last increase, the call is idle.
    tokio::time::advance(Duration::from_millis(400)).await;
    let err = call.await.unwrap().unwrap_err();
    let elapsed = err.downcast_ref::<Elapsed>().expect("Elapsed");
    assert_eq!(elapsed.limit(), Limit::Idle);
    assert_eq!(*c.seen.lock().unwrap(), vec![5.0]);
}

#[tokio::test(start_paused = true)]
async fn progress_for_a_call_that_ended_does_not_reach_the_observer() {
    let mut c = client();
    let call = tokio::spawn(c.svc.clone().oneshot(c.call(1)));
    c.peer.recv().await.unwrap();
    c.progress(1.0).await;
    c.peer
        .send(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        .await;
    call.await.unwrap().unwrap();
    // After the answer, for the same token.
    c.progress(2.0).await;
    // The client reads one line after another: by this call's answer, the
    // late progress has been read.
    let next = tokio::spawn(c.svc.clone().oneshot(McpRequest::new(2, "ping")));
    assert_eq!(c.peer.recv().await.unwrap()["id"], 2);
    c.peer
        .send(json!({"jsonrpc": "2.0", "id": 2, "result": {}}))
        .await;
    next.await.unwrap().unwrap();
    assert_eq!(*c.seen.lock().unwrap(), vec![1.0]);
}

/// Without a `ProgressResetLayer`, the client's own tap for the caller's
/// observer holds to the same rules.
#[tokio::test]
async fn an_observer_without_a_progress_layer_sees_only_increasing_progress_of_a_call_in_flight() {
    let mut c = client();
    let svc = StdioClient::clone(c.svc.get_ref());
    let call = tokio::spawn(svc.clone().oneshot(c.call(1)));
    c.peer.recv().await.unwrap();
    for p in [5.0, 5.0, 3.0, 6.0] {
        c.progress(p).await;
    }
    c.peer
        .send(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        .await;
    call.await.unwrap().unwrap();
    c.progress(7.0).await;
    // By the next call's answer, the late progress has been read.
    let next = tokio::spawn(svc.oneshot(McpRequest::new(2, "ping")));
    assert_eq!(c.peer.recv().await.unwrap()["id"], 2);
    c.peer
        .send(json!({"jsonrpc": "2.0", "id": 2, "result": {}}))
        .await;
    next.await.unwrap().unwrap();
    assert_eq!(*c.seen.lock().unwrap(), vec![5.0, 6.0]);
}
