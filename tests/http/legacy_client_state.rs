//! `HttpClient` against a 2025-era server (the legacy server of
//! [`crate::legacy_client`]), where what the client learns or sends depends
//! on when: a session the server assigned is ended even when the call that
//! got it is dropped before the handshake completed; a budget re-sent after
//! the fallback handshake is the time left then; a `400` that carries the
//! request's own id but no modern error is still the fallback signal.
#![cfg(feature = "http")]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tower::{Service, ServiceExt};
use tower_mcp_cancel::transport::http::{HttpClient, ServerEra, SessionLimits};
use tower_mcp_cancel::DeadlineCap;

use crate::legacy_client::{call, client, legacy_server_with, raw_status, session_of, Front};
use crate::support::http::bounded;

const KEY: &str = "com.example/budgetMs";

/// The caller's timeout drops the call while the server has not yet
/// acknowledged `notifications/initialized`: the session it assigned is
/// the client's all the same, and is `DELETE`d in the background — with
/// `max_sessions(1)`, the next client gets the place at once instead of
/// after the session's idle expiry.
#[tokio::test]
async fn a_session_is_deleted_when_the_call_that_got_it_is_dropped() {
    let mut held = Held::serve(Front {
        limits: SessionLimits::new().max_sessions(1),
        ..Front::default()
    })
    .await;
    let addr = held.addr;
    let mut first = client(addr);
    let mut fut = Box::pin(
        first
            .ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    );
    tokio::select! {
        out = &mut fut => panic!("answered before the handshake completed: {out:?}"),
        _ = held.arrived.recv() => {}
    }
    // The session is on the server; the call is dropped (a timeout).
    drop(fut);
    assert_eq!(first.server_era(), ServerEra::Unknown, "no session kept");
    held.release_all();
    assert_eq!(
        bounded(held.deletes.recv()).await,
        Some(200),
        "the session was deleted"
    );

    let mut second = client(addr);
    let r = bounded(
        second
            .ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "next"}))),
    )
    .await
    .expect("the one place is free");
    assert_eq!(r["content"][0]["text"], "next");
    session_of(&second);
    assert!(held.deletes.try_recv().is_err(), "one DELETE only");
    drop(first);
}

/// A call waiting for the fallback handshake that another call runs is not
/// failed when that call is dropped mid-handshake: it runs the handshake
/// itself. (Whether it reached the handshake before or after the drop, it
/// must be answered.)
#[tokio::test]
async fn a_call_waiting_on_a_dropped_calls_handshake_is_answered() {
    let mut held = Held::serve(Front::default()).await;
    let c = client(held.addr);
    let mut first = Box::pin(c.clone().oneshot(call("echo", json!({"text": "first"}))));
    tokio::select! {
        out = &mut first => panic!("answered before the handshake completed: {out:?}"),
        _ = held.arrived.recv() => {}
    }
    let mut second = Box::pin(c.clone().oneshot(call("echo", json!({"text": "second"}))));
    let second_sent = async {
        while let Some(body) = held.bodies.recv().await {
            if body["params"]["arguments"]["text"] == "second" {
                return;
            }
        }
    };
    tokio::select! {
        out = &mut second => panic!("answered during another call's handshake: {out:?}"),
        _ = second_sent => {}
    }
    drop(first);
    held.release_all();
    let r = bounded(second).await.expect("the waiting call is answered");
    assert_eq!(r["content"][0]["text"], "second");
}

/// A 2025 server may refuse a modern request with `400` and an error that
/// carries the request's own id (`-32600`): no modern error the spec
/// names, so the client falls back to `initialize` and the call goes
/// through in the session.
#[tokio::test]
async fn a_400_with_the_requests_id_but_no_modern_error_falls_back() {
    let (bodies_tx, mut bodies) = mpsc::unbounded_channel();
    let (addr, _tools, _events) = legacy_server_with(Front {
        refuse_with_id: true,
        bodies: Some(bodies_tx),
        ..Front::default()
    })
    .await;
    let mut c = client(addr);
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "old"}))),
    )
    .await
    .expect("answered in the legacy session");
    assert_eq!(r["content"][0]["text"], "old");
    session_of(&c);
    let first = bodies.try_recv().unwrap();
    assert_eq!(first["method"], "tools/call");
    assert!(
        first["id"].is_number(),
        "the refusal carried this id: {first}"
    );
    assert_eq!(bodies.try_recv().unwrap()["method"], "initialize");
}

/// The budget under `KEY` of each `tools/call` body that has one, in order.
fn budgets(bodies: &mut mpsc::UnboundedReceiver<Value>) -> Vec<u64> {
    let mut out = Vec::new();
    while let Ok(body) = bodies.try_recv() {
        if body["method"] == "tools/call" {
            out.extend(body["params"]["_meta"][KEY].as_u64());
        }
    }
    out
}

/// A 3 s call whose fallback handshake took 1.5 s (on tokio's clock) is
/// re-sent in the session with the time left then (1.5 s at most), not
/// with the budget computed when the call started.
#[tokio::test]
async fn a_budget_resent_after_the_fallback_handshake_is_the_time_left_then() {
    let Held {
        addr,
        mut arrived,
        release,
        mut bodies,
        ..
    } = Held::serve(Front::default()).await;
    let mut c = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .budget_key(KEY)
        .expect("a valid key")
        .build();
    let req = call("echo", json!({"text": "late"}))
        .with_extension(DeadlineCap::after(Duration::from_secs(3)));
    let fut = tokio::spawn(c.ready().await.unwrap().call(req));
    bounded(arrived.recv()).await;
    // The handshake takes 1.5 s.
    tokio::time::pause();
    tokio::time::advance(Duration::from_millis(1_500)).await;
    tokio::time::resume();
    release.notify_one();
    let r = bounded(fut).await.unwrap().expect("answered");
    assert_eq!(r["content"][0]["text"], "late");
    session_of(&c);
    let sent = budgets(&mut bodies);
    let [modern, resent] = sent[..] else {
        panic!("two tools/call bodies expected: {sent:?}");
    };
    assert!((2_000..=3_000).contains(&modern), "{sent:?}");
    assert!(
        (500..=1_500).contains(&resent),
        "the time left when re-sent: {sent:?}"
    );
}

/// A legacy server whose front holds each `notifications/initialized`
/// until `release` is notified, and reports each body and the status of
/// each `DELETE`.
struct Held {
    addr: std::net::SocketAddr,
    /// One `()` for each `notifications/initialized` held.
    arrived: mpsc::UnboundedReceiver<()>,
    release: Arc<Notify>,
    bodies: mpsc::UnboundedReceiver<Value>,
    deletes: mpsc::UnboundedReceiver<u16>,
}

impl Held {
    /// Serves behind `front`, with its `hold`, `bodies` and `deletes` set.
    async fn serve(front: Front) -> Self {
        let (arrived_tx, arrived) = mpsc::unbounded_channel();
        let release = Arc::new(Notify::new());
        let (bodies_tx, bodies) = mpsc::unbounded_channel();
        let (deletes_tx, deletes) = mpsc::unbounded_channel();
        let (addr, _tools, _events) = legacy_server_with(Front {
            hold: Some(("notifications/initialized", arrived_tx, release.clone())),
            bodies: Some(bodies_tx),
            deletes: Some(deletes_tx),
            ..front
        })
        .await;
        Held {
            addr,
            arrived,
            release,
            bodies,
            deletes,
        }
    }

    /// Lets the `notifications/initialized` held, and every later one, go on.
    fn release_all(&mut self) {
        let (_, none) = mpsc::unbounded_channel();
        let mut arrived = std::mem::replace(&mut self.arrived, none);
        let release = self.release.clone();
        release.notify_one();
        tokio::spawn(async move {
            while arrived.recv().await.is_some() {
                release.notify_one();
            }
        });
    }
}

/// A legacy server whose front holds each `notifications/initialized`
/// (reported on the receiver) until the `Notify` is notified, reports each
/// body and the status of each `DELETE`; a client already in a session
/// (its first handshake let through), which the server has then ended
/// behind its back.
async fn in_an_ended_session(
    keyed: bool,
) -> (
    HttpClient,
    mpsc::UnboundedReceiver<()>,
    Arc<Notify>,
    mpsc::UnboundedReceiver<Value>,
    mpsc::UnboundedReceiver<u16>,
) {
    let Held {
        addr,
        mut arrived,
        release,
        mut bodies,
        mut deletes,
    } = Held::serve(Front::default()).await;
    let mut builder = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap());
    if keyed {
        builder = builder.budget_key(KEY).expect("a valid key");
    }
    let mut c = builder.build();
    let first = tokio::spawn(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "first"}))),
    );
    bounded(arrived.recv()).await;
    release.notify_one();
    bounded(first)
        .await
        .unwrap()
        .expect("the first call answered");
    let session = session_of(&c);
    assert_eq!(raw_status(addr, http::Method::DELETE, &session).await, 200);
    assert_eq!(bounded(deletes.recv()).await, Some(200));
    while bodies.try_recv().is_ok() {}
    (c, arrived, release, bodies, deletes)
}

/// A session the server ended (`404`) is initialized again inside the call
/// that found it ended: dropped before that handshake completed, the new
/// session is deleted too.
#[tokio::test]
async fn a_renewed_session_is_deleted_when_the_call_that_got_it_is_dropped() {
    let (mut c, mut arrived, release, _bodies, mut deletes) = in_an_ended_session(false).await;
    let mut fut = Box::pin(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "again"}))),
    );
    tokio::select! {
        out = &mut fut => panic!("answered before the handshake completed: {out:?}"),
        _ = arrived.recv() => {}
    }
    drop(fut);
    release.notify_one();
    assert_eq!(
        bounded(deletes.recv()).await,
        Some(200),
        "the renewed session was deleted"
    );
}

/// A call that found its session ended is sent again after the new
/// handshake (1.5 s on tokio's clock) with the time left then.
#[tokio::test]
async fn a_budget_resent_after_a_renewed_session_is_the_time_left_then() {
    let (mut c, mut arrived, release, mut bodies, _deletes) = in_an_ended_session(true).await;
    let req = call("echo", json!({"text": "late"}))
        .with_extension(DeadlineCap::after(Duration::from_secs(3)));
    let fut = tokio::spawn(c.ready().await.unwrap().call(req));
    bounded(arrived.recv()).await;
    tokio::time::pause();
    tokio::time::advance(Duration::from_millis(1_500)).await;
    tokio::time::resume();
    release.notify_one();
    let r = bounded(fut).await.unwrap().expect("answered");
    assert_eq!(r["content"][0]["text"], "late");
    let sent = budgets(&mut bodies);
    let [ended, resent] = sent[..] else {
        panic!("two tools/call bodies expected: {sent:?}");
    };
    assert!((2_000..=3_000).contains(&ended), "{sent:?}");
    assert!(
        (500..=1_500).contains(&resent),
        "the time left when re-sent: {sent:?}"
    );
}

/// A handshake that fails after the server assigned a session — it
/// answers a protocol version the client does not speak — ends that
/// session too: the call fails, and the session is `DELETE`d.
#[tokio::test]
async fn a_session_of_a_failed_handshake_is_deleted() {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use tower::service_fn;

    use crate::support::http::{serve, Proto};

    // A front that refuses modern requests like a 2025 server, answers
    // `initialize` with an unknown version and session `s-1`, and reports
    // each DELETE's session.
    let (deleted_tx, mut deleted) = mpsc::unbounded_channel();
    let front = service_fn(move |req: Request<Incoming>| {
        let deleted = deleted_tx.clone();
        async move {
            let modern = req.headers().contains_key("mcp-method");
            if req.method() == http::Method::DELETE {
                let session = req.headers().get("mcp-session-id").cloned();
                let _ = deleted.send(session);
            }
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let json: Value = serde_json::from_slice(&body).unwrap_or_default();
            let (status, body) = if modern {
                (
                    400,
                    json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32000, "message": "Bad Request: Server not initialized"}}),
                )
            } else if json["method"] == "initialize" {
                (
                    200,
                    json!({"jsonrpc": "2.0", "id": json["id"], "result": {
                        "protocolVersion": "1999-01-01", "capabilities": {},
                        "serverInfo": {"name": "odd", "version": "0"}}}),
                )
            } else {
                (200, json!({}))
            };
            let res = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .header("mcp-session-id", "s-1")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap();
            Ok::<_, Infallible>(res)
        }
    });
    let (recorder, _events) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = serve(front, Proto::H1, recorder).await;
    let mut c = client(addr);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .expect_err("a version the client does not speak");
    assert!(err.to_string().contains("1999-01-01"), "{err}");
    assert_eq!(
        bounded(deleted.recv()).await,
        Some(Some(http::HeaderValue::from_static("s-1"))),
        "the session of the failed handshake was deleted"
    );
}
