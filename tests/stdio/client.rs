//! `StdioClient` over an in-memory pipe, against a raw JSON-lines peer that
//! plays the server: what the client writes, exactly, when a limit fires or
//! a caller gives up, and what it does with what the server sends.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::*;
use tower::BoxError;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{
    CancelReason, Cancellation, Cancelled, Elapsed, Limit, McpRequest, ProgressObserver,
    ProgressResetLayer, TimeoutLayer,
};

fn client() -> (Peer, StdioClient) {
    let (peer, r, w) = pipe(64 * 1024);
    (peer, StdioClient::new(r, w))
}

fn respond(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"ok": true}})
}

/// The request is answered, and the line after the cancellation is the next
/// request: exactly one `notifications/cancelled` was written.
async fn assert_one_cancel(peer: &mut Peer, client: &StdioClient, id: Value, reason_has: &str) {
    let v = peer.recv().await.unwrap();
    assert_eq!(v["method"], "notifications/cancelled", "{v}");
    assert_eq!(v["params"]["requestId"], id);
    let reason = v["params"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(reason_has),
        "reason {reason:?} should say {reason_has:?}"
    );
    // A late response is ignored quietly.
    peer.send(respond(&id)).await;
    let next = tokio::spawn(client.clone().oneshot(McpRequest::new("next", "ping")));
    let v = peer.recv().await.unwrap();
    assert_eq!(
        v["id"], "next",
        "no second cancellation before the next request: {v}"
    );
    peer.send(respond(&json!("next"))).await;
    assert_eq!(next.await.unwrap().unwrap(), json!({"ok": true}));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_sends_exactly_one_cancel_with_its_reason() {
    let (mut peer, client) = client();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(client.clone());
    // The reason travels in the request's cancellation, which the layer
    // cancels before it drops the call.
    let req = McpRequest::new(42, "tools/call").with_cancellation(Cancellation::new());
    let call = tokio::spawn(svc.oneshot(req));
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["id"].clone(), v["method"].clone()),
        (json!(42), json!("tools/call"))
    );
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Limit::Timeout
    );
    assert_one_cancel(&mut peer, &client, json!(42), "timed out").await;
    assert_eq!(client.in_flight(), 0);
}

/// Aborts its task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A layer between the timeout and the client that drives the call in a
/// task of its own: the call's future is dropped there, when the runtime
/// gets to the aborted task, after the timeout's drop has returned. The
/// reason still reaches the peer: it is in the request, not in the drop.
#[tokio::test(start_paused = true)]
async fn a_timeout_reason_reaches_the_peer_across_a_spawn() {
    let (mut peer, client) = client();
    let inner = client.clone();
    let spawning = tower::service_fn(move |req: McpRequest| {
        let task = AbortOnDrop(tokio::spawn(inner.clone().oneshot(req)));
        async move {
            let mut task = task;
            (&mut task.0).await.map_err(BoxError::from)?
        }
    });
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(spawning);
    let req = McpRequest::new(7, "tools/call").with_cancellation(Cancellation::new());
    let call = tokio::spawn(svc.oneshot(req));
    assert_eq!(peer.recv().await.unwrap()["id"], 7);
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Limit::Timeout
    );
    assert_one_cancel(&mut peer, &client, json!(7), "timed out").await;
    assert_eq!(client.in_flight(), 0);
}

/// A caller who drops a call for a reason of their own cancels the
/// request's cancellation with it first.
#[tokio::test(start_paused = true)]
async fn a_caller_drops_a_call_with_its_own_reason() {
    let (mut peer, client) = client();
    let cancellation = Cancellation::new();
    let req = McpRequest::new(8, "tools/call").with_cancellation(cancellation.clone());
    let call = tokio::spawn(client.clone().oneshot(req));
    assert_eq!(peer.recv().await.unwrap()["id"], 8);
    cancellation.cancel(CancelReason::Other("user pressed stop".into()));
    call.abort();
    let _ = call.await;
    assert_one_cancel(&mut peer, &client, json!(8), "user pressed stop").await;
}

#[tokio::test(start_paused = true)]
async fn the_hard_maximum_sends_exactly_one_cancel_although_progress_keeps_coming() {
    let (mut peer, client) = client();
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(3)))
        .service(client.clone());
    let mut call = tokio::spawn(svc.oneshot(McpRequest::new("m", "tools/call")));
    let v = peer.recv().await.unwrap();
    // The layer assigned a progress token; the client put it on the wire.
    let token = v["params"]["_meta"]["progressToken"].clone();
    assert!(token.is_string() || token.is_number(), "{v}");
    let mut step = 0;
    let err = loop {
        tokio::select! {
            r = &mut call => break r.unwrap().unwrap_err(),
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                step += 1;
                peer.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": step}})).await;
            }
        }
    };
    assert_eq!(err.downcast_ref::<Elapsed>().unwrap().limit(), Limit::Max);
    assert!(
        step >= 5,
        "progress kept coming past the idle limit ({step} reports)"
    );
    assert_one_cancel(&mut peer, &client, json!("m"), "maximum").await;
}

#[tokio::test(start_paused = true)]
async fn progress_resets_the_idle_limit_and_reaches_the_observer() {
    let (mut peer, client) = client();
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(60)))
        .service(client.clone());
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let req = McpRequest::new(1, "tools/call").with_extension(ProgressObserver::new(move |p| {
        let _ = seen_tx.send(p.progress);
    }));
    let call = tokio::spawn(svc.oneshot(req));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();
    for step in 1..=5 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        peer.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step}}))
            .await;
        assert_eq!(seen.recv().await, Some(step as f64));
    }
    // 4 s in, past the 1 s idle limit four times over: still alive.
    peer.send(respond(&json!(1))).await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"ok": true}));
    // Progress after completion goes nowhere.
    peer.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": token, "progress": 99}}))
        .await;
    let next = tokio::spawn(client.clone().oneshot(McpRequest::new(2, "ping")));
    assert_eq!(peer.recv().await.unwrap()["id"], 2);
    peer.send(respond(&json!(2))).await;
    next.await.unwrap().unwrap();
    assert!(seen.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_drops_its_future_cancels_with_caller_dropped() {
    let (mut peer, client) = client();
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(0, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 0);
    call.abort();
    let _ = call.await;
    assert_one_cancel(&mut peer, &client, json!(0), "caller dropped").await;
}

#[tokio::test(start_paused = true)]
async fn errors_ids_and_server_cancels() {
    let (mut peer, mut client) = client();
    // Assigned ids are unique among in-flight requests.
    let a = tokio::spawn(client.clone().oneshot(McpRequest::without_id("a")));
    let b = tokio::spawn(
        client
            .clone()
            .oneshot(McpRequest::without_id("subscriptions/listen")),
    );
    let (va, vb) = (peer.recv().await.unwrap(), peer.recv().await.unwrap());
    assert_ne!(va["id"], vb["id"]);
    // An explicit id already in flight is refused.
    let dup = McpRequest::new(va["id"].as_i64().unwrap(), "c");
    let err = client.ready().await.unwrap().call(dup).await.unwrap_err();
    assert_eq!(err.downcast_ref::<ErrorObject>().unwrap().code, -32600);
    // An error response is an Err holding the error object.
    peer.send(
        json!({"jsonrpc": "2.0", "id": va["id"], "error": {"code": -32601, "message": "no a"}}),
    )
    .await;
    let err = a.await.unwrap().unwrap_err();
    assert_eq!(err.downcast_ref::<ErrorObject>().unwrap().code, -32601);
    // A server's notifications/cancelled (listen teardown) ends the call.
    peer.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": vb["id"], "reason": "server closing"}}),
    )
    .await;
    let err = b.await.unwrap().unwrap_err();
    assert!(err.is::<Cancelled>(), "{err}");
    // Garbage from the server is skipped.
    peer.send_raw(b"not json").await;
    let c = tokio::spawn(client.clone().oneshot(McpRequest::new("c", "ping")));
    assert_eq!(peer.recv().await.unwrap()["id"], "c");
    peer.send(respond(&json!("c"))).await;
    c.await.unwrap().unwrap();
    // The server's output ends: in-flight calls fail, later ones too.
    let d = tokio::spawn(client.clone().oneshot(McpRequest::new("d", "ping")));
    assert_eq!(peer.recv().await.unwrap()["id"], "d");
    drop(peer);
    assert!(d.await.unwrap().is_err());
    assert!(client.is_closed());
    assert!(client
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "x"))
        .await
        .is_err());
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_before_it_was_written_is_not_sent_nor_cancelled() {
    let (mut peer, client) = client();
    // Never polled: registered, then dropped.
    let fut = client.clone().call(McpRequest::new(1, "never"));
    drop(fut);
    let next = tokio::spawn(client.clone().oneshot(McpRequest::new(2, "ping")));
    assert_eq!(
        peer.recv().await.unwrap()["id"],
        2,
        "request 1 and no cancel for it"
    );
    peer.send(respond(&json!(2))).await;
    next.await.unwrap().unwrap();
    client.shutdown().await.unwrap();
    assert!(peer.close().await.is_empty());
}

/// A caller's `ProgressObserver` needs no `ProgressResetLayer`: the client
/// gives the request a progress token itself and shows its progress.
#[tokio::test(start_paused = true)]
async fn a_progress_observer_gets_a_token_without_a_progress_reset_layer() {
    let (mut peer, client) = client();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(60)))
        .service(client.clone());
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let req = McpRequest::new(1, "tools/call")
        .with_params(json!({"name": "slow", "arguments": {}}))
        .with_extension(ProgressObserver::new(move |p| {
            let _ = seen_tx.send(p.progress);
        }));
    let call = tokio::spawn(svc.oneshot(req));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();
    assert!(
        token.is_string() || token.is_number(),
        "the request carries a progress token: {v}"
    );
    assert_eq!(v["params"]["name"], "slow", "params kept: {v}");
    for step in 1..=3 {
        peer.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step}}))
            .await;
        assert_eq!(seen.recv().await, Some(step as f64));
    }
    peer.send(respond(&json!(1))).await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"ok": true}));
}

/// The spec allows a server's `notifications/cancelled` only for a
/// `subscriptions/listen`: one naming any other request is ignored (with a
/// warning) and that call goes on to its response.
#[tokio::test(start_paused = true)]
async fn a_server_cancellation_ends_only_a_subscriptions_listen() {
    let (mut peer, client) = client();
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    let listen = tokio::spawn(
        client
            .clone()
            .oneshot(McpRequest::new(2, "subscriptions/listen")),
    );
    assert_eq!(peer.recv().await.unwrap()["id"], 2);
    for id in [1, 2] {
        peer.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "server closing"}}),
        )
        .await;
    }
    // The listen ends as Cancelled ...
    let err = listen.await.unwrap().unwrap_err();
    assert!(err.is::<Cancelled>(), "{err}");
    // ... the tools/call is still waiting for its answer, and gets it.
    peer.send(respond(&json!(1))).await;
    assert_eq!(call.await.unwrap().unwrap(), json!({"ok": true}));
}

/// After a request was cancelled, its id stays reserved until its late
/// response arrives: a caller reusing the id at once is refused rather
/// than handed the old request's answer.
#[tokio::test(start_paused = true)]
async fn a_late_response_never_resolves_a_later_request_with_the_same_id() {
    let (mut peer, client) = client();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(client.clone());
    let err = {
        let call = tokio::spawn(svc.oneshot(McpRequest::new(7, "tools/call")));
        assert_eq!(peer.recv().await.unwrap()["id"], 7);
        call.await.unwrap().unwrap_err()
    };
    assert!(err.is::<Elapsed>(), "{err}");
    let v = peer.recv().await.unwrap();
    assert_eq!(v["method"], "notifications/cancelled", "{v}");
    // The caller reuses id 7 before the old request's answer came (`call`
    // registers the request before it returns).
    let mut c = client.clone();
    let again = tokio::spawn(c.ready().await.unwrap().call(McpRequest::new(7, "ping")));
    // The old request's late answer arrives; a round trip after it makes
    // sure the client has read it.
    peer.send(json!({"jsonrpc": "2.0", "id": 7, "result": {"old": true}}))
        .await;
    let sync = tokio::spawn(client.clone().oneshot(McpRequest::new("sync", "ping")));
    let v = loop {
        let v = peer.recv().await.unwrap();
        if v["id"] == "sync" {
            break v;
        }
        assert_eq!(v["id"], 7, "{v}");
    };
    peer.send(respond(&v["id"])).await;
    sync.await.unwrap().unwrap();
    let out = again.await.unwrap();
    assert_ne!(
        out.as_ref().ok(),
        Some(&json!({"old": true})),
        "the late response of the cancelled request resolved the new one"
    );
    let err = out.unwrap_err();
    assert_eq!(
        err.downcast_ref::<ErrorObject>().map(|e| e.code),
        Some(ErrorObject::INVALID_REQUEST),
        "{err}"
    );
    // The late answer arrived: id 7 is free again.
    let fresh = tokio::spawn(client.clone().oneshot(McpRequest::new(7, "ping")));
    assert_eq!(peer.recv().await.unwrap()["id"], 7);
    peer.send(respond(&json!(7))).await;
    assert_eq!(fresh.await.unwrap().unwrap(), json!({"ok": true}));
}

/// Has the client write request `id`, then drops the call: the client
/// cancels it.
async fn cancel_after_written(peer: &mut Peer, client: &StdioClient, id: &str) {
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(id, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], id);
    call.abort();
    let _ = call.await;
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["method"].as_str(), v["params"]["requestId"].as_str()),
        (Some("notifications/cancelled"), Some(id)),
        "{v}"
    );
}

/// Whether a call with `id` is refused at once as reserved; if not, it was
/// sent, and is answered.
async fn reserved(peer: &mut Peer, client: &StdioClient, id: &str) -> bool {
    let mut c = client.clone();
    let mut call = Box::pin(c.ready().await.unwrap().call(McpRequest::new(id, "ping")));
    // A refused call is ready at its first poll; a sent one waits.
    let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
    if let Poll::Ready(out) = first {
        let err = out.unwrap_err();
        assert_eq!(
            err.downcast_ref::<ErrorObject>().map(|e| e.code),
            Some(ErrorObject::INVALID_REQUEST),
            "{err}"
        );
        assert!(err.to_string().contains("reserved"), "{err}");
        return true;
    }
    assert_eq!(peer.recv().await.unwrap()["id"], id);
    peer.send(respond(&json!(id))).await;
    assert_eq!(call.await.unwrap(), json!({"ok": true}));
    false
}

/// The reservation of a cancelled request's id is bounded in time (paused
/// clock) and in count (the oldest ends first), and ids the client assigns
/// skip reserved ones.
#[tokio::test(start_paused = true)]
async fn a_cancelled_id_is_reserved_for_a_bounded_time_and_count() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::builder()
        .reserve_cancelled_ids(Duration::from_secs(10), 2)
        .connect(r, w);

    // Assigned ids skip a reserved one: the caller took 1 and cancelled it.
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    call.abort();
    let _ = call.await;
    assert_eq!(
        peer.recv().await.unwrap()["method"],
        "notifications/cancelled"
    );
    let next = tokio::spawn(client.clone().oneshot(McpRequest::without_id("ping")));
    let v = peer.recv().await.unwrap();
    assert_eq!(v["id"], 2, "id 1 is reserved: {v}");
    peer.send(respond(&v["id"])).await;
    next.await.unwrap().unwrap();

    // Count: with room for two, reserving a third ends the oldest.
    tokio::time::advance(Duration::from_secs(10)).await; // id 1 expires
    for id in ["a", "b", "c"] {
        cancel_after_written(&mut peer, &client, id).await;
    }
    assert!(!reserved(&mut peer, &client, "a").await, "the oldest ended");
    assert!(reserved(&mut peer, &client, "b").await);
    assert!(reserved(&mut peer, &client, "c").await);

    // Time: still reserved just before the bound, free at it.
    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert!(reserved(&mut peer, &client, "c").await);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(!reserved(&mut peer, &client, "b").await);
    assert!(!reserved(&mut peer, &client, "c").await);
}

/// A progress token is unique among the calls in flight whether or not
/// anyone listens to its progress: a second call with a token already on
/// the wire is refused with `-32600`, even without a `ProgressObserver` or
/// `ProgressResetLayer` on either call.
#[tokio::test(start_paused = true)]
async fn a_progress_token_in_flight_is_refused_even_unobserved() {
    let (mut peer, mut client) = client();
    let with_token = |id: i64| {
        McpRequest::new(id, "tools/call")
            .with_params(json!({"name": "slow", "arguments": {}, "_meta": {"progressToken": "p"}}))
    };
    let first = tokio::spawn(client.clone().oneshot(with_token(1)));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        client.ready().await.unwrap().call(with_token(2)),
    )
    .await
    .expect("refused at once, not sent");
    let err = second.unwrap_err();
    assert_eq!(
        err.downcast_ref::<ErrorObject>().map(|e| e.code),
        Some(ErrorObject::INVALID_REQUEST),
        "{err}"
    );
    peer.send(respond(&json!(1))).await;
    first.await.unwrap().unwrap();
}
