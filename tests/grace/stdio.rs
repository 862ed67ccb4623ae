//! Grace over stdio: each cancel cause (the peer's `notifications/cancelled`,
//! a `TimeoutLayer` / `ProgressResetLayer` expiry, the end of input, the
//! shutdown) × finished within the grace / dropped after it / no grace;
//! nothing written during a grace; the in-flight bound, a reused id and
//! `serve`'s return with work in grace.
#![cfg(feature = "stdio")]

use std::io;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneService;
use tower::ServiceBuilder;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Events, Recorder};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{MethodPolicy, ProgressResetLayer, TimeoutLayer};

use crate::handler::{cleanup_params, handler, Svc};
use crate::support::stdio::{mentions, pipe, Peer};

struct H {
    peer: Peer,
    ev: Events,
    served: JoinHandle<io::Result<()>>,
}

fn start(server: StdioServer, wrap: impl FnOnce(Svc) -> Svc) -> H {
    let (rec, ev) = Recorder::new();
    let (peer, r, w) = pipe(64 * 1024);
    let svc = wrap(handler(rec));
    let served = tokio::spawn(server.serve(svc, r, w));
    H { peer, ev, served }
}

fn graced(ms: u64) -> StdioServer {
    StdioServer::new().grace(MethodPolicy::new(Duration::from_millis(ms)))
}

fn id(n: i64) -> RequestId {
    RequestId::from(n)
}

/// A `tools/call` of `cleanup` with a progress token (so that progress
/// would reach the wire if anything let it).
async fn call_cleanup(peer: &mut Peer, n: i64, ms: u64) {
    let mut params = cleanup_params(ms);
    params["_meta"] = json!({ "progressToken": format!("p{n}") });
    peer.request(json!(n), "tools/call", params).await;
}

/// Nothing of request `n` was written: a ping round trip shows every
/// line queued before it.
async fn nothing_written_for(peer: &mut Peer, n: i64) {
    let lines = peer.sync(json!("sync")).await;
    let tok = json!(format!("p{n}"));
    let leaked: Vec<&Value> = lines
        .iter()
        .filter(|v| mentions(v, &json!(n)) || v["params"]["progressToken"] == tok)
        .collect();
    assert!(leaked.is_empty(), "written for {n}: {leaked:?}");
    assert_eq!(lines.len(), 1, "only the ping's answer: {lines:?}");
}

/// Cancels request 1 (cleanup of `cleanup_ms`) and returns when its
/// handler ended, and how long after the cancel.
async fn peer_cancel(server: StdioServer, cleanup_ms: u64) -> (Event, Duration, H) {
    let mut h = start(server, |s| s);
    call_cleanup(&mut h.peer, 1, cleanup_ms).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let t0 = Instant::now();
    h.peer.cancel(json!(1), "stop").await;
    let end = h.ev.next().await;
    (end, t0.elapsed(), h)
}

#[tokio::test(start_paused = true)]
async fn peer_cancel_cleanup_finishes_within_the_grace() {
    let (end, after, mut h) = peer_cancel(graced(500), 100).await;
    assert_eq!(end, Event::Done(id(1)));
    assert_eq!(after, Duration::from_millis(100));
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn peer_cancel_cleanup_is_dropped_after_the_grace() {
    let (end, after, mut h) = peer_cancel(graced(500), 10_000).await;
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(after, Duration::from_millis(500));
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn peer_cancel_without_a_grace_drops_at_once() {
    let (end, after, mut h) = peer_cancel(StdioServer::new(), 100).await;
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(after, Duration::ZERO);
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_requests_own_grace_overrides_the_policy() {
    let mut h = start(StdioServer::new(), |s| s);
    let params = json!({ "name": "cleanup", "arguments": { "ms": 100, "graceMs": 300 } });
    h.peer.request(json!(1), "tools/call", params).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let t0 = Instant::now();
    h.peer.cancel(json!(1), "stop").await;
    assert_eq!(h.ev.next().await, Event::Done(id(1)));
    assert_eq!(t0.elapsed(), Duration::from_millis(100));
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn subscriptions_listen_gets_no_grace() {
    let mut h = start(graced(500), |s| s);
    h.peer
        .request(json!(1), "subscriptions/listen", json!({"ms": 100}))
        .await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let t0 = Instant::now();
    h.peer.cancel(json!(1), "stop").await;
    assert_eq!(h.ev.next().await, Event::Dropped(id(1)));
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

/// A server-side limit: its error answer at the deadline, whatever the
/// grace; then the handler's end.
async fn expiry(
    server: StdioServer,
    cleanup_ms: u64,
    progress: bool,
) -> (Duration, Event, Duration) {
    let mut h = start(server, |s| {
        if progress {
            BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(ProgressResetLayer::new(Duration::from_secs(1)))
                    .service(s),
            )
        } else {
            BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(TimeoutLayer::new(Duration::from_secs(1)))
                    .service(s),
            )
        }
    });
    let t0 = Instant::now();
    call_cleanup(&mut h.peer, 1, cleanup_ms).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let answer = h.peer.recv().await.expect("the timeout's answer");
    let answered = t0.elapsed();
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert!(
        answer["error"]["code"].is_i64(),
        "an error answer: {answer}"
    );
    let end = h.ev.next().await;
    let ended = t0.elapsed();
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
    (answered, end, ended)
}

#[tokio::test(start_paused = true)]
async fn timeout_answers_at_the_deadline_and_the_cleanup_finishes_in_the_grace() {
    let (answered, end, ended) = expiry(graced(500), 100, false).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Done(id(1)));
    assert_eq!(ended, Duration::from_millis(1100));
}

#[tokio::test(start_paused = true)]
async fn timeout_answers_at_the_deadline_and_the_handler_is_dropped_after_the_grace() {
    let (answered, end, ended) = expiry(graced(500), 10_000, false).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(ended, Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn timeout_without_a_grace_drops_at_the_deadline() {
    let (answered, end, ended) = expiry(StdioServer::new(), 100, false).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(ended, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn progress_reset_expiry_answers_at_once_and_the_cleanup_finishes_in_the_grace() {
    let (answered, end, ended) = expiry(graced(500), 100, true).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Done(id(1)));
    assert_eq!(ended, Duration::from_millis(1100));
}

#[tokio::test(start_paused = true)]
async fn progress_reset_expiry_drops_after_the_grace() {
    let (answered, end, ended) = expiry(graced(500), 10_000, true).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(ended, Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn progress_reset_expiry_without_a_grace_drops_at_once() {
    let (answered, end, ended) = expiry(StdioServer::new(), 100, true).await;
    assert_eq!(answered, Duration::from_secs(1));
    assert_eq!(end, Event::Dropped(id(1)));
    assert_eq!(ended, Duration::from_secs(1));
}

/// The end of input (or the shutdown): `serve` returns only once the
/// handler in its grace ended.
async fn connection_end(
    server: StdioServer,
    cleanup_ms: u64,
    shutdown: Option<CancellationToken>,
) -> (Vec<Event>, Duration) {
    let server = match &shutdown {
        Some(t) => server.shutdown(t.clone()),
        None => server,
    };
    let mut h = start(server, |s| s);
    call_cleanup(&mut h.peer, 1, cleanup_ms).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let t0 = Instant::now();
    let rest = match shutdown {
        Some(t) => {
            t.cancel();
            let mut rest = Vec::new();
            while let Some(v) = h.peer.recv().await {
                rest.push(v);
            }
            rest
        }
        None => h.peer.close().await,
    };
    assert!(rest.is_empty(), "nothing written: {rest:?}");
    h.served.await.unwrap().unwrap();
    (h.ev.drain(), t0.elapsed())
}

#[tokio::test(start_paused = true)]
async fn end_of_input_waits_for_the_cleanup_in_its_grace() {
    let (events, returned) = connection_end(graced(500), 100, None).await;
    assert_eq!(events, vec![Event::Done(id(1))]);
    assert_eq!(returned, Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn end_of_input_drops_after_the_grace() {
    let (events, returned) = connection_end(graced(500), 10_000, None).await;
    assert_eq!(events, vec![Event::Dropped(id(1))]);
    assert_eq!(returned, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn end_of_input_without_a_grace_drops_at_once() {
    let (events, returned) = connection_end(StdioServer::new(), 100, None).await;
    assert_eq!(events, vec![Event::Dropped(id(1))]);
    assert_eq!(returned, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_cleanup_in_its_grace() {
    let token = CancellationToken::new();
    let (events, returned) = connection_end(graced(500), 100, Some(token)).await;
    assert_eq!(events, vec![Event::Done(id(1))]);
    assert_eq!(returned, Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn shutdown_drops_after_the_grace() {
    let token = CancellationToken::new();
    let (events, returned) = connection_end(graced(500), 10_000, Some(token)).await;
    assert_eq!(events, vec![Event::Dropped(id(1))]);
    assert_eq!(returned, Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn shutdown_without_a_grace_drops_at_once() {
    let token = CancellationToken::new();
    let (events, returned) = connection_end(StdioServer::new(), 100, Some(token)).await;
    assert_eq!(events, vec![Event::Dropped(id(1))]);
    assert_eq!(returned, Duration::ZERO);
}

/// After the drain grace, the shutdown's cancel gets the request's grace
/// too: `serve` returns after both.
#[tokio::test(start_paused = true)]
async fn shutdown_after_the_drain_grace_then_the_cleanup_grace() {
    let token = CancellationToken::new();
    let server = graced(500).drain_grace(Duration::from_secs(2));
    let (events, returned) = connection_end(server, 10_000, Some(token)).await;
    assert_eq!(events, vec![Event::Dropped(id(1))]);
    assert_eq!(returned, Duration::from_millis(2500));
}

#[tokio::test(start_paused = true)]
async fn work_in_its_grace_counts_toward_the_in_flight_bound() {
    let mut h = start(graced(500).max_in_flight(1), |s| s);
    call_cleanup(&mut h.peer, 1, 10_000).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    h.peer.cancel(json!(1), "stop").await;
    // In its grace: the bound is reached.
    h.peer.request(json!(2), "ping", json!({})).await;
    let refused = h.peer.recv().await.unwrap();
    assert_eq!(refused["id"], json!(2));
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many"),
        "{refused}"
    );
    assert!(h.ev.try_next().is_none(), "still in its grace");
    assert_eq!(h.ev.next().await, Event::Dropped(id(1)));
    h.peer.request(json!(3), "ping", json!({})).await;
    let answered = h.peer.recv().await.unwrap();
    assert_eq!(answered, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reused_id_is_accepted_while_its_predecessor_is_in_its_grace() {
    let mut h = start(graced(500), |s| s);
    call_cleanup(&mut h.peer, 1, 10_000).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    h.peer.cancel(json!(1), "stop").await;
    // The cancel is processed (a round trip through the reader).
    nothing_written_for(&mut h.peer, 1).await;
    h.peer.request(json!(1), "ping", json!({})).await;
    let answered = h.peer.recv().await.unwrap();
    assert_eq!(answered, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert!(h.ev.try_next().is_none(), "the first is still in its grace");
    assert_eq!(h.ev.next().await, Event::Dropped(id(1)));
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

/// A `ProgressObserver` sees nothing of what a handler reports in its
/// grace (nor does the wire).
#[tokio::test(start_paused = true)]
async fn an_observer_sees_no_progress_made_in_the_grace() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tower_mcp_cancel::{McpRequest, ProgressObserver};

    let seen = Arc::new(AtomicUsize::new(0));
    let observed = seen.clone();
    let mut h = start(graced(500), move |s| {
        BoxCloneService::new(
            ServiceBuilder::new()
                .map_request(move |mut req: McpRequest| {
                    let observed = observed.clone();
                    req.extensions_mut().insert(ProgressObserver::new(move |_| {
                        observed.fetch_add(1, Ordering::SeqCst);
                    }));
                    req
                })
                .layer(ProgressResetLayer::new(Duration::from_secs(60)))
                .service(s),
        )
    });
    call_cleanup(&mut h.peer, 1, 100).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    h.peer.cancel(json!(1), "stop").await;
    assert_eq!(h.ev.next().await, Event::Done(id(1)));
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "progress of the grace observed"
    );
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

/// Cancels a `tools/call` of `tool` (`cleanup` spending 100 ms, or
/// `hang`) under `policy`: how it ended, how long after the cancel.
async fn cancelled_tool(policy: MethodPolicy<Duration>, tool: &str) -> (Event, Duration) {
    let mut h = start(StdioServer::new().grace(policy), |s| s);
    let params = json!({ "name": tool, "arguments": { "ms": 100 } });
    h.peer.request(json!(1), "tools/call", params).await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let t0 = Instant::now();
    h.peer.cancel(json!(1), "stop").await;
    let end = h.ev.next().await;
    let after = t0.elapsed();
    nothing_written_for(&mut h.peer, 1).await;
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
    (end, after)
}

#[tokio::test(start_paused = true)]
async fn a_tools_grace_comes_before_its_methods() {
    let ms = Duration::from_millis;
    // `cleanup` gets its own 500 ms where the method has none: it finishes.
    let policy = MethodPolicy::new(Duration::ZERO).tool("cleanup", ms(500));
    assert_eq!(
        cancelled_tool(policy.clone(), "cleanup").await,
        (Event::Done(id(1)), ms(100))
    );
    // Another tool gets the method's (none).
    assert_eq!(
        cancelled_tool(policy, "hang").await,
        (Event::Dropped(id(1)), Duration::ZERO)
    );
    // A shorter tool entry wins over a longer method entry.
    let policy = MethodPolicy::new(Duration::ZERO)
        .method("tools/call", ms(500))
        .tool("cleanup", ms(50));
    assert_eq!(
        cancelled_tool(policy.clone(), "cleanup").await,
        (Event::Dropped(id(1)), ms(50))
    );
    assert_eq!(
        cancelled_tool(policy, "hang").await,
        (Event::Dropped(id(1)), ms(500))
    );
}

#[tokio::test(start_paused = true)]
async fn a_tools_deadline_holds_for_a_request_read_from_stdio() {
    // The layer inside the server sees the tool of the decoded request.
    let mut h = start(StdioServer::new(), |s| {
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(
                    TimeoutLayer::new(Duration::from_secs(60)).tool("hang", Duration::from_secs(2)),
                )
                .service(s),
        )
    });
    let t0 = Instant::now();
    h.peer
        .request(json!(1), "tools/call", json!({"name": "hang"}))
        .await;
    assert_eq!(h.ev.next().await, Event::Started(id(1)));
    let answer = h.peer.recv().await.expect("the timeout's answer");
    assert_eq!(answer["id"], json!(1), "{answer}");
    assert_eq!(answer["error"]["data"]["limit"], "timeout", "{answer}");
    assert_eq!(h.ev.next().await, Event::Dropped(id(1)));
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}
