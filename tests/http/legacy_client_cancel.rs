//! `HttpClient` cancelling in a 2025-era session (the legacy server of
//! [`crate::legacy_client`]): a dropped call posts `notifications/cancelled`
//! in its session (the handler is dropped), also when a `TimeoutLayer` gives
//! up; progress resets a `ProgressResetLayer`; ids and progress tokens stay
//! unique in the session, and a cancelled id is in flight until its cancel is
//! posted.
#![cfg(feature = "http")]

use std::time::Duration;

use serde_json::json;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{
    CancelReason, Cancellation, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
};

use crate::legacy_client::{
    call, client, legacy_server, legacy_server_holding_cancels, session_of,
};
use crate::support::http::{bounded, Event};

#[tokio::test]
async fn a_dropped_call_posts_notifications_cancelled_in_its_session() {
    let (addr, tools, mut events) = legacy_server().await;
    let mut c = client(addr);
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    events.until(|e| matches!(e, Event::Done(_))).await;
    let fut = c.ready().await.unwrap().call(call("hang", json!({})));
    let mut fut = Box::pin(fut);
    tokio::select! {
        out = &mut fut => panic!("hang answered: {out:?}"),
        _ = events.until(|e| matches!(e, Event::Started(_))) => {}
    }
    drop(fut);
    // The stream's close alone would not cancel a legacy request: the
    // handler's drop is the posted cancel's doing.
    events.until(|e| matches!(e, Event::Dropped(_))).await;
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    assert_eq!(
        reason,
        Some(CancelReason::Peer(Some(
            "caller dropped the request".into()
        )))
    );
}

#[tokio::test]
async fn the_same_timeout_stack_cancels_on_a_legacy_server() {
    let (addr, tools, mut events) = legacy_server().await;
    let mut stack = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .service(client(addr));
    // The reason travels in the request's cancellation, which the layer
    // cancels before it drops the call.
    let req = call("hang", json!({})).with_cancellation(Cancellation::new());
    let err = bounded(stack.ready().await.unwrap().call(req))
        .await
        .unwrap_err();
    let elapsed = err
        .downcast_ref::<tower_mcp_cancel::Elapsed>()
        .expect("the timeout's error");
    assert_eq!(elapsed.limit(), Limit::Timeout);
    events.until(|e| matches!(e, Event::Dropped(_))).await;
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    match reason {
        Some(CancelReason::Peer(Some(text))) => assert!(text.contains("300ms"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn progress_resets_the_idle_limit_on_a_legacy_server() {
    let (addr, _tools, _events) = legacy_server().await;
    let mut stack = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(8)))
        .service(client(addr));
    // 8 steps of 100 ms: 800 ms in all, twice the idle limit.
    let r = bounded(
        stack
            .ready()
            .await
            .unwrap()
            .call(call("progress", json!({"steps": 8, "ms": 100}))),
    )
    .await
    .unwrap();
    assert_eq!(r["steps"], 8);
}

/// The uniqueness of ids and progress tokens among calls in flight holds in
/// a 2025 session too.
#[tokio::test]
async fn ids_and_tokens_are_unique_in_a_legacy_session() {
    let (addr, tools, mut events) = legacy_server().await;
    let c = client(addr);
    crate::client::ids_and_tokens_stay_unique(c.clone(), &tools, &mut events).await;
    session_of(&c);
}

/// In a 2025 session a cancelled call's id stays in flight until its
/// `notifications/cancelled` is posted: a call reusing the id before that
/// is refused (it would otherwise be the one the late cancel names), and
/// accepted once the cancel went through.
#[tokio::test]
async fn a_cancelled_id_is_in_flight_until_its_cancel_is_posted() {
    let (arrived_tx, mut arrived) = tokio::sync::mpsc::unbounded_channel();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let (addr, _tools, mut events) =
        legacy_server_holding_cancels(Some((arrived_tx, release.clone()))).await;
    let mut c = client(addr);
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    session_of(&c);
    events.until(|e| matches!(e, Event::Done(_))).await;
    let as_5 = |name: &str| {
        McpRequest::new(5, "tools/call")
            .with_params(json!({"name": name, "arguments": {"text": "again"}}))
    };
    let mut hang = Box::pin(c.ready().await.unwrap().call(as_5("hang")));
    tokio::select! {
        out = &mut hang => panic!("hang answered: {out:?}"),
        _ = events.until(|e| matches!(e, Event::Started(_))) => {}
    }
    drop(hang);
    bounded(arrived.recv())
        .await
        .expect("the cancel reached the server");

    let early = bounded(c.ready().await.unwrap().call(as_5("echo"))).await;
    let err = early.expect_err("id 5 is still being cancelled");
    let refusal = err.downcast_ref::<tower_mcp_cancel::jsonrpc::ErrorObject>();
    assert_eq!(
        refusal.map(|e| e.code),
        Some(tower_mcp_cancel::jsonrpc::ErrorObject::INVALID_REQUEST),
        "{err}"
    );
    // The client's refusal: the request was not sent (the session would
    // refuse it too, as "Invalid Request: …").
    assert!(
        refusal.is_some_and(|e| e.message.starts_with("a request with id 5")),
        "{err}"
    );

    release.notify_one();
    events.until(|e| matches!(e, Event::Dropped(_))).await;
    // The id is released when the cancel's answer has come back, which the
    // client sees a moment after the server dropped the handler.
    let r = bounded(async {
        loop {
            match c.ready().await.unwrap().call(as_5("echo")).await {
                Ok(r) => return r,
                Err(e)
                    if e.downcast_ref::<tower_mcp_cancel::jsonrpc::ErrorObject>()
                        .is_some() =>
                {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(r["content"][0]["text"], "again");
}
