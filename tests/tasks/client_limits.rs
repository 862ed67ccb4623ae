//! The task client's settings at their extremes, and the retry count:
//! no setting and no number from the peer panics or overflows.

use std::time::Duration;

use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::TaskCallLayer;

use crate::mock::{call, completed, created, rpc_error, with, Mock};

/// A task answered by `gets` then completed, through `layer`: the times of
/// its polls.
async fn poll_times(
    layer: TaskCallLayer,
    seed: serde_json::Value,
    failures: usize,
) -> Vec<Duration> {
    let mock = Mock::new();
    mock.then("tools/call", Ok(seed));
    for _ in 0..failures {
        mock.then("tasks/get", Err(rpc_error(ErrorObject::INTERNAL_ERROR)));
    }
    mock.then("tasks/get", Ok(completed("t1")));
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(mock.service());
    let out = client.oneshot(call()).await.unwrap();
    assert_eq!(out["content"][0]["text"], "done");
    layer.cancels_sent().await;
    mock.calls("tasks/get").iter().map(|s| s.at).collect()
}

#[tokio::test(start_paused = true)]
async fn poll_bounds_at_their_extremes() {
    let ms = Duration::from_millis;
    let cases = [
        ((Duration::ZERO, Duration::ZERO), Duration::ZERO),
        ((ms(300), ms(300)), ms(300)),
        // Inverted bounds are swapped: 100 ms is within 50 ms – 1 s.
        ((Duration::from_secs(1), ms(50)), ms(100)),
        ((Duration::MAX, Duration::ZERO), ms(100)),
    ];
    for ((min, max), first) in cases {
        let layer = TaskCallLayer::new().poll_bounds(min, max);
        let times = poll_times(layer, created("t1"), 0).await;
        assert_eq!(times, [first], "{min:?}..{max:?}");
    }
    // The whole range: the server's interval as it is, huge ones included.
    for interval in [json!(0), json!(100), json!(u64::MAX), json!(1e300)] {
        let layer = TaskCallLayer::new().poll_bounds(Duration::ZERO, Duration::MAX);
        let seed = with(created("t1"), json!({ "pollIntervalMs": interval }));
        let start = tokio::time::Instant::now();
        let times = poll_times(layer, seed, 0).await;
        assert_eq!(times.len(), 1, "{interval}");
        assert!(start.elapsed() >= times[0], "{interval}");
    }
    // Duration::MAX both ways: a sleep the clock cannot overflow.
    let layer = TaskCallLayer::new().poll_bounds(Duration::MAX, Duration::MAX);
    let times = poll_times(layer, created("t1"), 1).await;
    assert_eq!(times.len(), 2);
    assert!(times[1] > times[0]);
}

#[tokio::test(start_paused = true)]
async fn poll_retries_counts_failures_in_a_row() {
    let ms = Duration::from_millis;
    // Two failures, two retries: polled at 100, then 100 + 200, + 400.
    let layer = TaskCallLayer::new().poll_retries(2);
    let times = poll_times(layer, created("t1"), 2).await;
    assert_eq!(times, [ms(100), ms(300), ms(700)]);
    // The backoff is capped at the upper poll bound.
    let layer = TaskCallLayer::new()
        .poll_retries(4)
        .poll_bounds(ms(50), ms(500));
    let times = poll_times(layer, created("t1"), 4).await;
    assert_eq!(times, [ms(100), ms(300), ms(700), ms(1200), ms(1700)]);
    // No count overflows: 40 failures (2^40 times the interval, capped).
    let layer = TaskCallLayer::new().poll_retries(u32::MAX);
    let times = poll_times(layer, created("t1"), 40).await;
    assert_eq!(times.len(), 41);
    assert_eq!(times[40] - times[39], Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn retries_run_out_and_the_task_is_cancelled() {
    for retries in [0, 1, 3] {
        let mock = Mock::new();
        mock.then("tools/call", Ok(created("t1")));
        for _ in 0..=retries {
            mock.then("tasks/get", Err(rpc_error(ErrorObject::INTERNAL_ERROR)));
        }
        let layer = TaskCallLayer::new().poll_retries(retries);
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mock.service());
        let err = client.oneshot(call()).await.unwrap_err();
        let e = err.downcast_ref::<ErrorObject>().expect("the last failure");
        assert_eq!(e.code, ErrorObject::INTERNAL_ERROR);
        layer.cancels_sent().await;
        assert_eq!(mock.calls("tasks/get").len(), retries as usize + 1);
        assert_eq!(mock.calls("tasks/cancel").len(), 1, "given up: cancelled");
    }
    // An answer in between starts the count again.
    let mock = Mock::new();
    mock.then("tools/call", Ok(created("t1")));
    for _ in 0..3 {
        mock.then("tasks/get", Err(rpc_error(ErrorObject::INTERNAL_ERROR)))
            .then(
                "tasks/get",
                Ok(crate::mock::got("t1", "working", json!({}))),
            );
    }
    mock.then("tasks/get", Ok(completed("t1")));
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new().poll_retries(1))
        .service(mock.service());
    client.oneshot(call()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn cancel_timeout_at_its_extremes() {
    for timeout in [Duration::ZERO, Duration::from_millis(1), Duration::MAX] {
        let mock = Mock::new();
        mock.then("tools/call", Ok(created("t1")));
        let layer = TaskCallLayer::new().cancel_timeout(timeout);
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mock.service());
        // Dropped while it waits for its first poll.
        let call = client.oneshot(call());
        assert!(tokio::time::timeout(Duration::from_millis(10), call)
            .await
            .is_err());
        layer.cancels_sent().await;
        // The scripted transport answers at once: even a zero timeout lets
        // it through (the request is polled before the timer).
        assert_eq!(mock.calls("tasks/cancel").len(), 1, "{timeout:?}");
    }
}
