//! The layers around plain HTTP services: `CancelOnDisconnectLayer::http()`
//! around an axum handler whose spawned work stops when the client goes
//! away, and `TimeoutLayer` choosing its deadline from the `Mcp-Method`
//! header of an `http::Request`.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::Extension;
use axum::routing::post;
use http_support::*;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Elapsed, TimeoutLayer,
};

#[tokio::test]
async fn cancel_on_disconnect_http_stops_work_spawned_by_an_axum_handler() {
    let (tx, mut rx) = mpsc::unbounded_channel::<&'static str>();
    let handler = move |Extension(cancellation): Extension<Cancellation>| {
        let tx = tx.clone();
        async move {
            let token = cancellation.token();
            let work_tx = tx.clone();
            tokio::spawn(async move {
                let _ = work_tx.send("work started");
                tokio::select! {
                    _ = token.cancelled() => { let _ = work_tx.send("work stopped"); }
                    _ = tokio::time::sleep(Duration::from_secs(30)) => { let _ = work_tx.send("work finished"); }
                }
            });
            // The handler itself takes long; the client will not wait.
            tokio::time::sleep(Duration::from_secs(30)).await;
            "done"
        }
    };
    let router = axum::Router::new().route("/work", post(handler));
    let svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::http())
        .service(router);
    // Serve with plain hyper (the layer's error type is BoxError).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed_tx, mut closed_rx) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            svc.clone().oneshot(req.map(axum::body::Body::new))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
            .await;
        let _ = closed_tx.send(());
    });

    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(bounded(rx.recv()).await, Some("work started"));
    drop(stream);
    assert_eq!(bounded(rx.recv()).await, Some("work stopped"));
    bounded(closed_rx.recv()).await;
}

#[tokio::test(start_paused = true)]
async fn timeout_policy_per_method_from_the_mcp_method_header() {
    let mut svc = ServiceBuilder::new()
        .layer(
            TimeoutLayer::new(Duration::from_secs(60))
                .method("tools/call", Duration::from_millis(100))
                .method("tools/list", Duration::from_secs(5)),
        )
        .service(service_fn(|req: http::Request<String>| async move {
            let secs: u64 = req.body().parse().unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok::<_, Infallible>(http::Response::new(String::from("ok")))
        }));
    let req = |method: &str, secs: &str| {
        http::Request::post("/mcp")
            .header("Mcp-Method", method)
            .body(secs.to_owned())
            .unwrap()
    };
    // tools/call: 100 ms.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(req("tools/call", "1"))
        .await
        .unwrap_err();
    let e = err.downcast_ref::<Elapsed>().unwrap();
    assert_eq!(e.after(), Duration::from_millis(100));
    // tools/list: 5 s, so a 1 s request passes.
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(req("tools/list", "1"))
        .await
        .unwrap();
    assert_eq!(res.body(), "ok");
    // no header: the 60 s default.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(http::Request::post("/mcp").body("120".to_owned()).unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_secs(60)
    );
}

#[tokio::test]
async fn an_outer_http_cancellation_is_the_one_the_mcp_handler_sees() {
    // CancelOnDisconnectLayer::http() outside the adapter puts its
    // Cancellation in the HTTP request; the adapter hands that same one to the
    // MCP stack, so both layers agree on one token.
    let (tools, mut events) = Tools::new();
    let adapter = tower_mcp_cancel::transport::http::StreamableHttpService::new(tools.service());
    let svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::http())
        .service(adapter);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
            .await;
    });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers = modern_headers("hang");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream
        .write_all(&raw_post(
            &tool_call(1, "hang", serde_json::json!({"notify": true})),
            &extra,
        ))
        .await
        .unwrap();
    read_until(&mut stream, "notifications/message").await;
    drop(stream);
    let seen = events.until(|e| matches!(e, Event::Token(..))).await;
    assert!(seen.contains(&Event::Token(
        tower_mcp_cancel::jsonrpc::RequestId::from(1),
        Some(CancelReason::ClientDisconnected)
    )));
}

/// A handler over `http::Request<String>` that sleeps for the number of
/// seconds in the body.
async fn sleepy(req: http::Request<String>) -> Result<http::Response<String>, Infallible> {
    let secs: u64 = req.body().parse().unwrap_or(1);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    Ok(http::Response::new(String::from("ok")))
}

#[tokio::test(start_paused = true)]
async fn an_unchecked_mcp_method_header_never_earns_a_longer_deadline() {
    let mut svc = ServiceBuilder::new()
        .layer(
            TimeoutLayer::new(Duration::from_secs(60))
                .method("tools/call", Duration::from_secs(600))
                .method("tools/list", Duration::from_secs(5)),
        )
        .service(service_fn(sleepy));
    let req = |method: &str, secs: &str| {
        http::Request::post("/mcp")
            .header("Mcp-Method", method)
            .body(secs.to_owned())
            .unwrap()
    };
    // Labelled as listen (exempt by default): still the 60 s default.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(req("subscriptions/listen", "3600"))
        .await
        .expect_err("a mislabelled request still gets its deadline");
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_secs(60)
    );
    // Labelled tools/call (600 s): nothing checked the label, so 60 s.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(req("tools/call", "300"))
        .await
        .expect_err("an unchecked label does not lengthen the deadline");
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_secs(60)
    );
    // A label may shorten it: the client only hurts itself.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(req("tools/list", "30"))
        .await
        .unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_secs(5)
    );
    // A method a layer read from the body (a `Method` in the extensions) is
    // trusted: tools/call gets its 600 s.
    let mut checked = req("tools/call", "300");
    checked
        .extensions_mut()
        .insert(tower_mcp_cancel::jsonrpc::Method::new("tools/call"));
    let res = svc.ready().await.unwrap().call(checked).await.unwrap();
    assert_eq!(res.body(), "ok");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_around_the_adapter_ignores_an_unchecked_listen_label() {
    use bytes::Bytes;
    use http_body::Frame;
    // The body never arrives: before the adapter can compare the label with
    // the body, the outer deadline must already be running.
    let (tools, mut events) = Tools::new();
    let adapter = tower_mcp_cancel::transport::http::StreamableHttpService::new(tools.service());
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(10)))
        .service(adapter);
    let body = http_body_util::StreamBody::new(futures_util::stream::pending::<
        Result<Frame<Bytes>, Infallible>,
    >());
    let mut req = http::Request::post("/mcp");
    for (k, v) in modern_headers("echo") {
        if k != "Mcp-Method" {
            req = req.header(k, v);
        }
    }
    let req = req
        .header("Mcp-Method", "subscriptions/listen")
        .body(body)
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(3600), svc.oneshot(req))
        .await
        .expect("the layer's own deadline fires, not the test's");
    let err = out.expect_err("timed out");
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_secs(10)
    );
    assert!(events.drain().is_empty(), "no handler ran");
}
