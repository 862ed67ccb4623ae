//! The layers over `http::Request`: a response body dropped mid-stream
//! fires the token, and an `Mcp-Method` label not checked against the body
//! can only tighten the limits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Elapsed, Limit, ProgressLimits, ProgressResetLayer,
    RequestView, TimeoutLayer,
};

use super::elapsed;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};

#[tokio::test(start_paused = true)]
async fn body_dropped_early_fires_the_token_completed_body_does_not() {
    let cancellations = Arc::new(Mutex::new(Vec::new()));
    let c2 = cancellations.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::http())
        .service(service_fn(move |req: http::Request<()>| {
            c2.lock().unwrap().push(req.cancellation().unwrap().clone());
            async move {
                let (tx, rx) = futures_channel_stream();
                tx.send(Ok(Frame::data(Bytes::from_static(b"event 1"))))
                    .await
                    .unwrap();
                // Keep the sender alive in the body's stream so it never ends on its own.
                tokio::spawn(async move {
                    tx.closed().await;
                });
                Ok::<_, BoxError>(http::Response::new(StreamBody::new(rx)))
            }
        }));
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(()))
        .await
        .unwrap();
    let mut body = res.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"event 1"));
    let c = cancellations.lock().unwrap()[0].clone();
    assert!(!c.is_finished(), "mid-stream: still in flight");
    drop(body);
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));

    // A body read to its end fires nothing.
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::http())
        .service(service_fn(|req: http::Request<()>| {
            let token = req.cancellation().unwrap().token();
            async move {
                let _ = token;
                Ok::<_, BoxError>(http::Response::new(Full::new(Bytes::from_static(b"done"))))
            }
        }));
    let req = http::Request::new(());
    let res = svc.ready().await.unwrap().call(req).await.unwrap();
    let collected = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(collected, Bytes::from_static(b"done"));
}

#[tokio::test(start_paused = true)]
async fn progress_reset_ignores_an_unchecked_listen_label() {
    let entry = |idle_ms: u64, max_ms: u64| ProgressLimits {
        idle: Duration::from_millis(idle_ms),
        max: Some(Duration::from_millis(max_ms)),
    };
    // Default: idle 1 s, max 10 s.
    let mut svc = ServiceBuilder::new()
        .layer(
            ProgressResetLayer::new(Duration::from_secs(1))
                .method("tools/call", entry(60_000, 20_000))
                .method("tools/list", entry(60_000, 500)),
        )
        .service(service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, BoxError>(http::Response::new(()))
        }));
    let mut labelled = |method: &str| {
        let req = http::Request::builder()
            .header("Mcp-Method", method)
            .body(())
            .unwrap();
        let fut = svc.call(req);
        async move { elapsed(&fut.await.unwrap_err()) }
    };
    // Labelled listen: the default idle limit all the same.
    assert_eq!(
        labelled("subscriptions/listen").await,
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
    // An entry counts only where it is tighter than the default: not
    // tools/call's longer idle limit, but tools/list's shorter maximum.
    assert_eq!(
        labelled("tools/call").await,
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
    assert_eq!(
        labelled("tools/list").await,
        Elapsed::new(Limit::Max, Duration::from_millis(500))
    );
}

type Chan = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, BoxError>>;
fn futures_channel_stream() -> (
    Chan,
    impl futures_core::Stream<Item = Result<Frame<Bytes>, BoxError>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    (tx, tokio_stream_from(rx))
}

fn tokio_stream_from<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_core::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test(start_paused = true)]
async fn timeout_policy_from_the_mcp_method_header() {
    let mut svc = ServiceBuilder::new()
        .layer(
            TimeoutLayer::new(Duration::from_secs(1)).method("tools/call", Duration::from_secs(30)),
        )
        .service(service_fn(|_req: http::Request<()>| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, BoxError>(http::Response::new(()))
        }));
    // A method checked against the body (a `Method` in the extensions)
    // earns its longer deadline; the bare header would not.
    let mut call = http::Request::builder()
        .header("Mcp-Method", "tools/call")
        .body(())
        .unwrap();
    call.extensions_mut()
        .insert(tower_mcp_cancel::jsonrpc::Method::new("tools/call"));
    assert!(svc.ready().await.unwrap().call(call).await.is_ok());
    let list = http::Request::builder()
        .header("Mcp-Method", "tools/list")
        .body(())
        .unwrap();
    let e = svc.ready().await.unwrap().call(list).await.unwrap_err();
    assert_eq!(elapsed(&e).after(), Duration::from_secs(1));
    assert!(http::Request::builder()
        .body(())
        .unwrap()
        .request_id()
        .is_none());
}
