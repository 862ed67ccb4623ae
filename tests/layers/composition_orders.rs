//! Stackings of the timer layers in every order, with literal outcomes: the
//! call ends at the first of the limits in the stack, naming that limit (a tie
//! is named by the innermost), and the handler's future is dropped then; a
//! timeout above bounds the work after a progress layer below answered and a
//! retry below it from the first call. The harness and the model are
//! [`crate::composition`]'s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::composition::Timer::Timeout;
use crate::composition::{
    check, expected, handler, ms, reset, run, timed_out, Ended, Handler, Value, SILENT, STEADY,
};
use tokio::time::Instant;
use tower::retry::{Policy, RetryLayer};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
};

#[tokio::test(start_paused = true)]
async fn a_timeout_over_a_progress_layer_enforces_both() {
    // The timeout is the first limit, under steady progress.
    let timers = [Timeout(ms(2_000)), reset(ms(1_000), None)];
    check(
        &timers,
        STEADY,
        timed_out(ms(2_000), Limit::Timeout, ms(2_000)),
    )
    .await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
    // The maximum below comes first.
    let timers = [Timeout(ms(5_000)), reset(ms(1_000), Some(ms(2_000)))];
    check(&timers, STEADY, timed_out(ms(2_000), Limit::Max, ms(2_000))).await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_progress_layer_over_a_timeout_enforces_both() {
    let timers = [reset(ms(1_000), Some(ms(5_000))), Timeout(ms(2_000))];
    check(
        &timers,
        STEADY,
        timed_out(ms(2_000), Limit::Timeout, ms(2_000)),
    )
    .await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
    let timers = [reset(ms(1_000), Some(ms(2_000))), Timeout(ms(5_000))];
    check(&timers, STEADY, timed_out(ms(2_000), Limit::Max, ms(2_000))).await;
}

#[tokio::test(start_paused = true)]
async fn timeouts_around_a_progress_layer_the_first_fires_whichever_is_inside() {
    // Inner shorter (the stack), outer shorter.
    for timers in [
        [
            Timeout(ms(10_000)),
            reset(ms(60_000), None),
            Timeout(ms(1_000)),
        ],
        [
            Timeout(ms(1_000)),
            reset(ms(60_000), None),
            Timeout(ms(10_000)),
        ],
    ] {
        for h in [STEADY, SILENT] {
            check(&timers, h, timed_out(ms(1_000), Limit::Timeout, ms(1_000))).await;
        }
    }
    // The progress layer's own limits in the middle still count.
    let timers = [
        Timeout(ms(10_000)),
        reset(ms(1_000), Some(ms(3_000))),
        Timeout(ms(5_000)),
    ];
    check(&timers, STEADY, timed_out(ms(3_000), Limit::Max, ms(3_000))).await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
}

/// At a tie the innermost limit is the one named, as with separate timers:
/// the timeout below the progress layer, then the progress layer's own
/// limits over a timeout above it.
#[tokio::test(start_paused = true)]
async fn a_tie_is_named_by_the_innermost_limit() {
    let timers = [
        Timeout(ms(1_000)),
        reset(ms(1_000), None),
        Timeout(ms(1_000)),
    ];
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Timeout, ms(1_000)),
    )
    .await;
    let timers = [Timeout(ms(1_000)), reset(ms(1_000), None)];
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
    let timers = [Timeout(ms(2_000)), reset(ms(5_000), Some(ms(2_000)))];
    check(&timers, STEADY, timed_out(ms(2_000), Limit::Max, ms(2_000))).await;
}

/// A tie between a timeout and the maximum of the progress layer below
/// it is named by that maximum with a second progress layer inside too:
/// the inner layer, whose tap lives elsewhere, does not enforce the
/// deadline the outer one took (it used to, and named the tie by the
/// timeout: a case `random::any_stacking_ends_at_its_first_limit` found).
#[tokio::test(start_paused = true)]
async fn a_tie_over_two_progress_layers_is_named_by_the_innermost_limit() {
    let timers = [
        Timeout(ms(2_250)),
        reset(ms(350), Some(ms(2_250))),
        reset(ms(350), None),
    ];
    let h = Handler {
        every: Some(ms(300)),
        done: ms(2_300),
    };
    check(&timers, h, timed_out(ms(2_250), Limit::Max, ms(2_250))).await;
}

#[tokio::test(start_paused = true)]
async fn two_timeouts_stacked_the_shorter_fires_in_either_order() {
    for timers in [
        [Timeout(ms(1_000)), Timeout(ms(3_000))],
        [Timeout(ms(3_000)), Timeout(ms(1_000))],
    ] {
        for h in [STEADY, SILENT] {
            check(&timers, h, timed_out(ms(1_000), Limit::Timeout, ms(1_000))).await;
        }
    }
}

/// Progress restarts every idle limit of the stack, the outer progress
/// layer's as much as the inner one's (the handler records on the tap it
/// sees, the inner layer's).
#[tokio::test(start_paused = true)]
async fn two_progress_layers_stacked_each_enforces_its_limits() {
    // The inner maximum first; progress keeps both idle limits away.
    let timers = [
        reset(ms(1_000), Some(ms(10_000))),
        reset(ms(2_000), Some(ms(4_000))),
    ];
    check(&timers, STEADY, timed_out(ms(4_000), Limit::Max, ms(4_000))).await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
    // The outer maximum first.
    let timers = [
        reset(ms(2_000), Some(ms(3_000))),
        reset(ms(1_000), Some(ms(10_000))),
    ];
    check(&timers, STEADY, timed_out(ms(3_000), Limit::Max, ms(3_000))).await;
    check(
        &timers,
        SILENT,
        timed_out(ms(1_000), Limit::Idle, ms(1_000)),
    )
    .await;
}

/// With no limit reached, the handler's answer comes through every layer.
#[tokio::test(start_paused = true)]
async fn an_answer_before_every_limit_passes() {
    let h = Handler {
        every: Some(ms(300)),
        done: ms(2_500),
    };
    let timers = [
        Timeout(ms(10_000)),
        reset(ms(1_000), Some(ms(5_000))),
        Timeout(ms(3_000)),
    ];
    let answered = Ended {
        after: ms(2_500),
        elapsed: None,
        dropped_after: Some(ms(2_500)),
        cancelled: false,
    };
    check(&timers, h, answered).await;
}

// ---------- the deadline handed off, after its taker finished ----------

/// A layer between the timeout and the progress layer that does more work
/// after the progress layer's answer (an `and_then`) is still under the
/// timeout: the progress layer that enforced the deadline is done, so the
/// timeout's own timer takes over.
#[tokio::test(start_paused = true)]
async fn a_timeout_bounds_work_after_the_progress_layer_below_answered() {
    let after = DropProbe::default();
    let guards = after.clone();
    let quick = Handler {
        every: Some(ms(300)),
        done: ms(500),
    };
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(ms(1_000)))
        .and_then(move |v: Value| {
            let guard = guards.guard();
            async move {
                let _g = guard;
                tokio::time::sleep(ms(10_000)).await;
                Ok::<_, BoxError>(v)
            }
        })
        .layer(ProgressResetLayer::new(ms(60_000)))
        .service(handler(quick, &DropProbe::default()));
    let start = Instant::now();
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .unwrap_err();
    assert_eq!(Instant::now() - start, ms(1_000));
    assert_eq!(
        err.downcast_ref::<Elapsed>(),
        Some(&Elapsed::new(Limit::Timeout, ms(1_000)))
    );
    assert_eq!(after.dropped_at().map(|at| at - start), Some(ms(1_000)));
    assert!(after.was_cancelled());
}

/// Retries once, after an error, with the request's `Cancellation`.
#[derive(Clone)]
struct RetryOnce(bool);

impl Policy<McpRequest, Value, BoxError> for RetryOnce {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _req: &mut McpRequest,
        result: &mut Result<Value, BoxError>,
    ) -> Option<Self::Future> {
        (result.is_err() && !std::mem::replace(&mut self.0, true)).then(|| std::future::ready(()))
    }

    fn clone_request(&mut self, req: &McpRequest) -> Option<McpRequest> {
        let again = McpRequest::new(1, "tools/call");
        Some(match req.cancellation() {
            Some(c) => again.with_cancellation(c.clone()),
            None => again,
        })
    }
}

/// A retry between the timeout and the progress layer: the second attempt
/// is still under the timeout's deadline, counted from the first call.
#[tokio::test(start_paused = true)]
async fn a_timeout_bounds_a_retry_below_it_from_the_first_call() {
    let probe = DropProbe::default();
    let guards = probe.clone();
    let attempts = Arc::new(AtomicUsize::new(0));
    let seen = attempts.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(ms(2_000)))
        .layer(RetryLayer::new(RetryOnce(false)))
        .layer(ProgressResetLayer::new(ms(60_000)))
        .service(service_fn(move |_r: McpRequest| {
            let first = seen.fetch_add(1, Ordering::Relaxed) == 0;
            let guard = guards.guard();
            async move {
                let _g = guard;
                if first {
                    tokio::time::sleep(ms(1_500)).await;
                    return Err::<Value, BoxError>("first attempt fails".into());
                }
                std::future::pending().await
            }
        }));
    let start = Instant::now();
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await
        .unwrap_err();
    assert_eq!(attempts.load(Ordering::Relaxed), 2);
    assert_eq!(Instant::now() - start, ms(2_000));
    assert_eq!(
        err.downcast_ref::<Elapsed>(),
        Some(&Elapsed::new(Limit::Timeout, ms(2_000)))
    );
    assert_eq!(probe.dropped_at().map(|at| at - start), Some(ms(2_000)));
}

/// The idle twin of the tie above: a silent handler, the outer timeout and
/// the idle limit of the progress layer below it at the same instant, a
/// second progress layer inside: the idle limit (the innermost of the two)
/// is named, whether or not the request has a `Cancellation` of its own.
#[tokio::test(start_paused = true)]
async fn a_tie_with_an_idle_limit_over_two_progress_layers_names_the_idle_limit() {
    let silent = Handler {
        every: None,
        done: ms(800),
    };
    let timers = [Timeout(ms(750)), reset(ms(750), None), reset(ms(850), None)];
    for cancel in [true, false] {
        let ended = run(cancel, &timers, silent).await;
        assert_eq!(
            ended,
            timed_out(ms(750), Limit::Idle, ms(750)),
            "cancel: {cancel}"
        );
        assert_eq!(ended, expected(&timers, silent));
    }
}
