//! Interleavings (issue 7, item 1): proptest generates random schedules of
//! requests, client cancels, handler responses, timer expiry (a paused clock
//! moved by hand), progress (increasing or not), disconnects and transport
//! close, and runs each against
//!
//! * (a) the three layers (`CancelOnDisconnectLayer` + `TimeoutLayer` +
//!   `ProgressResetLayer`) around a handler the schedule controls, with this
//!   file acting as the transport (an `InFlight` registry, `Cancellation`s);
//! * (b) the stdio server driver and `StdioClient` over in-memory pipes, the
//!   server's output recorded line by line on its way to the client.
//!
//! A model of the schedule predicts every outcome; after each step the
//! observed state is compared with it, and on every schedule:
//!
//! * each request ends in exactly one outcome (response, error, or
//!   cancelled without a response), the one the model predicts;
//! * nothing is written for a request after its cancel was processed;
//! * no progress is accepted, nor sent, after a request ended;
//! * at the end the in-flight registries (`InFlight`, `StdioClient`) are
//!   empty, every progress tap is closed and every handler future dropped;
//! * a response that arrives after the client gave up is dropped by it.
//!
//! Each case runs on its own current-thread runtime with a paused clock;
//! "settling" is a bounded number of yields, never a sleep.
//!
//! Here are the properties: the checks after each step and at the end, and
//! the tests that run the schedules. The model, the operations and their
//! strategies are [`model`]'s; running a schedule step by step is
//! [`layers`]' for (a) and [`stdio`]'s for (b).
#![cfg(all(feature = "test-util", feature = "stdio"))]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use tower_mcp_cancel::CancelReason;

mod layers;
mod model;
mod stdio;

use layers::*;
use model::*;
use stdio::*;

fn check_layers(reqs: &[LReq], outcomes: &Outcomes) -> Result<(), TestCaseError> {
    let outcomes = outcomes.lock().unwrap();
    for r in reqs {
        let seen = outcomes.get(&r.n).map(Vec::as_slice).unwrap_or(&[]);
        prop_assert!(seen.len() <= 1, "request {} ended twice: {:?}", r.n, seen);
        let Some(run) = &r.run else { continue };
        match &r.expect {
            None => {
                prop_assert!(seen.is_empty(), "request {} ended early: {:?}", r.n, seen);
                prop_assert!(!run.probe.is_dropped(), "handler {} dropped early", r.n);
                prop_assert!(!run.cancellation.is_finished(), "request {} settled", r.n);
            }
            Some(e) => {
                prop_assert!(
                    matches(e, seen.first(), r.n),
                    "request {}: expected {:?}, saw {:?}",
                    r.n,
                    e,
                    seen
                );
                // However it ended, the handler future is gone.
                prop_assert!(run.probe.is_dropped(), "handler {} still alive", r.n);
                let answered = matches!(e, Expect::Response | Expect::HandlerError);
                prop_assert_eq!(run.probe.was_cancelled(), !answered, "probe {}", r.n);
                prop_assert_eq!(run.cancellation.is_cancelled(), !answered, "token {}", r.n);
                match (e, run.cancellation.reason()) {
                    (Expect::Dropped, Some(reason)) => {
                        prop_assert_eq!(reason, &CancelReason::ClientDisconnected)
                    }
                    (Expect::Elapsed(_), Some(reason)) => {
                        prop_assert!(matches!(reason, CancelReason::Timeout(_)), "{reason:?}")
                    }
                    (Expect::Cancelled, Some(reason)) => prop_assert!(
                        matches!(
                            reason,
                            CancelReason::Peer(_) | CancelReason::TransportClosed
                        ),
                        "{reason:?}"
                    ),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// How many schedules of each kind run (in CI, in debug, on 2 cores: the
/// whole file stays under a minute).
const LAYER_CASES: u32 = 7000;
const STDIO_CASES: u32 = 3500;

fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        max_shrink_iters: 4000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

/// Counts of how requests ended over all layer schedules, to show every
/// path ran.
static ENDINGS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

fn count_ending(e: &Expect) {
    let key = match e {
        Expect::Elapsed(ls) => format!("Elapsed({:?})", ls[0]),
        other => format!("{other:?}"),
    };
    let mut v = ENDINGS.lock().unwrap();
    match v.iter_mut().find(|(k, _)| *k == key) {
        Some((_, n)) => *n += 1,
        None => v.push((key, 1)),
    }
}

/// Steady progress keeps a request past its idle limit, never past its
/// hard maximum.
#[test]
fn hard_maximum_holds_under_steady_progress() {
    use LayerOp::*;
    let mut ops = vec![Request { id: 0, timeout: 0 }];
    for _ in 0..3 {
        ops.push(Advance { ms: 150 });
        ops.push(Progress {
            slot: 1,
            increasing: true,
        });
    }
    run_layer_schedule(ops).unwrap();
}

#[test]
fn layer_schedules() {
    runner(LAYER_CASES)
        .run(
            &prop::collection::vec(layer_op(), 1..40),
            run_layer_schedule,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let endings = ENDINGS.lock().unwrap();
    eprintln!("layer schedules: {LAYER_CASES}, request endings: {endings:?}");
    for key in [
        "Response",
        "HandlerError",
        "Elapsed(Timeout)",
        "Elapsed(Idle)",
        "Elapsed(Max)",
        "Cancelled",
        "Dropped",
        "Refused",
    ] {
        assert!(
            endings.iter().any(|(k, n)| k == key && *n > 0),
            "no request ended as {key}: {endings:?}"
        );
    }
}

/// Statistics over all stdio schedules, to show the interesting cases ran.
#[derive(Default, Debug)]
struct Stats {
    late_responses: usize,
    raw_cancels_hit: usize,
    progress_after_end: usize,
}

static STATS: Mutex<Stats> = Mutex::new(Stats {
    late_responses: 0,
    raw_cancels_hit: 0,
    progress_after_end: 0,
});

impl Stdio {
    /// Compares what happened with the model.
    fn check(&mut self) -> Result<(), TestCaseError> {
        let wire_len = self.wire.lock().unwrap().len();
        for r in &mut self.reqs {
            if r.server != ServerSide::Active
                && r.server != ServerSide::Never
                && r.end_mark.is_none()
            {
                r.end_mark = Some(wire_len);
            }
        }
        let outcomes = self.outcomes.lock().unwrap();
        let calls = self.calls.lock().unwrap();
        let taps = self.taps.lock().unwrap();
        let wire = self.wire.lock().unwrap();
        // Who each progress token belongs to.
        let by_token: HashMap<_, u64> = calls
            .iter()
            .filter_map(|(n, c)| c.token.clone().map(|t| (t, *n)))
            .collect();
        let mut responses: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut progress: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, v) in wire.iter().enumerate() {
            if v.get("method") == Some(&json!("notifications/progress")) {
                let token = serde_json::from_value(v["params"]["progressToken"].clone())
                    .map_err(|e| TestCaseError::fail(format!("token: {e}")))?;
                let n = by_token
                    .get(&token)
                    .ok_or_else(|| TestCaseError::fail(format!("progress for no call: {v}")))?;
                progress.entry(*n).or_default().push(i);
            } else if v.get("id").is_some() && v.get("method").is_none() {
                let n = v["result"]["n"]
                    .as_u64()
                    .or_else(|| v["error"]["data"]["n"].as_u64())
                    .ok_or_else(|| TestCaseError::fail(format!("unexpected answer: {v}")))?;
                responses.entry(n).or_default().push(i);
            } else {
                return Err(TestCaseError::fail(format!("unexpected line: {v}")));
            }
        }
        let mut server_active = 0;
        let mut client_pending = 0;
        for r in &self.reqs {
            let seen = outcomes.get(&r.n).map(Vec::as_slice).unwrap_or(&[]);
            prop_assert!(seen.len() <= 1, "call {} ended twice: {:?}", r.n, seen);
            match &r.expect {
                None => {
                    client_pending += 1;
                    prop_assert!(seen.is_empty(), "call {} ended early: {:?}", r.n, seen);
                }
                Some(e) => prop_assert!(
                    matches(e, seen.first(), r.n),
                    "call {}: expected {:?}, saw {:?}",
                    r.n,
                    e,
                    seen
                ),
            }
            if let Some(tap) = taps.get(&r.n) {
                prop_assert_eq!(tap.is_closed(), !r.client_active(), "client tap {}", r.n);
                if r.client_active() {
                    prop_assert_eq!(tap.last(), r.last, "progress seen by call {}", r.n);
                }
            }
            let answers = responses.get(&r.n).map(Vec::len).unwrap_or(0);
            let call = calls.get(&r.n);
            match r.server {
                ServerSide::Never => {
                    prop_assert!(call.is_none(), "refused call {} reached the server", r.n);
                    prop_assert_eq!(answers, 0);
                }
                ServerSide::Active => {
                    server_active += 1;
                    let call = call.ok_or_else(|| {
                        TestCaseError::fail(format!("call {} never reached the server", r.n))
                    })?;
                    if let Some(tap) = &call.tap {
                        prop_assert!(!tap.is_closed(), "server tap {} closed early", r.n);
                    }
                    prop_assert!(!call.probe.is_dropped(), "handler {} dropped early", r.n);
                    prop_assert_eq!(answers, 0);
                }
                ServerSide::Answered => {
                    prop_assert_eq!(answers, 1, "answers written for call {}", r.n);
                    let call = call.unwrap();
                    prop_assert!(call.probe.is_finished());
                }
                ServerSide::Cancelled => {
                    prop_assert_eq!(answers, 0, "answer written for cancelled call {}", r.n);
                    if let Some(call) = call {
                        prop_assert!(call.probe.was_cancelled(), "handler {} not dropped", r.n);
                        let c = call.ctx.cancellation().unwrap();
                        prop_assert!(
                            matches!(
                                c.reason(),
                                Some(CancelReason::Peer(_) | CancelReason::TransportClosed)
                            ),
                            "call {} cancelled with {:?}",
                            r.n,
                            c.reason()
                        );
                    }
                }
            }
            if let Some(mark) = r.end_mark {
                let after = progress
                    .get(&r.n)
                    .map(|v| v.iter().filter(|&&i| i >= mark).count())
                    .unwrap_or(0);
                prop_assert_eq!(after, 0, "progress written for call {} after it ended", r.n);
            }
        }
        if !self.closed {
            prop_assert_eq!(
                self.registry.len(),
                server_active,
                "server in-flight registry"
            );
            prop_assert_eq!(self.client.in_flight(), client_pending, "client pending");
        }
        Ok(())
    }

    /// Ends the schedule: answers what the server still runs, lets every
    /// client limit fire, checks that nothing is left in flight, closes.
    /// Returns how many late responses the client saw (and ignored).
    async fn finish(mut self) -> Result<usize, TestCaseError> {
        if !self.closed {
            for k in 0..self.reqs.len() {
                self.op(StdioOp::Respond { slot: k, ok: true }).await?;
            }
            self.op(StdioOp::Advance { ms: 2 * TIMEOUT_MS }).await?;
            prop_assert!(
                self.registry.is_empty(),
                "server registry: {}",
                self.registry.len()
            );
            prop_assert_eq!(self.client.in_flight(), 0, "client pending");
            self.op(StdioOp::Close).await?;
        }
        let served = tokio::time::timeout(Duration::from_secs(3600), &mut self.served)
            .await
            .map_err(|_| TestCaseError::fail("serve did not return after close"))?;
        prop_assert!(matches!(served, Ok(Ok(()))), "serve: {served:?}");
        prop_assert!(self.registry.is_empty());
        prop_assert_eq!(self.client.in_flight(), 0);
        for r in &mut self.reqs {
            if let Some(j) = r.join.as_mut() {
                let _ = j.await;
            }
        }
        self.check()?;
        for (n, tap) in self.taps.lock().unwrap().iter() {
            prop_assert!(tap.is_closed(), "client tap {} open", n);
        }
        for (n, c) in self.calls.lock().unwrap().iter() {
            prop_assert!(c.probe.is_dropped(), "handler {} alive", n);
            prop_assert_eq!(c.tap.is_some(), self.server_tap);
            if let Some(tap) = &c.tap {
                prop_assert!(tap.is_closed(), "server tap {} open", n);
            }
        }
        let late = self.reqs.iter().filter(|r| r.late).count();
        STATS.lock().unwrap().late_responses += late;
        Ok(late)
    }
}

fn run_stdio_schedule(server_tap: bool, ops: Vec<StdioOp>) -> Result<usize, TestCaseError> {
    runtime().block_on(async move {
        let mut h = Stdio::start(server_tap);
        for op in ops {
            h.op(op).await?;
        }
        h.finish().await
    })
}

#[test]
fn stdio_schedules() {
    runner(STDIO_CASES)
        .run(
            &(any::<bool>(), prop::collection::vec(stdio_op(), 1..30)),
            |(server_tap, ops)| run_stdio_schedule(server_tap, ops).map(drop),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let s = STATS.lock().unwrap();
    eprintln!("stdio schedules: {STDIO_CASES}, {s:?}");
    assert!(s.late_responses > 0 && s.raw_cancels_hit > 0 && s.progress_after_end > 0);
}

/// The late-response path runs deterministically: the handler's answer
/// reaches a client that already dropped the call, which ignores it; the
/// connection keeps working for the next call with another id.
#[test]
fn late_response_is_dropped_by_the_client() {
    use StdioOp::*;
    for server_tap in [false, true] {
        let late = run_stdio_schedule(
            server_tap,
            vec![
                Request { id: 1, timeout: 0 },
                LateResponse { slot: 0 },
                Request { id: 2, timeout: 0 },
                Respond { slot: 1, ok: true },
            ],
        )
        .unwrap();
        assert_eq!(late, 1);
    }
}
