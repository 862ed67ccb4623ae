//! (a) The three layers around a handler the schedule controls, this file
//! acting as the transport (an `InFlight` registry, `Cancellation`s): a
//! schedule of [`LayerOp`]s is run step by step and the observed state is
//! compared with the model after each.

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
use tower_mcp_cancel::test_util::{DropGuard, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, McpRequest, ProgressResetLayer,
    ProgressTap, RequestTimeout, TimeoutLayer,
};

use super::model::*;
use super::{check_layers, count_ending};

/// What the handler of one request hands to the schedule.
struct Handle {
    pub(super) respond: oneshot::Sender<Result<Value, BoxError>>,
    pub(super) tap: ProgressTap,
}

type Handles = Arc<Mutex<HashMap<u64, Handle>>>;

/// One request of a layer schedule, as the model sees it.
pub(super) struct LReq {
    pub(super) n: u64,
    pub(super) id: RequestId,
    pub(super) timeout_at: u64,
    pub(super) idle_at: u64,
    pub(super) max_at: u64,
    pub(super) last: Option<f64>,
    /// `None` while in flight.
    pub(super) expect: Option<Expect>,
    /// Absent for a refused request.
    pub(super) run: Option<Running>,
}

pub(super) struct Running {
    pub(super) join: JoinHandle<()>,
    pub(super) probe: DropProbe,
    pub(super) cancellation: Cancellation,
    pub(super) tap: ProgressTap,
    pub(super) respond: Option<oneshot::Sender<Result<Value, BoxError>>>,
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

pub(super) fn run_layer_schedule(ops: Vec<LayerOp>) -> Result<(), TestCaseError> {
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
