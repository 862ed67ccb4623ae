//! Composition: the layers stack in a `ServiceBuilder` and an axum router,
//! and each hands out the service it wraps.

use std::future::pending;
use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Cancellation, Elapsed, Limit, McpRequest, ProgressResetLayer,
    TimeoutLayer,
};

use super::{call_err, elapsed, ok, progress_service};

#[tokio::test(start_paused = true)]
async fn full_stack_composes_in_service_builder() {
    let probe = DropProbe::default();
    let guards = probe.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .layer(ProgressResetLayer::new(Duration::from_secs(2)).max(Duration::from_secs(60)))
        .service(service_fn(move |r: McpRequest| {
            let g = guards.guard();
            let tap = r.progress_tap().cloned();
            let has_cancellation = r.cancellation().is_some();
            async move {
                let _g = g;
                assert!(tap.is_some() && has_cancellation);
                pending::<()>().await;
                ok()
            }
        }));
    let c = Cancellation::new();
    let token = c.token();
    let e = call_err(&mut svc, McpRequest::new(1, "tools/call").with_extension(c)).await;
    assert_eq!(elapsed(&e).limit(), Limit::Idle);
    assert!(probe.was_cancelled());
    // The timeout inside fired the request's token for spawned work.
    assert!(token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn progress_reset_in_the_builder_takes_the_maximum_set() {
    // 100 s of work with progress every second, under a 120 s tools/call
    // deadline: no hidden 10 × idle maximum cuts it at 20 s.
    let schedule: Vec<(u64, f64)> = (1..=100).map(|i| (1000, i as f64)).collect();
    let mut svc = ServiceBuilder::new()
        .layer(
            TimeoutLayer::new(Duration::from_secs(30))
                .method("tools/call", Duration::from_secs(120)),
        )
        .layer(ProgressResetLayer::new(Duration::from_secs(2)).max(Duration::MAX))
        .service(progress_service(schedule.clone(), None));
    let start = Instant::now();
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .expect("the tools/call deadline holds");
    assert_eq!(Instant::now() - start, Duration::from_secs(100));
    // The maximum given is the one enforced.
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(2)).max(Duration::from_secs(50)))
        .service(progress_service(schedule, None));
    let e = call_err(&mut svc, McpRequest::new(2, "tools/call")).await;
    assert_eq!(
        elapsed(&e),
        Elapsed::new(Limit::Max, Duration::from_secs(50))
    );
    // A configured layer, as is: no maximum, 2 s idle, so 100 s of steady
    // progress pass.
    let schedule: Vec<(u64, f64)> = (1..=100).map(|i| (1000, i as f64)).collect();
    let layer = ProgressResetLayer::new(Duration::from_secs(2)).without_max();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(progress_service(schedule, None));
    svc.oneshot(McpRequest::new(3, "tools/call"))
        .await
        .expect("no maximum");
}

#[tokio::test]
async fn layers_compose_inside_an_axum_router() {
    use axum::body::Body;
    use axum::routing::post;
    use axum::Router;

    let app = Router::new().route("/mcp", post(|| async { "ok" })).layer(
        ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(
                |e: BoxError| async move { (http::StatusCode::GATEWAY_TIMEOUT, e.to_string()) },
            ))
            .layer(TimeoutLayer::new(Duration::from_secs(5)))
            .layer(CancelOnDisconnectLayer::http()),
    );
    let req = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("Mcp-Method", "tools/call")
        .body(Body::empty())
        .unwrap();
    let res = app.oneshot(req).await.unwrap();
    assert_eq!(res.status(), http::StatusCode::OK);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], b"ok");
}

// ---------- inner services ----------

/// Each middleware hands out the service it wraps: shared, mutable, and
/// back by value.
#[test]
fn every_middleware_reaches_its_inner_service() {
    use tower::Layer;

    let mut timeout = TimeoutLayer::new(Duration::from_secs(1)).layer(1u8);
    *timeout.get_mut() += 1;
    assert_eq!((*timeout.get_ref(), timeout.into_inner()), (2, 2));

    let mut progress = ProgressResetLayer::new(Duration::from_secs(1)).layer(1u8);
    *progress.get_mut() += 1;
    assert_eq!((*progress.get_ref(), progress.into_inner()), (2, 2));

    let mut cancel = CancelOnDisconnectLayer::new().layer(1u8);
    *cancel.get_mut() += 1;
    assert_eq!((*cancel.get_ref(), cancel.into_inner()), (2, 2));
}
