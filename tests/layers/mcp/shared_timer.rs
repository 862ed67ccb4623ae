//! `TimeoutLayer` and `ProgressResetLayer` sharing one timer: whichever
//! limit comes first ends the request, in any stacking.

use std::future::{pending, Future};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Elapsed, Limit, McpRequest,
    ProgressResetLayer, TimeoutLayer,
};

use super::{call_err, elapsed, never, ok, Value};

/// A handler that reports progress every `every` and never finishes.
fn steady_progress(
    probe: &DropProbe,
    every: Duration,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> + Clone {
    let probe = probe.clone();
    service_fn(move |r: McpRequest| {
        let tap = r.progress_tap().cloned().expect("tap set by the layer");
        let guard = probe.guard();
        async move {
            let _g = guard;
            for i in 1.. {
                tokio::time::sleep(every).await;
                tap.record(f64::from(i), None, None);
            }
            ok()
        }
    })
}

/// Calls `svc` once with a `tools/call` and waits for its error: the error,
/// and how long (in the test's clock) the call took.
async fn call_until_error<S>(svc: &mut S) -> (Duration, BoxError)
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    let start = Instant::now();
    let err = call_err(svc, McpRequest::new(1, "tools/call")).await;
    (Instant::now() - start, err)
}

/// The progress layer's timer also enforces the timeout above it: steady
/// progress keeps the idle limit away, and the request still ends at the
/// timeout's deadline, with the timeout's limit and reason.
#[tokio::test(start_paused = true)]
async fn the_timeout_fires_through_the_progress_timer() {
    let probe = DropProbe::default();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let inner = steady_progress(&probe, Duration::from_millis(300));
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).without_max())
        .service(service_fn(move |r: McpRequest| {
            *s.lock().unwrap() = r.cancellation().cloned();
            inner.clone().call(r)
        }));
    let (took, err) = call_until_error(&mut svc).await;
    assert_eq!(took, Duration::from_secs(2));
    let two = Elapsed::new(Limit::Timeout, Duration::from_secs(2));
    assert_eq!(elapsed(&err), two);
    assert!(probe.is_dropped());
    let c = seen.lock().unwrap().clone().unwrap();
    assert!(c.token().is_cancelled());
    assert_eq!(c.reason(), Some(&CancelReason::Timeout(two)));
}

/// Of two timeouts above one progress layer, the shorter fires, whichever
/// is outside; the longer one's deadline never hides it.
#[tokio::test(start_paused = true)]
async fn nested_timeouts_the_shorter_fires_in_either_order() {
    for (outer, inner_limit) in [(1, 5), (5, 1)] {
        let probe = DropProbe::default();
        let mut svc = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .layer(TimeoutLayer::new(Duration::from_secs(outer)))
            .layer(TimeoutLayer::new(Duration::from_secs(inner_limit)))
            .layer(ProgressResetLayer::new(Duration::from_secs(60)))
            .service(steady_progress(&probe, Duration::from_millis(300)));
        let (took, err) = call_until_error(&mut svc).await;
        assert_eq!(took, Duration::from_secs(1), "{outer}/{inner_limit}");
        assert_eq!(
            elapsed(&err),
            Elapsed::new(Limit::Timeout, Duration::from_secs(1))
        );
        assert!(probe.is_dropped());
    }
}

/// A layer between the timeout and the progress layer that calls its inner
/// service later (a `Buffer`: on its worker task) keeps the timeout's own
/// timer: the deadline holds either way.
#[tokio::test(start_paused = true)]
async fn a_deferred_inner_call_keeps_the_timeouts_own_timer() {
    let probe = DropProbe::default();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .buffer(8)
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).without_max())
        .service(steady_progress(&probe, Duration::from_millis(300)));
    let (took, err) = call_until_error(&mut svc).await;
    assert_eq!(took, Duration::from_secs(2));
    assert_eq!(
        elapsed(&err),
        Elapsed::new(Limit::Timeout, Duration::from_secs(2))
    );
    settle().await;
    assert!(probe.is_dropped());
}

/// With the progress layer outside the timeout, each keeps its own timer.
#[tokio::test(start_paused = true)]
async fn a_timeout_below_the_progress_layer_keeps_its_own_timer() {
    let probe = DropProbe::default();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).without_max())
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(steady_progress(&probe, Duration::from_millis(300)));
    let (took, err) = call_until_error(&mut svc).await;
    assert_eq!(took, Duration::from_secs(2));
    assert_eq!(
        elapsed(&err),
        Elapsed::new(Limit::Timeout, Duration::from_secs(2))
    );
    assert!(probe.is_dropped());
}

/// With `ProgressResetLayer` alone, the handler still gets a token, and the
/// idle limit fires it: work the handler spawned stops with the request.
#[tokio::test(start_paused = true)]
async fn progress_layer_alone_fires_the_handlers_token_on_idle() {
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).without_max())
        .service(service_fn(move |r: McpRequest| {
            *s.lock().unwrap() = r.cancellation().map(Cancellation::token);
            async {
                pending::<()>().await;
                ok()
            }
        }));
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"));
    let token = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the handler got a token");
    assert!(!token.is_cancelled());
    let err = fut.await.unwrap_err();
    assert_eq!(elapsed(&err).limit(), Limit::Idle);
    assert!(
        token.is_cancelled(),
        "the idle limit fired the handler's token"
    );
}

/// Two progress layers on one request: the inner one's tap cannot live in
/// the request's `Cancellation` (the outer one's does), yet its limit still
/// cancels the request, and each layer keeps its own tap.
#[tokio::test(start_paused = true)]
async fn stacked_progress_layers_both_cancel_the_request() {
    let probe = DropProbe::default();
    let guards = probe.clone();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(ProgressResetLayer::new(Duration::from_secs(10)).without_max())
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).without_max())
        .service(service_fn(move |r: McpRequest| {
            *s.lock().unwrap() = r.cancellation().cloned();
            never(guards.guard())
        }));
    let (took, err) = call_until_error(&mut svc).await;
    assert_eq!(took, Duration::from_secs(1), "the inner limit");
    assert!(probe.is_dropped());
    let c = seen
        .lock()
        .unwrap()
        .clone()
        .expect("handler saw a Cancellation");
    match c.reason() {
        Some(CancelReason::Timeout(e)) => assert_eq!(e.limit(), Limit::Idle),
        other => panic!("request not cancelled by the limit: {other:?} ({err})"),
    }
}
