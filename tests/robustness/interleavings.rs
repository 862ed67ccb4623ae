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
#![cfg(all(feature = "test-util", feature = "stdio"))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::{DropGuard, DropProbe};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Cancelled, Elapsed, Limit, McpRequest,
    ProgressResetLayer, ProgressTap, RequestTimeout, TimeoutLayer,
};

// ---------------------------------------------------------------- shared --

/// The default deadline of `TimeoutLayer`, and the per-request overrides a
/// schedule may pick (index 0 = the default).
const TIMEOUT_MS: u64 = 1000;
const TIMEOUT_CHOICES: [u64; 3] = [TIMEOUT_MS, 250, 450];
/// `ProgressResetLayer`: idle limit and hard maximum.
const IDLE_MS: u64 = 300;
const MAX_MS: u64 = 400;

/// Request ids a schedule draws from: `"1"` and `1` differ, `0` is an id.
fn ids() -> [RequestId; 6] {
    [
        RequestId::from(0),
        RequestId::from(1),
        RequestId::from("1"),
        RequestId::from("a"),
        RequestId::from(2),
        RequestId::from(-7),
    ]
}

/// Ids that may be cancelled: the above, and some nobody ever sends.
fn cancel_ids() -> [RequestId; 8] {
    let [a, b, c, d, e, f] = ids();
    [a, b, c, d, e, f, RequestId::from(99), RequestId::from("0")]
}

/// Lets every task that can run, run, without moving the clock: `rounds`
/// yields, fewer than `test_util::settle`'s in these hot loops whose tasks
/// need few.
async fn settle(rounds: usize) {
    for _ in 0..rounds {
        tokio::task::yield_now().await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// Milliseconds since the case started, on the paused clock.
fn now_ms(t0: tokio::time::Instant) -> u64 {
    (tokio::time::Instant::now() - t0).as_millis() as u64
}

/// How a request ended, as observed.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// A result (carrying the request's number).
    Response(u64),
    /// The handler's own error.
    HandlerError,
    /// A limit fired.
    Elapsed(Limit),
    /// Cancelled (no response is written).
    Cancelled,
    /// Refused before it ran (duplicate id).
    Refused,
    /// The connection closed under it (stdio client).
    Closed,
}

fn classify(out: &Result<Value, BoxError>) -> Seen {
    match out {
        Ok(v) => Seen::Response(v["n"].as_u64().unwrap_or(u64::MAX)),
        Err(e) if e.is::<Elapsed>() => Seen::Elapsed(e.downcast_ref::<Elapsed>().unwrap().limit()),
        Err(e) if e.is::<Cancelled>() => Seen::Cancelled,
        Err(e) if e.is::<std::io::Error>() => Seen::Closed,
        Err(e) => match e.downcast_ref::<ErrorObject>() {
            Some(o) if o.code == ErrorObject::INVALID_REQUEST => Seen::Refused,
            Some(_) => Seen::HandlerError,
            None => panic!("unexpected error type: {e}"),
        },
    }
}

/// The limit that fires first for a request, given its deadlines, if any is
/// due by `now`; on a tie, every limit due at that instant is acceptable.
fn due(now: u64, timeout_at: u64, idle_at: u64, max_at: u64) -> Option<(u64, Vec<Limit>)> {
    let first = timeout_at.min(idle_at).min(max_at);
    if first > now {
        return None;
    }
    let mut limits = Vec::new();
    if max_at == first {
        limits.push(Limit::Max);
    }
    if idle_at == first {
        limits.push(Limit::Idle);
    }
    if timeout_at == first {
        limits.push(Limit::Timeout);
    }
    Some((first, limits))
}

/// What the model expects of a request that ended.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Response,
    HandlerError,
    /// One of these limits (more than one on a tie).
    Elapsed(Vec<Limit>),
    /// Cancelled by the transport (peer cancel, close): nothing written.
    Cancelled,
    /// The response future was dropped (disconnect, or the client gave up).
    Dropped,
    Refused,
    Closed,
}

fn matches(expect: &Expect, seen: Option<&Seen>, n: u64) -> bool {
    match (expect, seen) {
        (Expect::Response, Some(Seen::Response(m))) => *m == n,
        (Expect::HandlerError, Some(Seen::HandlerError)) => true,
        (Expect::Elapsed(ls), Some(Seen::Elapsed(l))) => ls.contains(l),
        (Expect::Cancelled, Some(Seen::Cancelled)) => true,
        (Expect::Dropped, None) => true,
        (Expect::Refused, Some(Seen::Refused)) => true,
        (Expect::Closed, Some(Seen::Closed)) => true,
        _ => false,
    }
}

// ------------------------------------------------------------ (a) layers --

#[derive(Clone, Debug)]
enum LayerOp {
    /// A request with id `ids()[id]` and deadline `TIMEOUT_CHOICES[timeout]`.
    Request { id: usize, timeout: usize },
    /// The peer's `notifications/cancelled` for `cancel_ids()[id]`.
    Cancel { id: usize },
    /// The handler of request `slot` (modulo the requests so far) answers.
    Respond { slot: usize, ok: bool },
    /// The handler of request `slot` reports progress.
    Progress { slot: usize, increasing: bool },
    /// The paused clock moves on.
    Advance { ms: u64 },
    /// The response future of request `slot` is dropped (client went away).
    Disconnect { slot: usize },
    /// The transport closes: every in-flight request is cancelled.
    Close,
}

fn advance_ms() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![
        1u64, 50, 100, 150, 249, 250, 299, 300, 301, 450, 700, 1000,
    ])
}

fn layer_op() -> impl Strategy<Value = LayerOp> {
    prop_oneof![
        6 => (0..ids().len(), 0..TIMEOUT_CHOICES.len())
            .prop_map(|(id, timeout)| LayerOp::Request { id, timeout }),
        3 => (0..cancel_ids().len()).prop_map(|id| LayerOp::Cancel { id }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(slot, ok)| LayerOp::Respond { slot, ok }),
        4 => (any::<usize>(), any::<bool>())
            .prop_map(|(slot, increasing)| LayerOp::Progress { slot, increasing }),
        4 => advance_ms().prop_map(|ms| LayerOp::Advance { ms }),
        2 => any::<usize>().prop_map(|slot| LayerOp::Disconnect { slot }),
        1 => Just(LayerOp::Close),
    ]
}

/// What the handler of one request hands to the schedule.
struct Handle {
    respond: oneshot::Sender<Result<Value, BoxError>>,
    tap: ProgressTap,
}

type Handles = Arc<Mutex<HashMap<u64, Handle>>>;
type Outcomes = Arc<Mutex<HashMap<u64, Vec<Seen>>>>;

/// One request of a layer schedule, as the model sees it.
struct LReq {
    n: u64,
    id: RequestId,
    timeout_at: u64,
    idle_at: u64,
    max_at: u64,
    last: Option<f64>,
    /// `None` while in flight.
    expect: Option<Expect>,
    /// Absent for a refused request.
    run: Option<Running>,
}

struct Running {
    join: JoinHandle<()>,
    probe: DropProbe,
    cancellation: Cancellation,
    tap: ProgressTap,
    respond: Option<oneshot::Sender<Result<Value, BoxError>>>,
}

/// The handler: parks until the schedule answers it, holding a drop probe;
/// it never looks at its token.
fn layer_handler(
    handles: Handles,
    guards: Arc<Mutex<HashMap<u64, DropGuard>>>,
) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send> + Clone {
    service_fn(move |req: McpRequest| {
        let n: u64 = req.params_as::<Value>().unwrap()["n"].as_u64().unwrap();
        let tap = req
            .progress_tap()
            .expect("ProgressResetLayer set a tap")
            .clone();
        let (tx, rx) = oneshot::channel();
        handles
            .lock()
            .unwrap()
            .insert(n, Handle { respond: tx, tap });
        let guard = guards.lock().unwrap().remove(&n).unwrap();
        async move {
            let out = rx.await.unwrap_or_else(|_| Ok(json!({"n": n})));
            guard.finish();
            drop(guard);
            out
        }
    })
}

/// The request a slot names: three times in four one still in flight (if
/// any), otherwise any request so far (ended ones included).
fn pick<T>(reqs: &[T], slot: usize, active: impl Fn(&T) -> bool) -> Option<usize> {
    if reqs.is_empty() {
        return None;
    }
    let live: Vec<usize> = (0..reqs.len()).filter(|&k| active(&reqs[k])).collect();
    if slot % 4 != 0 && !live.is_empty() {
        Some(live[(slot / 4) % live.len()])
    } else {
        Some(slot % reqs.len())
    }
}

fn run_layer_schedule(ops: Vec<LayerOp>) -> Result<(), TestCaseError> {
    runtime().block_on(layer_schedule(ops))
}

async fn layer_schedule(ops: Vec<LayerOp>) -> Result<(), TestCaseError> {
    const SETTLE: usize = 16;
    let t0 = tokio::time::Instant::now();
    let handles: Handles = Arc::default();
    let guards: Arc<Mutex<HashMap<u64, DropGuard>>> = Arc::default();
    let outcomes: Outcomes = Arc::default();
    let svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_millis(TIMEOUT_MS)))
        .layer(
            ProgressResetLayer::new(Duration::from_millis(IDLE_MS))
                .max(Duration::from_millis(MAX_MS)),
        )
        .service(layer_handler(handles.clone(), guards.clone()));
    let in_flight = InFlight::new();
    let mut reqs: Vec<LReq> = Vec::new();
    let mut closed = false;

    let mut ops = ops;
    ops.push(LayerOp::Close);
    for op in ops {
        let now = now_ms(t0);
        match op {
            LayerOp::Request { id, timeout } => {
                if closed {
                    continue;
                }
                let id = ids()[id].clone();
                let n = reqs.len() as u64;
                let guard = match in_flight.register(id.clone(), None) {
                    Some(g) => g,
                    None => {
                        // A transport answers a duplicate in-flight id with an
                        // error and never runs it.
                        prop_assert!(
                            reqs.iter().any(|r| r.id == id && r.expect.is_none()),
                            "registry refused {id} which the model has not in flight"
                        );
                        reqs.push(LReq {
                            n,
                            id,
                            timeout_at: 0,
                            idle_at: 0,
                            max_at: 0,
                            last: None,
                            expect: Some(Expect::Refused),
                            run: None,
                        });
                        outcomes.lock().unwrap().insert(n, vec![Seen::Refused]);
                        continue;
                    }
                };
                prop_assert!(
                    !reqs.iter().any(|r| r.id == id && r.expect.is_none()),
                    "registry accepted {id} while it is in flight"
                );
                let cancellation = guard.cancellation().clone();
                let limit = TIMEOUT_CHOICES[timeout];
                let mut req = McpRequest::new(id.clone(), "tools/call")
                    .with_params(json!({"n": n}))
                    .with_cancellation(cancellation.clone());
                if timeout != 0 {
                    req = req.with_extension(RequestTimeout::after(Duration::from_millis(limit)));
                }
                let (probe, dguard) = DropProbe::new();
                guards.lock().unwrap().insert(n, dguard);
                let mut s = svc.clone();
                let fut = s.ready().await.unwrap().call(req);
                let h = handles.lock().unwrap().remove(&n).expect("handler called");
                let outs = outcomes.clone();
                let join = tokio::spawn(async move {
                    let out = fut.await;
                    let seen = classify(&out);
                    outs.lock().unwrap().entry(n).or_default().push(seen);
                    drop(guard);
                });
                reqs.push(LReq {
                    n,
                    id,
                    timeout_at: now + limit,
                    idle_at: now + IDLE_MS,
                    max_at: now + MAX_MS,
                    last: None,
                    expect: None,
                    run: Some(Running {
                        join,
                        probe,
                        cancellation,
                        tap: h.tap,
                        respond: Some(h.respond),
                    }),
                });
            }
            LayerOp::Cancel { id } => {
                let id = cancel_ids()[id].clone();
                let got = in_flight.cancel(&id, CancelReason::peer(Some("stop")));
                let target = reqs.iter_mut().find(|r| r.id == id && r.expect.is_none());
                match target {
                    Some(r) => {
                        prop_assert!(got, "cancel of {} in flight did nothing", id);
                        r.expect = Some(Expect::Cancelled);
                    }
                    None => prop_assert!(!got, "cancel of {} not in flight cancelled", id),
                }
            }
            LayerOp::Respond { slot, ok } => {
                if reqs.is_empty() {
                    continue;
                }
                let k = slot % reqs.len();
                let r = &mut reqs[k];
                let Some(run) = r.run.as_mut() else { continue };
                let Some(tx) = run.respond.take() else {
                    continue;
                };
                let n = r.n;
                let answer: Result<Value, BoxError> = if ok {
                    Ok(json!({"n": n}))
                } else {
                    Err(Box::new(ErrorObject::new(-32000, "handler failed")))
                };
                let sent = tx.send(answer).is_ok();
                // A handler future still exists exactly while in flight.
                prop_assert_eq!(sent, r.expect.is_none(), "respond to request {}", n);
                if r.expect.is_none() {
                    r.expect = Some(if ok {
                        Expect::Response
                    } else {
                        Expect::HandlerError
                    });
                }
            }
            LayerOp::Progress { slot, increasing } => {
                let Some(k) = pick(&reqs, slot, |r| r.expect.is_none() && r.run.is_some()) else {
                    continue;
                };
                let r = &mut reqs[k];
                let Some(run) = r.run.as_ref() else { continue };
                let value = match (increasing, r.last) {
                    (true, last) => last.unwrap_or(0.0) + 1.0,
                    (false, Some(last)) => last,
                    (false, None) => f64::NAN,
                };
                let got = run.tap.record(value, None, None);
                // Accepted only while the request runs and the value increases;
                // an ended request's tap says it is closed.
                let running = r.expect.is_none();
                prop_assert_eq!(
                    got,
                    running && increasing,
                    "progress {} for request {}",
                    value,
                    r.n
                );
                prop_assert_eq!(run.tap.is_closed(), !running, "tap of request {}", r.n);
                if got {
                    r.last = Some(value);
                    r.idle_at = now + IDLE_MS;
                }
            }
            LayerOp::Advance { ms } => {
                // Step from deadline to deadline, so that the model knows
                // which limit fired first.
                let target = now + ms;
                loop {
                    let now = now_ms(t0);
                    let next = reqs
                        .iter()
                        .filter(|r| r.expect.is_none() && r.run.is_some())
                        .map(|r| r.timeout_at.min(r.idle_at).min(r.max_at))
                        .filter(|&t| t <= target)
                        .min();
                    let step_to = next.unwrap_or(target).max(now);
                    tokio::time::advance(Duration::from_millis(step_to - now)).await;
                    settle(SETTLE).await;
                    for r in reqs.iter_mut().filter(|r| r.expect.is_none()) {
                        if let Some((_, limits)) = due(step_to, r.timeout_at, r.idle_at, r.max_at) {
                            r.expect = Some(Expect::Elapsed(limits));
                        }
                    }
                    if next.is_none() {
                        break;
                    }
                }
            }
            LayerOp::Disconnect { slot } => {
                if reqs.is_empty() {
                    continue;
                }
                let k = slot % reqs.len();
                let r = &mut reqs[k];
                let Some(run) = r.run.as_ref() else { continue };
                run.join.abort();
                if r.expect.is_none() {
                    r.expect = Some(Expect::Dropped);
                }
            }
            LayerOp::Close => {
                closed = true;
                let n = in_flight.cancel_all(CancelReason::TransportClosed);
                let active = reqs.iter().filter(|r| r.expect.is_none()).count();
                prop_assert_eq!(n, active, "cancel_all");
                for r in reqs.iter_mut().filter(|r| r.expect.is_none()) {
                    r.expect = Some(Expect::Cancelled);
                }
            }
        }
        settle(SETTLE).await;
        check_layers(&reqs, &outcomes)?;
    }

    // The end: everything ended, nothing left behind.
    for r in &mut reqs {
        if let Some(run) = r.run.as_mut() {
            let _ = (&mut run.join).await;
        }
    }
    check_layers(&reqs, &outcomes)?;
    for r in &reqs {
        if let Some(e) = &r.expect {
            count_ending(e);
        }
    }
    prop_assert!(
        in_flight.is_empty(),
        "registry not empty: {}",
        in_flight.len()
    );
    for r in &reqs {
        if let Some(run) = &r.run {
            prop_assert!(run.tap.is_closed(), "tap of request {} open", r.n);
            prop_assert!(
                !run.tap.record(1e9, None, None),
                "progress after the end of request {}",
                r.n
            );
        }
    }
    prop_assert!(handles.lock().unwrap().is_empty());
    Ok(())
}

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

// ------------------------------------------------------------- (b) stdio --

#[derive(Clone, Debug)]
enum StdioOp {
    /// The client calls with id `ids()[id]` and deadline `TIMEOUT_CHOICES[timeout]`.
    Request { id: usize, timeout: usize },
    /// The caller drops call `slot`: the client sends `notifications/cancelled`.
    Drop { slot: usize },
    /// A raw `notifications/cancelled` for `cancel_ids()[id]`, known or not.
    RawCancel { id: usize },
    /// The server handler of call `slot` answers.
    Respond { slot: usize, ok: bool },
    /// The server handler of call `slot` sends progress.
    Progress { slot: usize, increasing: bool },
    /// The paused clock moves on.
    Advance { ms: u64 },
    /// The handler answers and, in the same instant, the caller drops the
    /// call: the response reaches a client that no longer waits for it.
    LateResponse { slot: usize },
    /// The client shuts the connection down (the server sees end of input).
    Close,
}

fn stdio_op() -> impl Strategy<Value = StdioOp> {
    prop_oneof![
        6 => (0..ids().len(), 0..TIMEOUT_CHOICES.len())
            .prop_map(|(id, timeout)| StdioOp::Request { id, timeout }),
        2 => any::<usize>().prop_map(|slot| StdioOp::Drop { slot }),
        2 => (0..cancel_ids().len()).prop_map(|id| StdioOp::RawCancel { id }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(slot, ok)| StdioOp::Respond { slot, ok }),
        4 => (any::<usize>(), any::<bool>())
            .prop_map(|(slot, increasing)| StdioOp::Progress { slot, increasing }),
        4 => advance_ms().prop_map(|ms| StdioOp::Advance { ms }),
        2 => any::<usize>().prop_map(|slot| StdioOp::LateResponse { slot }),
        1 => Just(StdioOp::Close),
    ]
}

/// A server-side call, as its handler hands it to the schedule.
struct SCall {
    respond: Option<oneshot::Sender<Result<Value, BoxError>>>,
    ctx: RequestContext,
    probe: DropProbe,
    token: Option<tower_mcp_cancel::jsonrpc::ProgressToken>,
    /// The server-side tap, when the server stack has a `ProgressResetLayer`.
    tap: Option<ProgressTap>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ServerSide {
    /// Never reached the server (refused by the client).
    Never,
    Active,
    Answered,
    /// Cancelled by the transport: nothing may be written for it.
    Cancelled,
}

/// One client call of a stdio schedule, as the model sees it.
struct SReq {
    n: u64,
    id: RequestId,
    timeout_at: u64,
    idle_at: u64,
    max_at: u64,
    /// The last progress the client's tap accepted.
    last: Option<f64>,
    /// The last progress the server sent (progress MUST increase on every
    /// stack: what the server sends next is measured against it).
    sent: Option<f64>,
    expect: Option<Expect>,
    join: Option<JoinHandle<()>>,
    server: ServerSide,
    /// Wire length when the server side ended: nothing for it after that.
    end_mark: Option<usize>,
    late: bool,
}

impl SReq {
    fn client_active(&self) -> bool {
        self.expect.is_none()
    }
}

type Shared<T> = Arc<Mutex<T>>;

struct Stdio {
    t0: tokio::time::Instant,
    client: StdioClient,
    stack: tower::util::BoxCloneService<McpRequest, Value, BoxError>,
    registry: InFlight,
    calls: Shared<HashMap<u64, SCall>>,
    taps: Shared<HashMap<u64, ProgressTap>>,
    outcomes: Outcomes,
    wire: Shared<Vec<Value>>,
    served: JoinHandle<std::io::Result<()>>,
    server_tap: bool,
    reqs: Vec<SReq>,
    closed: bool,
    /// Ids that must not be reused: their request ended without a response
    /// reaching the client (the spec forbids reusing those).
    burnt: Vec<RequestId>,
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

const STDIO_SETTLE: usize = 48;

fn stdio_handler(
    calls: Shared<HashMap<u64, SCall>>,
) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send> + Clone + Send + 'static
{
    service_fn(move |req: McpRequest| {
        let n: u64 = req.params_as::<Value>().unwrap()["n"].as_u64().unwrap();
        let (tx, rx) = oneshot::channel();
        let (probe, guard) = DropProbe::new();
        calls.lock().unwrap().insert(
            n,
            SCall {
                respond: Some(tx),
                ctx: RequestContext::of(&req),
                probe,
                token: req.progress_token().cloned(),
                tap: req.progress_tap().cloned(),
            },
        );
        async move {
            let out = rx.await.unwrap_or_else(|_| Ok(json!({"n": n})));
            guard.finish();
            drop(guard);
            out
        }
    })
}

impl Stdio {
    /// `server_tap`: the server stack has a `ProgressResetLayer` too (its
    /// limits far beyond any schedule). Either way the server sends only
    /// progress that increases, and the client's tap checks it again.
    fn start(server_tap: bool) -> Stdio {
        let cap = 64 * 1024;
        let (client_w, server_r) = tokio::io::duplex(cap);
        let (server_w, proxy_r) = tokio::io::duplex(cap);
        let (proxy_w, client_r) = tokio::io::duplex(cap);
        let wire: Shared<Vec<Value>> = Arc::default();
        let w2 = wire.clone();
        // The server's output, recorded line by line on its way to the client.
        tokio::spawn(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let mut lines = tokio::io::BufReader::new(proxy_r).lines();
            let mut out = proxy_w;
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).expect("server wrote JSON");
                w2.lock().unwrap().push(v);
                if out.write_all(line.as_bytes()).await.is_err()
                    || out.write_all(b"\n").await.is_err()
                    || out.flush().await.is_err()
                {
                    break;
                }
            }
            let _ = out.shutdown().await;
        });
        let calls: Shared<HashMap<u64, SCall>> = Arc::default();
        let registry = InFlight::new();
        let server = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .option_layer(server_tap.then(|| {
                ProgressResetLayer::new(Duration::from_secs(100)).max(Duration::from_secs(200))
            }))
            .service(stdio_handler(calls.clone()));
        let served = tokio::spawn(
            StdioServer::new()
                .in_flight(registry.clone())
                .serve(server, server_r, server_w),
        );
        let client = StdioClient::new(client_r, client_w);
        let taps: Shared<HashMap<u64, ProgressTap>> = Arc::default();
        let t2 = taps.clone();
        let stack = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_millis(TIMEOUT_MS)))
            .layer(
                ProgressResetLayer::new(Duration::from_millis(IDLE_MS))
                    .max(Duration::from_millis(MAX_MS)),
            )
            .map_request(move |req: McpRequest| {
                let n = req.params_as::<Value>().unwrap()["n"].as_u64().unwrap();
                let tap = req
                    .progress_tap()
                    .expect("ProgressResetLayer set a tap")
                    .clone();
                t2.lock().unwrap().insert(n, tap);
                req
            })
            .service(client.clone());
        Stdio {
            t0: tokio::time::Instant::now(),
            client,
            stack: tower::util::BoxCloneService::new(stack),
            registry,
            calls,
            taps,
            outcomes: Arc::default(),
            wire,
            served,
            server_tap,
            reqs: Vec::new(),
            closed: false,
            burnt: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        now_ms(self.t0)
    }

    /// The server side of call `k` ended with `how`.
    fn server_ended(&mut self, k: usize, how: ServerSide) {
        let r = &mut self.reqs[k];
        if r.server == ServerSide::Active {
            r.server = how;
        }
    }

    /// The client side of call `k` ended with `e` without a response
    /// reaching it: its cancel reaches the server, and its id is retired.
    fn client_gave_up(&mut self, k: usize, e: Expect) {
        let r = &mut self.reqs[k];
        if !r.client_active() {
            return;
        }
        r.expect = Some(e);
        self.burnt.push(r.id.clone());
        self.server_ended(k, ServerSide::Cancelled);
    }

    async fn op(&mut self, op: StdioOp) -> Result<(), TestCaseError> {
        let now = self.now();
        match op {
            StdioOp::Request { id, timeout } => {
                if self.closed {
                    return Ok(());
                }
                let n = self.reqs.len() as u64;
                let mut id = ids()[id].clone();
                if self.burnt.contains(&id) {
                    id = RequestId::from(1000 + n as i64);
                }
                let duplicate = self.reqs.iter().any(|r| r.id == id && r.client_active());
                let limit = TIMEOUT_CHOICES[timeout];
                let mut req =
                    McpRequest::new(id.clone(), "tools/call").with_params(json!({"n": n}));
                if timeout != 0 {
                    req = req.with_extension(RequestTimeout::after(Duration::from_millis(limit)));
                }
                let fut = self.stack.clone().oneshot(req);
                let outs = self.outcomes.clone();
                let join = tokio::spawn(async move {
                    let seen = classify(&fut.await);
                    outs.lock().unwrap().entry(n).or_default().push(seen);
                });
                self.reqs.push(SReq {
                    n,
                    id,
                    timeout_at: now + limit,
                    idle_at: now + IDLE_MS,
                    max_at: now + MAX_MS,
                    last: None,
                    sent: None,
                    expect: duplicate.then_some(Expect::Refused),
                    join: Some(join),
                    server: if duplicate {
                        ServerSide::Never
                    } else {
                        ServerSide::Active
                    },
                    end_mark: None,
                    late: false,
                });
            }
            StdioOp::Drop { slot } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                if let Some(j) = &self.reqs[k].join {
                    j.abort();
                }
                self.client_gave_up(k, Expect::Dropped);
            }
            StdioOp::RawCancel { id } => {
                let id = cancel_ids()[id].clone();
                if self.closed {
                    return Ok(());
                }
                self.client
                    .notify(
                        "notifications/cancelled",
                        &json!({"requestId": id, "reason": "raw"}),
                    )
                    .map_err(|e| TestCaseError::fail(format!("notify: {e}")))?;
                let hit = self
                    .reqs
                    .iter()
                    .position(|r| r.id == id && r.server == ServerSide::Active);
                if let Some(k) = hit {
                    STATS.lock().unwrap().raw_cancels_hit += 1;
                    // The server stops; the client keeps waiting until a
                    // limit of its own fires.
                    self.server_ended(k, ServerSide::Cancelled);
                }
            }
            StdioOp::Respond { slot, ok } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let tx = self
                    .calls
                    .lock()
                    .unwrap()
                    .get_mut(&n)
                    .and_then(|c| c.respond.take());
                let Some(tx) = tx else { return Ok(()) };
                let answer: Result<Value, BoxError> = if ok {
                    Ok(json!({"n": n}))
                } else {
                    Err(Box::new(
                        ErrorObject::new(-32000, "handler failed").with_data(json!({"n": n})),
                    ))
                };
                let sent = tx.send(answer).is_ok();
                let r = &mut self.reqs[k];
                prop_assert_eq!(
                    sent,
                    r.server == ServerSide::Active,
                    "handler {} alive exactly while the server runs it",
                    n
                );
                if sent {
                    r.server = ServerSide::Answered;
                    if r.client_active() {
                        r.expect = Some(if ok {
                            Expect::Response
                        } else {
                            Expect::HandlerError
                        });
                    }
                }
            }
            StdioOp::Progress { slot, increasing } => {
                let Some(k) = pick(&self.reqs, slot, |r| r.server == ServerSide::Active) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let ctx = match self.calls.lock().unwrap().get(&n) {
                    Some(c) => c.ctx.clone(),
                    None => return Ok(()),
                };
                let r = &self.reqs[k];
                let value = match (increasing, r.sent) {
                    (true, last) => last.unwrap_or(0.0) + 1.0,
                    (false, Some(last)) => last,
                    (false, None) => return Ok(()),
                };
                // As spawned work holding the handler's context would.
                let sent = ctx.progress(value, Some(100.0), None).await;
                let server_active = r.server == ServerSide::Active;
                // With or without a server tap: progress MUST increase.
                let want = server_active && increasing;
                prop_assert_eq!(sent, want, "progress {} of call {} sent", value, n);
                if !server_active {
                    STATS.lock().unwrap().progress_after_end += 1;
                }
                let r = &mut self.reqs[k];
                if sent {
                    r.sent = Some(value);
                }
                if server_active && r.client_active() && increasing {
                    r.last = Some(value);
                    r.idle_at = now + IDLE_MS;
                }
            }
            StdioOp::Advance { ms } => {
                let target = now + ms;
                loop {
                    let now = self.now();
                    let next = self
                        .reqs
                        .iter()
                        .filter(|r| r.client_active())
                        .map(|r| r.timeout_at.min(r.idle_at).min(r.max_at))
                        .filter(|&t| t <= target)
                        .min();
                    let step_to = next.unwrap_or(target).max(now);
                    tokio::time::advance(Duration::from_millis(step_to - now)).await;
                    for k in 0..self.reqs.len() {
                        let r = &self.reqs[k];
                        if !r.client_active() {
                            continue;
                        }
                        if let Some((_, limits)) = due(step_to, r.timeout_at, r.idle_at, r.max_at) {
                            self.client_gave_up(k, Expect::Elapsed(limits));
                        }
                    }
                    settle(STDIO_SETTLE).await;
                    self.check()?;
                    if next.is_none() {
                        break;
                    }
                }
            }
            StdioOp::LateResponse { slot } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let tx = self
                    .calls
                    .lock()
                    .unwrap()
                    .get_mut(&n)
                    .and_then(|c| c.respond.take());
                if let Some(tx) = tx {
                    if tx.send(Ok(json!({"n": n}))).is_ok() {
                        let r = &mut self.reqs[k];
                        r.server = ServerSide::Answered;
                        r.late = r.client_active();
                    }
                }
                if let Some(j) = &self.reqs[k].join {
                    j.abort();
                }
                self.client_gave_up(k, Expect::Dropped);
            }
            StdioOp::Close => {
                if self.closed {
                    return Ok(());
                }
                self.closed = true;
                self.client
                    .shutdown()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("shutdown: {e}")))?;
                for k in 0..self.reqs.len() {
                    if self.reqs[k].client_active() {
                        self.reqs[k].expect = Some(Expect::Closed);
                    }
                    self.server_ended(k, ServerSide::Cancelled);
                }
            }
        }
        settle(STDIO_SETTLE).await;
        self.check()
    }

    fn slot(&self, slot: usize) -> Option<usize> {
        (!self.reqs.is_empty()).then(|| slot % self.reqs.len())
    }

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
