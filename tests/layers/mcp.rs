//! The three layers, under a paused clock, with drop probes.

use std::future::{pending, Future};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::jsonrpc::{ProgressToken, RequestId};
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Cancelled, Elapsed, Limit, McpRequest,
    ProgressLimits, ProgressObserver, ProgressResetLayer, RequestTimeout, RequestView,
    TimeoutLayer,
};

type Value = serde_json::Value;

fn ok() -> Result<Value, BoxError> {
    Ok(serde_json::json!({"resultType": "complete"}))
}

/// A handler that never finishes and never looks at its token; its probe
/// records the drop.
async fn never(probe_guard: tower_mcp_cancel::test_util::DropGuard) -> Result<Value, BoxError> {
    let _g = probe_guard;
    pending::<()>().await;
    ok()
}

fn elapsed(e: &BoxError) -> Elapsed {
    *e.downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("not Elapsed: {e}"))
}

// ---------- TimeoutLayer ----------

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

/// Polls once; `Some` if ready.
async fn futures_poll<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    futures_util::future::poll_immediate(f).await
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

// ---------- ProgressResetLayer ----------

fn progress_service(
    schedule: Vec<(u64, f64)>,
    probe: Option<DropProbe>,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> + Clone {
    service_fn(move |r: McpRequest| {
        let tap = r.progress_tap().cloned().expect("tap set by the layer");
        let schedule = schedule.clone();
        let guard = probe.as_ref().map(DropProbe::guard);
        async move {
            let _g = guard;
            for (wait_ms, value) in schedule {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                tap.record(value, None, None);
            }
            ok()
        }
    })
}

#[tokio::test(start_paused = true)]
async fn progress_resets_the_idle_clock() {
    // 20 steps of 400 ms = 8 s under a 1 s idle limit.
    let schedule = (1..=20).map(|i| (400, i as f64)).collect();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(60)))
        .service(progress_service(schedule, None));
    let start = Instant::now();
    assert!(svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .is_ok());
    assert_eq!(Instant::now() - start, Duration::from_millis(8000));
}

// ---------- TimeoutLayer and ProgressResetLayer sharing one timer ----------

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

/// Calls `svc` once with `req` and returns its error (the call must fail).
async fn call_err<S>(svc: &mut S, req: McpRequest) -> BoxError
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    svc.ready().await.unwrap().call(req).await.unwrap_err()
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

#[tokio::test(start_paused = true)]
async fn repeated_or_decreasing_progress_does_not_reset() {
    // Accepted at 400 ms (1.0); then 1.0 again, 0.5, NaN: none counts, so idle fires at 1400 ms.
    let schedule = vec![
        (400, 1.0),
        (400, 1.0),
        (400, 0.5),
        (400, f64::NAN),
        (400, 2.0),
    ];
    let probe = DropProbe::default();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(progress_service(schedule, Some(probe.clone())));
    let start = Instant::now();
    let e = call_err(&mut svc, McpRequest::new(1, "tools/call")).await;
    assert_eq!(
        elapsed(&e),
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
    assert_eq!(
        probe.dropped_at().unwrap() - start,
        Duration::from_millis(1400)
    );
}

#[tokio::test(start_paused = true)]
async fn max_fires_without_progress_and_with_steady_progress() {
    // No progress, idle longer than max: max fires.
    let probe = DropProbe::default();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(10)).max(Duration::from_secs(3)))
        .service(progress_service(vec![(100_000, 1.0)], Some(probe.clone())));
    let start = Instant::now();
    let e = call_err(&mut svc, McpRequest::new(1, "x")).await;
    assert_eq!(
        elapsed(&e),
        Elapsed::new(Limit::Max, Duration::from_secs(3))
    );
    assert_eq!(probe.dropped_at().unwrap() - start, Duration::from_secs(3));

    // Progress every 100 ms forever: max still fires at 3 s.
    let schedule = (1..=1000).map(|i| (100, i as f64)).collect();
    let probe = DropProbe::default();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(3)))
        .service(progress_service(schedule, Some(probe.clone())));
    let start = Instant::now();
    let e = call_err(&mut svc, McpRequest::new(2, "x")).await;
    assert_eq!(elapsed(&e).limit(), Limit::Max);
    assert_eq!(probe.dropped_at().unwrap() - start, Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn progress_after_completion_is_ignored_and_observers_see_the_stream() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let taps = Arc::new(Mutex::new(Vec::new()));
    let t = taps.clone();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(service_fn(move |r: McpRequest| {
            let tap = r.progress_tap().unwrap().clone();
            t.lock().unwrap().push(tap.clone());
            async move {
                tap.record(0.25, Some(1.0), Some("a".into()));
                tap.record(0.75, Some(1.0), None);
                ok()
            }
        }));
    let req = McpRequest::new(1, "x").with_extension(ProgressObserver::new(move |p| {
        s.lock().unwrap().push(p.progress)
    }));
    svc.ready().await.unwrap().call(req).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![0.25, 0.75]);
    let tap = taps.lock().unwrap()[0].clone();
    assert!(tap.is_closed());
    assert!(!tap.record(5.0, None, None), "progress after the end");
    assert_eq!(*seen.lock().unwrap(), vec![0.25, 0.75]);
}

#[tokio::test(start_paused = true)]
async fn tokens_are_assigned_unique_and_existing_ones_kept() {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let t = tokens.clone();
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(service_fn(move |r: McpRequest| {
            t.lock().unwrap().push(r.progress_token().cloned());
            let tap_token = r.progress_tap().unwrap().token();
            assert_eq!(Some(&tap_token), r.progress_token());
            async { ok() }
        }));
    // Each service counts its own run of tokens: the calls go through the
    // service, a clone of it, and a fresh clone each (as a server clones its
    // stack per request); more calls than one run holds.
    let mut twin = svc.clone();
    let mut futs = Vec::new();
    for i in 0..100 {
        let req = McpRequest::new(i, "tools/call");
        let fut = match i % 3 {
            0 => svc.ready().await.unwrap().call(req),
            1 => twin.ready().await.unwrap().call(req),
            _ => svc.clone().ready().await.unwrap().call(req),
        };
        futs.push(fut);
    }
    let own = McpRequest::new(100, "tools/call")
        .with_params(serde_json::json!({"_meta": {"progressToken": "mine"}}));
    futs.push(svc.ready().await.unwrap().call(own));
    // A second layer over the same transport does not collide with the first.
    let mut other = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(svc.get_ref().clone());
    futs.push(
        other
            .ready()
            .await
            .unwrap()
            .call(McpRequest::new(101, "tools/call")),
    );
    for f in futs {
        f.await.unwrap();
    }
    let tokens = tokens.lock().unwrap();
    let set: std::collections::HashSet<_> = tokens.iter().cloned().map(Option::unwrap).collect();
    assert_eq!(set.len(), 102);
    assert!(set.contains(&ProgressToken::from("mine")));
}

#[tokio::test(start_paused = true)]
async fn assigned_token_reaches_the_wire_params() {
    let (mock, mut handle) = tower_test::mock::pair::<McpRequest, Value>();
    let mut svc = tower::Layer::layer(&ProgressResetLayer::new(Duration::from_secs(1)), mock);
    let call = tokio::spawn(async move {
        svc.ready()
            .await
            .unwrap()
            .call(McpRequest::new(1, "tools/call").with_params(serde_json::json!({"name": "slow"})))
            .await
    });
    let (req, respond) = handle.next_request().await.unwrap();
    let wire = req.wire_params().unwrap().unwrap();
    let v: Value = serde_json::from_str(wire.get()).unwrap();
    assert_eq!(
        v["_meta"]["progressToken"],
        serde_json::to_value(req.progress_token().unwrap()).unwrap()
    );
    assert_eq!(v["name"], "slow");
    respond.send_response(serde_json::json!({}));
    call.await.unwrap().unwrap();
}

// ---------- CancelOnDisconnectLayer ----------

fn cancel_stack(
    probe: DropProbe,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> {
    ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |_r: McpRequest| never(probe.guard())))
}

#[tokio::test(start_paused = true)]
async fn cancel_during_drops_the_handler_and_fires_the_token() {
    let probe = DropProbe::default();
    let mut svc = cancel_stack(probe.clone());
    let c = Cancellation::new();
    let token = c.token();
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call").with_extension(c.clone()));
    let task = tokio::spawn(fut);
    settle().await;
    assert!(!probe.is_dropped());
    assert!(c.cancel(CancelReason::peer(Some("stop\nnow"))));
    let err = task.await.unwrap().unwrap_err();
    let cancelled = err.downcast_ref::<Cancelled>().unwrap();
    assert_eq!(
        cancelled.reason(),
        &CancelReason::Peer(Some("stop now".into()))
    );
    assert!(probe.was_cancelled());
    assert!(token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancel_before_the_call_never_runs_the_handler() {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |_req: McpRequest| {
            let r = r.clone();
            async move {
                *r.lock().unwrap() += 1;
                ok()
            }
        }));
    let c = Cancellation::new();
    c.cancel(CancelReason::TransportClosed);
    let err = call_err(&mut svc, McpRequest::new(1, "x").with_extension(c)).await;
    assert!(err.is::<Cancelled>());
    assert_eq!(*runs.lock().unwrap(), 0, "the handler body never ran");
}

#[tokio::test(start_paused = true)]
async fn cancel_after_completion_is_a_noop() {
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(|_r: McpRequest| async { ok() }));
    let c = Cancellation::new();
    let token = c.token();
    let out = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "x").with_extension(c.clone()))
        .await;
    assert!(out.is_ok());
    assert!(!c.cancel(CancelReason::peer(None)));
    assert!(!token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_response_future_fires_client_disconnected() {
    let probe = DropProbe::default();
    let mut svc = cancel_stack(probe.clone());
    let c = Cancellation::new();
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "x").with_extension(c.clone()));
    let mut fut = Box::pin(fut);
    assert!(futures_poll(&mut fut).await.is_none());
    drop(fut);
    assert!(probe.was_cancelled());
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
}

#[tokio::test(start_paused = true)]
async fn layer_creates_a_cancellation_when_the_transport_gave_none() {
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |r: McpRequest| {
            *s.lock().unwrap() = r.cancellation().cloned();
            async {
                pending::<()>().await;
                ok()
            }
        }));
    let fut = svc.ready().await.unwrap().call(McpRequest::new(1, "x"));
    drop(fut);
    let c = seen
        .lock()
        .unwrap()
        .clone()
        .expect("handler saw a Cancellation");
    assert!(c.token().is_cancelled());
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
}

#[tokio::test(start_paused = true)]
async fn registry_races_ids_and_string_vs_integer() {
    let in_flight = InFlight::new();
    let (p_int, p_str, p_zero) = (
        DropProbe::default(),
        DropProbe::default(),
        DropProbe::default(),
    );
    let mut tasks = Vec::new();
    for (id, guard) in [
        (RequestId::from(1), p_int.clone()),
        (RequestId::from("1"), p_str.clone()),
        (RequestId::from(0), p_zero.clone()),
    ] {
        let reg = in_flight.register(id.clone(), None).unwrap();
        let mut svc = cancel_stack(guard);
        let fut = svc
            .ready()
            .await
            .unwrap()
            .call(McpRequest::new(id, "x").with_cancellation(reg.cancellation().clone()));
        tasks.push(tokio::spawn(async move {
            let out = fut.await;
            drop(reg);
            out
        }));
    }
    settle().await;
    // Unknown id: nothing happens, and it leaves nothing behind.
    assert!(!in_flight.cancel(&RequestId::from(2), CancelReason::peer(None)));
    assert!(!in_flight.contains(&RequestId::from(2)));
    // Cancelling "1" cancels the string id only.
    assert!(in_flight.cancel(&RequestId::from("1"), CancelReason::peer(Some("first"))));
    // A duplicate cancel is ignored: the first reason stays.
    assert!(!in_flight.cancel(&RequestId::from("1"), CancelReason::Shutdown));
    assert_eq!(
        in_flight
            .get(&RequestId::from("1"))
            .and_then(|c| c.reason().cloned()),
        Some(CancelReason::peer(Some("first")))
    );
    settle().await;
    assert!(p_str.was_cancelled());
    assert!(!p_int.is_dropped());
    // Id 0 is an ordinary id.
    assert!(in_flight.cancel(&RequestId::from(0), CancelReason::peer(None)));
    settle().await;
    assert!(p_zero.was_cancelled());
    assert!(!p_int.is_dropped());
    assert_eq!(in_flight.cancel_all(CancelReason::TransportClosed), 1);
    for t in tasks {
        assert!(t.await.unwrap().unwrap_err().is::<Cancelled>());
    }
    assert!(p_int.was_cancelled());
    assert!(in_flight.is_empty());
}

#[tokio::test(start_paused = true)]
async fn progress_reset_exempts_listen_by_default() {
    // A listen stream is quiet by design: an hour without progress is fine.
    let quiet = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)))
        .service(quiet());
    let start = Instant::now();
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "subscriptions/listen"))
        .await
        .expect("a quiet listen stream is not idle-limited");
    assert_eq!(Instant::now() - start, Duration::from_secs(3600));
    // Other methods still are.
    let e = call_err(&mut svc, McpRequest::new(2, "tools/call")).await;
    assert_eq!(elapsed(&e).limit(), Limit::Idle);
}

#[tokio::test(start_paused = true)]
async fn progress_policy_per_method_and_per_request() {
    let quiet = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    let limits = |idle: u64, max: u64| ProgressLimits {
        idle: Duration::from_secs(idle),
        max: Some(Duration::from_secs(max)),
    };
    let layer = ProgressResetLayer::new(Duration::from_secs(1))
        .method("tools/call", limits(5, 100))
        .method_unlimited("tasks/wait");
    assert_eq!(
        layer.policy().limit_for(Some("tools/call")),
        Some(limits(5, 100))
    );
    let mut svc = ServiceBuilder::new().layer(layer).service(quiet());
    let mut call = |req: McpRequest| {
        let fut = svc.call(req);
        async move { fut.await.map_err(|e| elapsed(&e)) }
    };
    assert_eq!(
        call(McpRequest::new(1, "tools/call")).await.unwrap_err(),
        Elapsed::new(Limit::Idle, Duration::from_secs(5))
    );
    assert_eq!(
        call(McpRequest::new(2, "tools/list")).await.unwrap_err(),
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
    assert!(call(McpRequest::new(3, "tasks/wait")).await.is_ok());
    // Per request, over the policy, exempt methods included.
    let req = McpRequest::new(4, "subscriptions/listen").with_extension(limits(2, 100));
    assert_eq!(
        call(req).await.unwrap_err(),
        Elapsed::new(Limit::Idle, Duration::from_secs(2))
    );
    // Listen exemption can be turned off.
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).exempt_listen(false))
        .service(quiet());
    let e = call_err(&mut svc, McpRequest::new(5, "subscriptions/listen")).await;
    assert_eq!(
        elapsed(&e),
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
}

// ---------- configuration values ----------

#[tokio::test(start_paused = true)]
async fn timeout_duration_max_means_no_deadline() {
    let slow = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::MAX))
        .service(slow());
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .expect("no deadline");
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)).method("tools/call", Duration::MAX))
        .service(slow());
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(2, "tools/call"))
        .await
        .expect("no deadline");
    // Past what an Instant holds, though not Duration::MAX.
    let req = McpRequest::new(3, "tools/call")
        .with_extension(RequestTimeout::after(Duration::from_secs(u64::MAX / 2)));
    svc.ready()
        .await
        .unwrap()
        .call(req)
        .await
        .expect("no deadline");
}

#[tokio::test(start_paused = true)]
async fn progress_duration_max_means_no_limit() {
    let slow = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    // Idle limit MAX (and so a default max of 10 × MAX).
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::MAX))
        .service(slow());
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .expect("no idle limit");
    // A finite idle limit with a MAX maximum: the idle limit still fires.
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::MAX))
        .service(slow());
    let e = call_err(&mut svc, McpRequest::new(2, "tools/call")).await;
    assert_eq!(
        elapsed(&e),
        Elapsed::new(Limit::Idle, Duration::from_secs(1))
    );
    // Per request.
    let req = McpRequest::new(3, "tools/call").with_extension(ProgressLimits {
        idle: Duration::MAX,
        max: Some(Duration::MAX),
    });
    svc.ready()
        .await
        .unwrap()
        .call(req)
        .await
        .expect("no limit");
    // After progress, the idle deadline is computed again from the report.
    let schedule = vec![(500, 1.0), (500, 2.0)];
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::MAX).without_max())
        .service(progress_service(schedule, None));
    svc.ready()
        .await
        .unwrap()
        .call(McpRequest::new(4, "tools/call"))
        .await
        .expect("no limit after progress either");
}

// ---------- http::Request form ----------

mod http_form {
    use super::*;
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
                TimeoutLayer::new(Duration::from_secs(1))
                    .method("tools/call", Duration::from_secs(30)),
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
}

// ---------- composition ----------

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
