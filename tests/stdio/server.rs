//! The stdio server driver over real in-memory pipes, driven by a raw
//! JSON-lines peer: cancellation drops the handler (with and without the
//! layer, at end of input, before its request, by a server-side deadline)
//! and nothing is written for a cancelled id; `subscriptions/listen` ended
//! by the server, the client or shutdown. What it writes otherwise is
//! [`crate::server_writes`]'s. Time is paused wherever it matters; ordering
//! comes from handler events and from `ping` round trips through the one
//! ordered writer.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::{Event, Events, Recorder};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancelled, McpRequest, TimeoutLayer,
};

type Svc = BoxCloneService<McpRequest, Value, BoxError>;

fn handler(rec: Recorder, flood: Arc<AtomicUsize>) -> Svc {
    BoxCloneService::new(service_fn(move |req: McpRequest| {
        let rec = rec.clone();
        let flood = flood.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let params: Value = req.params_as().unwrap_or(Value::Null);
            match req.method() {
                "ping" => Ok(json!({})),
                "echo" => Ok(json!({ "params": params })),
                "hang" => {
                    let p = rec.start(&req);
                    tokio::time::sleep(BOUND).await; // never looks at its token
                    p.finish();
                    Ok(json!({}))
                }
                "spawn" => {
                    let p = rec.start(&req);
                    rec.watch_token(&req);
                    tokio::time::sleep(BOUND).await;
                    p.finish();
                    Ok(json!({}))
                }
                "progress" => {
                    let p = rec.start(&req);
                    for i in 1..=10 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        ctx.progress(i as f64, Some(10.0), None).await;
                    }
                    p.finish();
                    Ok(json!({ "done": true }))
                }
                "flood" => {
                    let p = rec.start(&req);
                    let pad = "x".repeat(100);
                    while ctx
                        .notify(
                            "notifications/message",
                            &json!({"level": "info", "data": pad}),
                        )
                        .await
                    {
                        if flood.fetch_add(1, Ordering::SeqCst) + 1 >= 1000 {
                            break;
                        }
                    }
                    p.finish();
                    Ok(json!({}))
                }
                "panic" => panic!("handler panicked on purpose"),
                // Ends itself as Cancelled although nobody cancelled it.
                "give_up" => Err(Box::new(Cancelled::new(CancelReason::Other(
                    "the handler gave up".into(),
                ))) as BoxError),
                "unserializable" => {
                    let sent = ctx.notify("notifications/message", &Unserializable).await;
                    Ok(json!({ "sent": sent }))
                }
                "subscriptions/listen" => match params["mode"].as_str() {
                    Some("ok") => Ok(json!({ "resultType": "complete" })),
                    Some("teardown") => Err(Box::new(Cancelled::new(CancelReason::Other(
                        "subscription closed by the server".into(),
                    ))) as BoxError),
                    _ => {
                        let p = rec.start(&req);
                        tokio::time::sleep(BOUND).await;
                        p.finish();
                        Ok(json!({}))
                    }
                },
                other => Err(Box::new(ErrorObject::new(
                    ErrorObject::METHOD_NOT_FOUND,
                    format!("no {other}"),
                )) as BoxError),
            }
        }
    }))
}

/// A value whose serialization fails.
struct Unserializable;

impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("cannot be serialized"))
    }
}

pub(crate) struct H {
    pub(crate) peer: Peer,
    pub(crate) ev: Events,
    pub(crate) served: JoinHandle<io::Result<()>>,
    pub(crate) flood: Arc<AtomicUsize>,
}

pub(crate) fn start_with(
    cfg: StdioServer,
    wrap: impl FnOnce(Svc) -> Svc,
    buf: usize,
    shutdown: Option<oneshot::Receiver<()>>,
) -> H {
    let (rec, ev) = Recorder::new();
    let flood = Arc::new(AtomicUsize::new(0));
    let svc = wrap(handler(rec, flood.clone()));
    let (peer, r, w) = pipe(buf);
    let served = tokio::spawn(async move {
        match shutdown {
            Some(rx) => {
                let token = tokio_util::sync::CancellationToken::new();
                let fire = token.clone();
                tokio::spawn(async move {
                    let _ = rx.await;
                    fire.cancel();
                });
                cfg.shutdown(token).serve(svc, r, w).await
            }
            None => cfg.serve(svc, r, w).await,
        }
    });
    H {
        peer,
        ev,
        served,
        flood,
    }
}

/// The bare handler: no CancelOnDisconnectLayer, so the driver alone must
/// turn a cancel into a drop.
pub(crate) fn start() -> H {
    start_with(StdioServer::new(), |s| s, 64 * 1024, None)
}

fn layered(s: Svc) -> Svc {
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .service(s),
    )
}

#[tokio::test(start_paused = true)]
async fn uncooperative_handler_is_dropped_on_cancel_without_any_layer() {
    let mut h = start();
    h.peer.request(json!(1), "hang", json!({})).await;
    assert_eq!(h.ev.next().await, Event::Started(RequestId::from(1)));
    h.peer.cancel(json!(1), "user pressed stop").await;
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(1)));
    let lines = h.peer.sync(json!("s")).await;
    assert_eq!(lines.len(), 1, "nothing but the ping response: {lines:?}");
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_the_layer_too_the_handler_is_dropped_and_spawned_work_stops_via_token() {
    for layer in [false, true] {
        let mut h = if layer {
            start_with(StdioServer::new(), layered, 64 * 1024, None)
        } else {
            start()
        };
        h.peer.request(json!("a"), "spawn", json!({})).await;
        assert_eq!(h.ev.next().await, Event::Started(RequestId::from("a")));
        h.peer.cancel(json!("a"), "stop").await;
        let mut got = vec![h.ev.next().await, h.ev.next().await];
        got.sort_by_key(|e| format!("{e:?}"));
        let a = RequestId::from("a");
        assert!(
            matches!(&got[..], [Event::Dropped(d), Event::Token(t, _)] if *d == a && *t == a),
            "{got:?}"
        );
        assert!(h.peer.close().await.is_empty());
        h.served.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_written_for_a_cancelled_id() {
    let mut h = start();
    h.peer
        .request(
            json!(7),
            "progress",
            json!({"_meta": {"progressToken": "tok7"}}),
        )
        .await;
    // Three progress notifications arrive while the request runs.
    for i in 1..=3 {
        let v = h.peer.recv().await.unwrap();
        assert_eq!(v["method"], "notifications/progress");
        assert_eq!(v["params"]["progressToken"], "tok7");
        assert_eq!(v["params"]["progress"], i as f64);
    }
    h.peer.cancel(json!(7), "enough").await;
    assert_eq!(h.ev.next().await, Event::Started(RequestId::from(7)));
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(7)));
    // Long past the handler's natural end (1 s) ...
    tokio::time::advance(Duration::from_secs(5)).await;
    // ... nothing for id 7 or its token was written: no progress, no response.
    let lines = h.peer.sync(json!("after")).await;
    assert_eq!(
        lines,
        vec![json!({"jsonrpc": "2.0", "id": "after", "result": {}})]
    );
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn eof_cancels_everything_and_serve_returns() {
    let mut h = start();
    for id in 1..=3 {
        h.peer.request(json!(id), "hang", json!({})).await;
    }
    h.peer.request(json!(4), "spawn", json!({})).await;
    let mut started = 0;
    while started < 4 {
        if let Event::Started(_) = h.ev.next().await {
            started += 1;
        }
    }
    assert!(h.peer.close().await.is_empty(), "nothing written at EOF");
    h.served.await.unwrap().unwrap();
    let evs = h.ev.drain();
    for id in [1, 2, 3, 4] {
        assert!(
            evs.contains(&Event::Dropped(RequestId::from(id))),
            "{id} dropped: {evs:?}"
        );
    }
    assert!(evs
        .iter()
        .any(|e| matches!(e, Event::Token(id, _) if *id == RequestId::from(4))));
}

#[tokio::test(start_paused = true)]
async fn cancel_before_request_does_not_poison_it() {
    let mut h = start();
    h.peer.cancel(json!(5), "too early").await;
    h.peer.request(json!(5), "hang", json!({})).await;
    assert_eq!(h.ev.next().await, Event::Started(RequestId::from(5)));
    h.peer.sync(json!("s")).await;
    assert!(h.ev.try_next().is_none(), "request 5 is still running");
    // And a cancel after completion is a no-op.
    h.peer.cancel(json!(6), "early").await;
    h.peer.request(json!(6), "echo", json!({})).await;
    assert_eq!(h.peer.recv().await.unwrap()["id"], 6);
    h.peer.cancel(json!(6), "late").await;
    h.peer.cancel(json!(6), "duplicate").await;
    h.peer.cancel(json!(5), "now").await;
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(5)));
    h.peer.cancel(json!(5), "again").await;
    assert_eq!(h.peer.sync(json!("t")).await.len(), 1);
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_server_side_deadline_is_answered_and_a_panic_is_an_internal_error() {
    let mut h = start_with(
        StdioServer::new(),
        |s| {
            BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(CancelOnDisconnectLayer::new())
                    .layer(TimeoutLayer::new(Duration::from_secs(2)))
                    .service(s),
            )
        },
        64 * 1024,
        None,
    );
    h.peer.request(json!(1), "hang", json!({})).await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(1), json!(-32603))
    );
    assert_eq!(h.ev.next().await, Event::Started(RequestId::from(1)));
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(1)));
    h.peer.request(json!(2), "panic", json!({})).await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(2), json!(-32603))
    );
    h.peer.request(json!(3), "nope", json!({})).await;
    assert_eq!(h.peer.recv().await.unwrap()["error"]["code"], -32601);
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn listen_ended_by_the_server_gets_its_graceful_result() {
    let mut h = start();
    h.peer
        .request(json!("L1"), "subscriptions/listen", json!({"mode": "ok"}))
        .await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": "L1", "result": {
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/subscriptionId": "L1"}
        }})
    );
    // Torn down without a result: notifications/cancelled referencing it.
    h.peer
        .request(
            json!(8),
            "subscriptions/listen",
            json!({"mode": "teardown"}),
        )
        .await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(v["method"], "notifications/cancelled");
    assert_eq!(v["params"]["requestId"], 8);
    assert!(v.get("id").is_none());
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn listen_cancelled_by_the_client_gets_nothing_and_no_cancel_for_other_requests() {
    let mut h = start();
    h.peer
        .request(json!("L"), "subscriptions/listen", json!({}))
        .await;
    h.peer.request(json!(1), "hang", json!({})).await;
    for _ in 0..2 {
        assert!(matches!(h.ev.next().await, Event::Started(_)));
    }
    h.peer.cancel(json!("L"), "done listening").await;
    h.peer.cancel(json!(1), "done").await;
    for _ in 0..2 {
        assert!(matches!(h.ev.next().await, Event::Dropped(_)));
    }
    let lines = h.peer.sync(json!("s")).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_listen_gracefully_and_answers_nothing_else() {
    let (stop, rx) = oneshot::channel();
    let mut h = start_with(StdioServer::new(), layered, 64 * 1024, Some(rx));
    h.peer
        .request(json!("L"), "subscriptions/listen", json!({}))
        .await;
    h.peer.request(json!(1), "hang", json!({})).await;
    for _ in 0..2 {
        assert!(matches!(h.ev.next().await, Event::Started(_)));
    }
    stop.send(()).unwrap();
    h.served.await.unwrap().unwrap();
    let mut lines = Vec::new();
    while let Some(v) = h.peer.recv().await {
        lines.push(v);
    }
    assert_eq!(
        lines,
        vec![json!({"jsonrpc": "2.0", "id": "L", "result": {
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/subscriptionId": "L"}
        }})]
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ends_as_cancelled_on_its_own_still_gets_an_answer() {
    for wrap in [|s| s, layered] {
        let mut h = start_with(StdioServer::new(), wrap, 64 * 1024, None);
        h.peer.request(json!(1), "give_up", json!({})).await;
        let lines = h.peer.sync(json!("s")).await;
        let answer = lines
            .iter()
            .find(|v| v["id"] == 1)
            .unwrap_or_else(|| panic!("no answer for request 1: {lines:?}"));
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the handler gave up"),
            "{answer}"
        );
        h.peer.close().await;
        h.served.await.unwrap().unwrap();
    }
}
