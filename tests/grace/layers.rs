//! Without a transport, a grace changes nothing: the layers drop the
//! inner future at the cancel or the expiry, as they always did (only a
//! transport's lifecycle applies a grace).

use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, McpRequest, ProgressResetLayer,
    RequestView, TimeoutLayer,
};

use crate::handler::BOUND;

/// A handler that never ends, its drop watched by `probe`.
fn hang(
    probe: DropProbe,
) -> impl tower::Service<McpRequest, Response = (), Error = BoxError, Future: Send> + Clone {
    service_fn(move |_req: McpRequest| {
        let guard = probe.guard();
        async move {
            tokio::time::sleep(BOUND).await;
            guard.finish();
            Ok::<_, BoxError>(())
        }
    })
}

/// A request whose cancellation asks for a grace of a minute.
fn graced_request() -> (McpRequest, Cancellation) {
    let c = Cancellation::new();
    assert!(c.set_grace(Duration::from_secs(60)));
    let mut req = McpRequest::new(1, "tools/call");
    req.set_cancellation(c.clone());
    (req, c)
}

#[tokio::test(start_paused = true)]
async fn timeout_layer_drops_at_its_deadline() {
    let probe = DropProbe::default();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(hang(probe.clone()));
    let (req, _) = graced_request();
    let t0 = Instant::now();
    assert!(svc.oneshot(req).await.is_err());
    assert_eq!(probe.dropped_at().unwrap() - t0, Duration::from_secs(1));
    assert!(probe.was_cancelled());
}

#[tokio::test(start_paused = true)]
async fn progress_reset_layer_drops_at_its_limit() {
    let probe = DropProbe::default();
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(hang(probe.clone()));
    let (req, _) = graced_request();
    let t0 = Instant::now();
    assert!(svc.oneshot(req).await.is_err());
    assert_eq!(probe.dropped_at().unwrap() - t0, Duration::from_secs(1));
    assert!(probe.was_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancel_on_disconnect_drops_at_the_cancel() {
    let probe = DropProbe::default();
    let svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(hang(probe.clone()));
    let (req, c) = graced_request();
    let call = tokio::spawn(svc.oneshot(req));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t0 = Instant::now();
    c.cancel(CancelReason::Shutdown);
    assert!(call.await.unwrap().is_err());
    assert_eq!(probe.dropped_at().unwrap(), t0);
    assert!(probe.was_cancelled());
}
