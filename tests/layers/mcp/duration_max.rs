//! Configuration values: `Duration::MAX` means no deadline and no limit (per
//! request, per method, and as an inherited cap); `Duration::ZERO` ends a
//! call at once.

use std::time::Duration;

use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{
    Elapsed, Limit, McpRequest, ProgressLimits, ProgressResetLayer, RequestTimeout, TimeoutLayer,
};

use super::{call_err, elapsed, ok, progress_service};

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

/// Per-method progress limits and an inherited `DeadlineCap` at their
/// extremes: `Duration::MAX` is "never" (an hour-long call completes),
/// `Duration::ZERO` ends the call at once with the limit that was set; no
/// value panics, in any of the layers of a stack.
#[tokio::test(start_paused = true)]
async fn per_method_limits_and_deadline_caps_at_their_extremes() {
    use tower_mcp_cancel::timeout::DeadlineCap;
    use tower_mcp_cancel::Cancellation;

    let slow = || {
        service_fn(|_r: McpRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            ok()
        })
    };
    let stack = |limits: ProgressLimits| {
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(7200)))
            .layer(ProgressResetLayer::new(Duration::from_secs(1)).method("tools/call", limits))
            .service(slow())
    };
    // ProgressResetLayer::method at MAX: no limit for that method.
    for max in [Some(Duration::MAX), None] {
        let mut svc = stack(ProgressLimits {
            idle: Duration::MAX,
            max,
        });
        svc.ready()
            .await
            .unwrap()
            .call(McpRequest::new(1, "tools/call"))
            .await
            .expect("no limit for the method");
        // Other methods keep the default idle limit.
        let e = call_err(&mut svc, McpRequest::new(2, "other")).await;
        assert_eq!(elapsed(&e).limit(), Limit::Idle);
    }
    // At ZERO: the call ends at once, idle or at its maximum.
    let t0 = tokio::time::Instant::now();
    let mut svc = stack(ProgressLimits {
        idle: Duration::ZERO,
        max: Some(Duration::MAX),
    });
    let e = call_err(&mut svc, McpRequest::new(3, "tools/call")).await;
    assert_eq!(elapsed(&e), Elapsed::new(Limit::Idle, Duration::ZERO));
    let mut svc = stack(ProgressLimits {
        idle: Duration::MAX,
        max: Some(Duration::ZERO),
    });
    let e = call_err(&mut svc, McpRequest::new(4, "tools/call")).await;
    assert_eq!(elapsed(&e).limit(), Limit::Max);
    assert_eq!(t0.elapsed(), Duration::ZERO);

    // DeadlineCap::after(MAX) is no cap; ZERO is a cap that has passed.
    for with_cancellation in [false, true] {
        let req = |id: i64, cap: Duration| {
            let req = McpRequest::new(id, "tools/call").with_extension(DeadlineCap::after(cap));
            if with_cancellation {
                req.with_extension(Cancellation::new())
            } else {
                req
            }
        };
        assert_eq!(DeadlineCap::after(Duration::MAX).deadline(), None);
        let mut svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::MAX))
            .layer(ProgressResetLayer::new(Duration::MAX).without_max())
            .service(slow());
        svc.ready()
            .await
            .unwrap()
            .call(req(5, Duration::MAX))
            .await
            .expect("no cap");
        let t0 = tokio::time::Instant::now();
        let e = call_err(&mut svc, req(6, Duration::ZERO)).await;
        assert_eq!(elapsed(&e).limit(), Limit::Inherited, "{with_cancellation}");
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
}
