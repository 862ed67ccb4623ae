//! `HttpClient` cancelling over loopback: dropping a call closes its stream
//! (HTTP/1.1 and HTTP/2) and the server sees it, a client timeout cancels on
//! the server, progress over SSE resets a `ProgressResetLayer`'s idle timer
//! while keep-alives do not, the hard maximum still fires, and a progress
//! observer gets a token without a progress-reset layer.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::time::Duration;

use crate::client::{call, client};
use http_support::*;
use serde_json::json;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::{
    CancelReason, Elapsed, Limit, ProgressObserver, ProgressResetLayer, TimeoutLayer,
};

#[tokio::test]
async fn dropping_the_call_closes_the_stream_and_the_server_cancels() {
    for proto in [Proto::H1, Proto::H2] {
        for mid_stream in [false, true] {
            let (addr, _tools, mut events) = serve_tools(proto, |s| s).await;
            let mut c = ServiceBuilder::new()
                .layer(ProgressResetLayer::new(Duration::from_secs(30)))
                .service(client(addr, proto));
            let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
            let first_tx = std::sync::Mutex::new(Some(first_tx));
            let req = if mid_stream {
                // Progress every 10 ms: the stream is open once the first arrives.
                call("progress", json!({"steps": 100000, "ms": 10})).with_extension(
                    ProgressObserver::new(move |_| {
                        if let Some(tx) = first_tx.lock().unwrap().take() {
                            let _ = tx.send(());
                        }
                    }),
                )
            } else {
                call("hang", json!({}))
            };
            let task = tokio::spawn(c.ready().await.unwrap().call(req));
            let started = events.until(|e| matches!(e, Event::Started(_))).await;
            let Some(Event::Started(id)) = started.last().cloned() else {
                unreachable!()
            };
            if mid_stream {
                bounded(first_rx).await.unwrap();
            }
            task.abort(); // the caller gives up: the call's future is dropped
            let mut dropped = false;
            let mut token = false;
            while !(dropped && token) {
                match events.next().await {
                    Event::Dropped(i) if i == id => dropped = true,
                    Event::Token(i, r) if i == id => {
                        assert_eq!(r, Some(CancelReason::ClientDisconnected), "{proto:?}");
                        token = true
                    }
                    Event::Done(i) if i == id => panic!("{proto:?}: handler completed"),
                    _ => {}
                }
            }
        }
    }
}

#[tokio::test]
async fn client_timeout_cancels_on_the_server() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, mut events) = serve_tools(proto, |s| s).await;
        let mut c = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_millis(200)))
            .service(client(addr, proto));
        let err = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("hang", json!({"notify": true}))),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.downcast_ref::<Elapsed>().unwrap().limit(),
            Limit::Timeout
        );
        events.until(|e| matches!(e, Event::Dropped(_))).await;
        // The pooled client still works afterwards.
        let r = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("echo", json!({"text": "again"}))),
        )
        .await
        .unwrap();
        assert_eq!(r["content"][0]["text"], "again");
    }
}

#[tokio::test]
async fn progress_over_sse_resets_the_idle_timer() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let mut c = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(8)))
        .service(client(addr, Proto::H1));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    // 8 steps of 100 ms: 800 ms in all, twice the idle limit.
    let req = call("progress", json!({"steps": 8, "ms": 100})).with_extension(
        ProgressObserver::new(move |p| s2.lock().unwrap().push(p.progress)),
    );
    let r = bounded(c.ready().await.unwrap().call(req)).await.unwrap();
    assert_eq!(r["steps"], 8);
    assert_eq!(
        *seen.lock().unwrap(),
        (1..=8).map(f64::from).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn keep_alives_do_not_reset_the_idle_timer() {
    let (addr, _tools, mut events) =
        serve_tools(Proto::H1, |s| s.keep_alive(Some(Duration::from_millis(25)))).await;
    let mut c = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(300)).max(Duration::from_secs(8)))
        .service(client(addr, Proto::H1));
    // One notification opens the stream, then 5 s of keep-alives only.
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("quiet_then", json!({"ms": 5000}))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.downcast_ref::<Elapsed>().unwrap().limit(), Limit::Idle);
    events.until(|e| matches!(e, Event::Dropped(_))).await;
}

#[tokio::test]
async fn the_hard_maximum_fires_despite_progress() {
    let (addr, _tools, mut events) = serve_tools(Proto::H2, |s| s).await;
    let mut c = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(300)).max(Duration::from_millis(600)))
        .service(client(addr, Proto::H2));
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("progress", json!({"steps": 100, "ms": 50}))),
    )
    .await
    .unwrap_err();
    assert_eq!(err.downcast_ref::<Elapsed>().unwrap().limit(), Limit::Max);
    let seen = events.until(|e| matches!(e, Event::Dropped(_))).await;
    assert!(seen
        .iter()
        .any(|e| matches!(e, Event::Dropped(i) if *i == RequestId::from(1))));
}

/// Over HTTP/2, concurrent first calls share one connection attempt driven
/// by one of them. Cancelling that one (dropping it while the connection is
/// being made) must not fail the others: they were never sent, and the
/// client sends them again.
#[tokio::test]
async fn cancelling_the_call_that_drives_the_h2_connect_fails_no_other() {
    let (addr, _tools, _events) = serve_tools(Proto::H2, |s| s).await;
    for round in 0..20 {
        let c = client(addr, Proto::H2);
        let mut first = Box::pin(c.clone().oneshot(call("echo", json!({"text": "a"}))));
        let others: Vec<_> = (0..4)
            .map(|i| {
                c.clone()
                    .oneshot(call("echo", json!({"text": format!("b{i}")})))
            })
            .collect();
        // Start the first call (it begins connecting), then drop it.
        assert!(poll_once(first.as_mut()).await.is_pending());
        let others = futures_util::future::join_all(others);
        let mut others = Box::pin(others);
        assert!(poll_once(others.as_mut()).await.is_pending());
        drop(first);
        for (i, r) in bounded(others).await.into_iter().enumerate() {
            let v = r.unwrap_or_else(|e| panic!("round {round}, call b{i}: {e:?}"));
            assert_eq!(v["content"][0]["text"], format!("b{i}"));
        }
    }
}

async fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let mut f = Some(f);
    std::future::poll_fn(|cx| std::task::Poll::Ready(f.take().unwrap().poll(cx))).await
}

/// A caller's `ProgressObserver` needs no `ProgressResetLayer`: the client
/// gives the request a progress token itself, so the server reports
/// progress and the observer sees it.
#[tokio::test]
async fn a_progress_observer_gets_a_token_without_a_progress_reset_layer() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, _events) = serve_tools(proto, |s| s).await;
        let svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(60)))
            .service(client(addr, proto));
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let req = call("progress", json!({"steps": 3, "ms": 1})).with_extension(
            ProgressObserver::new(move |p| {
                let _ = tx.send(p.progress);
            }),
        );
        let r = bounded(svc.oneshot(req)).await.unwrap();
        assert_eq!(r["steps"], 3);
        let mut got = Vec::new();
        while let Ok(p) = seen.try_recv() {
            got.push(p);
        }
        assert_eq!(got, vec![1.0, 2.0, 3.0], "{proto:?}");
    }
}
