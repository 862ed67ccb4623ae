//! Configuration values: `Duration::MAX` means no deadline and no limit.

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
