//! Stackings of the timer layers: whatever the order of `TimeoutLayer`s and
//! `ProgressResetLayer`s (and a `Buffer` between them, a `Cancellation` in
//! the request or not), the call ends at the first of the limits in the
//! stack, naming that limit, and the handler's future is dropped then.
//!
//! The harness, the model of how a stack ends, and random stackings checked
//! against it; every order with literal outcomes is
//! [`crate::composition_orders`]'s.

use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use tower::buffer::Buffer;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
};

pub(crate) type Value = serde_json::Value;
type Svc = BoxCloneService<McpRequest, Value, BoxError>;

pub(crate) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One layer of a stack under test, outermost first.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Timer {
    /// `TimeoutLayer::new(limit)`.
    Timeout(Duration),
    /// `ProgressResetLayer::new(idle)` with that maximum, or none.
    Progress {
        idle: Duration,
        max: Option<Duration>,
    },
    /// A `tower::buffer::Buffer`: the layers below it are called on its
    /// worker task.
    Buffer,
}

use Timer::{Buffer as Buf, Progress, Timeout};

pub(crate) fn reset(idle: Duration, max: Option<Duration>) -> Timer {
    Progress { idle, max }
}

/// What the handler does: report progress every `every` (if a tap is
/// there), and answer after `done`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handler {
    pub(crate) every: Option<Duration>,
    pub(crate) done: Duration,
}

/// Reports progress every 300 ms, answers after 100 s.
pub(crate) const STEADY: Handler = Handler {
    every: Some(ms(300)),
    done: Duration::from_secs(100),
};
/// Never reports progress, answers after 100 s.
pub(crate) const SILENT: Handler = Handler {
    every: None,
    done: Duration::from_secs(100),
};

/// How a call ended.
#[derive(Debug, PartialEq)]
pub(crate) struct Ended {
    /// When, from the call.
    pub(crate) after: Duration,
    /// The limit the error names (`None`: the handler answered).
    pub(crate) elapsed: Option<Elapsed>,
    /// When the handler's future was dropped, from the call.
    pub(crate) dropped_after: Option<Duration>,
    /// Whether it was dropped before it finished.
    pub(crate) cancelled: bool,
}

pub(crate) fn handler(h: Handler, probe: &DropProbe) -> Svc {
    let probe = probe.clone();
    BoxCloneService::new(service_fn(move |r: McpRequest| {
        let tap = r.progress_tap().cloned();
        let guard = probe.guard();
        async move {
            let start = Instant::now();
            if let (Some(every), Some(tap)) = (h.every, tap) {
                for i in 1u32.. {
                    let at = start + every * i;
                    if at >= start + h.done {
                        break;
                    }
                    sleep_until(at).await;
                    tap.record(f64::from(i), None, None);
                }
            }
            sleep_until(start + h.done).await;
            guard.finish();
            Ok::<_, BoxError>(serde_json::json!({"done": true}))
        }
    }))
}

fn stack(cancel: bool, timers: &[Timer], inner: Svc) -> Svc {
    let mut svc = inner;
    for t in timers.iter().rev() {
        svc = match *t {
            Timeout(limit) => BoxCloneService::new(TimeoutLayer::new(limit).layer(svc)),
            Progress { idle, max } => {
                let layer = ProgressResetLayer::new(idle);
                let layer = match max {
                    Some(max) => layer.max(max),
                    None => layer.without_max(),
                };
                BoxCloneService::new(layer.layer(svc))
            }
            Buf => BoxCloneService::new(Buffer::new(svc, 8)),
        };
    }
    if cancel {
        svc = BoxCloneService::new(CancelOnDisconnectLayer::new().layer(svc));
    }
    svc
}

/// Calls the stack once (with a `CancelOnDisconnectLayer` on top when
/// `cancel`) and reports how the call ended. Needs a paused clock.
pub(crate) async fn run(cancel: bool, timers: &[Timer], h: Handler) -> Ended {
    let probe = DropProbe::default();
    let mut svc = stack(cancel, timers, handler(h, &probe));
    let start = Instant::now();
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call"))
        .await;
    let after = Instant::now() - start;
    // A buffer's worker may still hold what it was handed.
    settle().await;
    let elapsed = res.err().map(|e| {
        *e.downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("not Elapsed: {e}"))
    });
    Ended {
        after,
        elapsed,
        dropped_after: probe.dropped_at().map(|at| at - start),
        cancelled: probe.was_cancelled(),
    }
}

/// A call that ends at `after` by `limit` set to `limit_after`, the handler
/// dropped unfinished at that moment.
pub(crate) fn timed_out(after: Duration, limit: Limit, limit_after: Duration) -> Ended {
    Ended {
        after,
        elapsed: Some(Elapsed::new(limit, limit_after)),
        dropped_after: Some(after),
        cancelled: true,
    }
}

/// The stack: a 1 s timeout below a progress layer (no maximum),
/// with a 10 s timeout above both, and a handler reporting progress every
/// 300 ms. The inner 1 s is the first limit: the call ends there.
#[tokio::test(start_paused = true)]
async fn a_timeout_below_a_progress_layer_holds_under_a_longer_timeout_above() {
    let timers = [
        Timeout(ms(10_000)),
        reset(ms(60_000), None),
        Timeout(ms(1_000)),
    ];
    for cancel in [true, false] {
        assert_eq!(
            run(cancel, &timers, STEADY).await,
            timed_out(ms(1_000), Limit::Timeout, ms(1_000)),
            "cancel: {cancel}"
        );
    }
}

/// `timers` as given, and with a `Buffer` in each place between (and
/// around) its layers.
fn with_buffers(timers: &[Timer]) -> Vec<Vec<Timer>> {
    let mut all = vec![timers.to_vec()];
    for at in 0..=timers.len() {
        let mut t = timers.to_vec();
        t.insert(at, Buf);
        all.push(t);
    }
    all
}

/// Runs `timers` with and without a `CancelOnDisconnectLayer` on top, and
/// with a `Buffer` in each place: every variant must end as `expected`.
pub(crate) async fn check(timers: &[Timer], h: Handler, expected: Ended) {
    for stack in with_buffers(timers) {
        for cancel in [true, false] {
            assert_eq!(
                run(cancel, &stack, h).await,
                expected,
                "{stack:?}, cancel: {cancel}, {h:?}"
            );
        }
    }
}

// ---------- random stackings ----------

/// The outcome the rules give: the call ends at the first deadline of the
/// stack (progress restarting every idle clock), or with the handler's
/// answer if that comes first (an answer wins a tie). At a tie between
/// limits the innermost layer's is named, and of one progress layer's two,
/// the maximum.
pub(crate) fn expected(timers: &[Timer], h: Handler) -> Ended {
    let has_tap = timers.iter().any(|t| matches!(t, Progress { .. }));
    // The idle deadline of `idle` under the handler's progress: the first
    // gap between reports (or after the last) longer than `idle`.
    let idle_deadline = |idle: Duration| match h.every.filter(|_| has_tap) {
        Some(every) if idle >= every => {
            let reports = (h.done.as_nanos() - 1) / every.as_nanos();
            every * u32::try_from(reports).unwrap() + idle
        }
        _ => idle,
    };
    // (deadline, innermost first, maximum before idle, what it names)
    let mut firsts: Vec<(Duration, std::cmp::Reverse<usize>, u8, Elapsed)> = Vec::new();
    for (depth, t) in timers.iter().enumerate() {
        let depth = std::cmp::Reverse(depth);
        match *t {
            Timeout(limit) => firsts.push((limit, depth, 0, Elapsed::new(Limit::Timeout, limit))),
            Progress { idle, max } => {
                if let Some(max) = max {
                    firsts.push((max, depth, 0, Elapsed::new(Limit::Max, max)));
                }
                firsts.push((
                    idle_deadline(idle),
                    depth,
                    1,
                    Elapsed::new(Limit::Idle, idle),
                ));
            }
            Buf => {}
        }
    }
    match firsts
        .into_iter()
        .min_by_key(|&(at, depth, rank, _)| (at, depth, rank))
    {
        Some((at, _, _, elapsed)) if at < h.done => timed_out(at, elapsed.limit(), elapsed.after()),
        _ => Ended {
            after: h.done,
            elapsed: None,
            dropped_after: Some(h.done),
            cancelled: false,
        },
    }
}

mod random {
    use proptest::prelude::*;

    use super::*;

    /// Limits off the 100 ms grid of the reports (every 300 ms) and of the
    /// answer, so that no limit ties with either; limits may tie with each
    /// other.
    fn limit() -> impl Strategy<Value = Duration> {
        (0u64..30).prop_map(|k| ms(150 + 100 * k))
    }

    fn timer() -> impl Strategy<Value = Timer> {
        prop_oneof![
            limit().prop_map(Timeout),
            (limit(), proptest::option::of(limit())).prop_map(|(idle, max)| reset(idle, max)),
        ]
    }

    /// 1–4 timer layers, maybe a `Buffer` somewhere among them.
    fn timers() -> impl Strategy<Value = Vec<Timer>> {
        (
            proptest::collection::vec(timer(), 1..=4),
            proptest::option::of(0usize..=4),
        )
            .prop_map(|(mut timers, buffer)| {
                if let Some(at) = buffer {
                    timers.insert(at.min(timers.len()), Buf);
                }
                timers
            })
    }

    fn handler() -> impl Strategy<Value = Handler> {
        (any::<bool>(), 0u64..40).prop_map(|(steady, done)| Handler {
            every: steady.then_some(ms(300)),
            done: ms(100 + 100 * done),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Any stacking ends at its first limit, naming it, with the
        /// handler dropped then.
        #[test]
        fn any_stacking_ends_at_its_first_limit(
            timers in timers(),
            cancel in any::<bool>(),
            h in handler(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap();
            let ended = rt.block_on(run(cancel, &timers, h));
            prop_assert_eq!(ended, expected(&timers, h), "{:?}, cancel: {}, {:?}", timers, cancel, h);
        }
    }
}
