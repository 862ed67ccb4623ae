//! `TimeoutLayer`: the deadline (per method, per request, listen exempt)
//! drops the handler's future, fires its token and names the limit.

use std::future::pending;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Elapsed, Limit, McpRequest,
    ProgressLimits, ProgressResetLayer, RequestTimeout, TimeoutLayer,
};

use super::{call_err, elapsed, futures_poll, never, ok};

#[tokio::test(start_paused = true)]
async fn timeout_drops_inner_future_at_the_deadline() {
    let probe = DropProbe::default();
    let guards = probe.clone();
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(5)))
        .service(service_fn(move |_r: McpRequest| never(guards.guard())));
    let start = Instant::now();
    let mut fut = Box::pin(
        svc.ready()
            .await
            .unwrap()
            .call(McpRequest::new(1, "tools/call")),
    );
    // Not yet.
    assert!(futures_poll(&mut fut).await.is_none());
    advance(Duration::from_millis(4999)).await;
    assert!(futures_poll(&mut fut).await.is_none());
    assert!(!probe.is_dropped());
    advance(Duration::from_millis(1)).await;
    let err = fut.await.unwrap_err();
    let e = elapsed(&err);
    assert_eq!(
        (e.limit(), e.after()),
        (Limit::Timeout, Duration::from_secs(5))
    );
    // Dropped at expiry, not later when the outer future is dropped.
    assert!(probe.was_cancelled());
    assert_eq!(probe.dropped_at().unwrap() - start, Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn per_method_and_per_request_overrides() {
    let layer =
        TimeoutLayer::new(Duration::from_secs(10)).method("tools/call", Duration::from_secs(300));
    let mut svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_r: McpRequest| async {
            pending::<()>().await;
            ok()
        }));
    let mut limit_of = async |req: McpRequest| {
        let e = svc.ready().await.unwrap().call(req).await.unwrap_err();
        elapsed(&e).after()
    };
    assert_eq!(
        limit_of(McpRequest::new(1, "tools/list")).await,
        Duration::from_secs(10)
    );
    assert_eq!(
        limit_of(McpRequest::new(2, "tools/call")).await,
        Duration::from_secs(300)
    );
    let req = McpRequest::new(3, "tools/call")
        .with_extension(RequestTimeout::after(Duration::from_millis(1500)));
    assert_eq!(limit_of(req).await, Duration::from_millis(1500));
}

#[tokio::test(start_paused = true)]
async fn listen_is_exempt_by_default_and_configurable() {
    let handler = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(handler());
    // An hour-long listen completes normally.
    let r = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "subscriptions/listen"))
        .await;
    assert!(r.is_ok());
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)).exempt_listen(false))
        .service(handler());
    let r = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "subscriptions/listen"))
        .await;
    assert_eq!(elapsed(&r.unwrap_err()).after(), Duration::from_secs(1));
    // A per-request "no deadline" works for any method.
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(handler());
    let req = McpRequest::new(2, "tools/call").with_extension(RequestTimeout::none());
    assert!(svc.ready().await.unwrap().call(req).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn response_wins_a_tie_with_the_timer() {
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(service_fn(|_r: McpRequest| {
            // Created at call, like the layer's timer: both deadlines are equal.
            let work = tokio::time::sleep(Duration::from_secs(1));
            async move {
                work.await;
                ok()
            }
        }));
    let fut = svc.ready().await.unwrap().call(McpRequest::new(1, "ping"));
    advance(Duration::from_secs(1)).await;
    assert!(fut.await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn timeout_reason_travels_with_the_drop() {
    // A client transport below reads why its future is dropped from the
    // request's cancellation, as it is when the future is dropped.
    let seen = Arc::new(Mutex::new(Vec::new()));
    struct Reader(Option<Cancellation>, Arc<Mutex<Vec<Option<CancelReason>>>>);
    impl Drop for Reader {
        fn drop(&mut self) {
            let reason = self.0.as_ref().and_then(|c| c.reason().cloned());
            self.1.lock().unwrap().push(reason);
        }
    }
    let s = seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(3)))
        .service(service_fn(move |r: McpRequest| {
            let r = Reader(r.cancellation().cloned(), s.clone());
            async move {
                let _r = r;
                pending::<()>().await;
                ok()
            }
        }));
    // The progress layer gives the request a cancellation if it has none.
    let e = call_err(&mut svc, McpRequest::new(1, "tools/call")).await;
    assert_eq!(elapsed(&e).limit(), Limit::Idle);
    let slow_idle = ProgressLimits {
        idle: Duration::from_secs(10),
        max: None,
    };
    let e = call_err(
        &mut svc,
        McpRequest::new(2, "tools/call")
            .with_cancellation(Cancellation::new())
            .with_extension(slow_idle),
    )
    .await;
    assert_eq!(elapsed(&e).limit(), Limit::Timeout);
    // Without a cancellation in the request, the timeout has none to
    // cancel: below it, the drop looks like the caller's.
    let e = call_err(
        &mut svc,
        McpRequest::new(3, "tools/call").with_extension(slow_idle),
    )
    .await;
    assert_eq!(elapsed(&e).limit(), Limit::Timeout);
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(4, "tools/call"));
    drop(fut);
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        vec![
            Some(CancelReason::Timeout(Elapsed::new(
                Limit::Idle,
                Duration::from_secs(1)
            ))),
            Some(CancelReason::Timeout(Elapsed::new(
                Limit::Timeout,
                Duration::from_secs(2)
            ))),
            None, // no cancellation for the timeout to cancel
            None, // dropped by its caller
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn server_side_timeout_fires_the_token_and_answers_an_error() {
    let token_seen = Arc::new(Mutex::new(None));
    let t = token_seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(service_fn(move |r: McpRequest| {
            let c = r.cancellation().unwrap().clone();
            let t = t.clone();
            tokio::spawn(async move {
                let reason = c.cancelled().await;
                *t.lock().unwrap() = Some(reason);
            });
            async {
                pending::<()>().await;
                ok()
            }
        }));
    let out = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(7, "tools/call"))
        .await;
    settle().await;
    let err = out.unwrap_err();
    assert!(err.is::<Elapsed>());
    assert!(matches!(
        *token_seen.lock().unwrap(),
        Some(CancelReason::Timeout(_))
    ));
    // What a server answers with for it.
    let answer = err.downcast_ref::<Elapsed>().unwrap().to_error_object();
    assert_eq!(answer.code, -32603);
}
