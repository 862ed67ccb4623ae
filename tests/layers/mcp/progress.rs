//! `ProgressResetLayer`: only increasing progress resets the idle clock,
//! the maximum holds regardless, tokens are unique, progress after the end
//! is ignored, and limits are per method and per request, listen exempt.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ProgressToken;
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    Elapsed, Limit, McpRequest, ProgressLimits, ProgressObserver, ProgressResetLayer,
};

use super::{call_err, elapsed, ok, progress_service, Value};

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
