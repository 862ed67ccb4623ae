//! Every task ends, whatever the store does: a property over fault
//! schedules (per store operation: ok, fail once, fail n times, a delay,
//! a write applied whose answer is lost) × a stop (`tasks/cancel`, the
//! TTL, the shutdown, or none) at a number of 100 ms steps of the paused
//! clock × a grace or none × the handler (completes, fails, panics,
//! ignores its token, waits for input). The store heals at [`HEAL`], and
//! the shutdown token fires then (if it had not) to stop what still runs;
//! the invariants, checked [`END_BOUND`] after it:
//!
//! * (a) the task's record, if it exists, is terminal;
//! * (b) `running()` is 0 and `drained()` resolves;
//! * (c) the work was dropped or ran to its end;
//! * (d) the status is truthful: `cancelled` only after an acknowledged
//!   `tasks/cancel`, `completed` only with the handler's result, `failed`
//!   with the error of what ended it (the handler's, a panic, the TTL, the
//!   shutdown, a store that failed);
//! * (e) no unplanned panic.
//!
//! 64 cases (`PROPTEST_CASES` overrides), each on a paused clock of its own.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TaskStore, TasksLayer};
use tower_mcp_cancel::test_util::{Fault, FaultyStore, Op};

use crate::harness::{call, send, stack, task_req, Calls, END_BOUND};

/// When the store heals, from the call.
const HEAL: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
enum Plan {
    Ok,
    FailOnce,
    Fail(usize),
    Delay(u64),
    FailAfterApply,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Handler {
    Completes,
    Errs,
    Panics,
    IgnoresToken,
    WaitsForInput,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum StopBy {
    None,
    TasksCancel,
    Ttl,
    Shutdown,
}

fn plan() -> impl Strategy<Value = Plan> {
    prop_oneof![
        3 => Just(Plan::Ok),
        1 => Just(Plan::FailOnce),
        1 => (2usize..5).prop_map(Plan::Fail),
        1 => (1u64..3000).prop_map(Plan::Delay),
        1 => Just(Plan::FailAfterApply),
    ]
}

fn handler() -> impl Strategy<Value = Handler> {
    prop_oneof![
        Just(Handler::Completes),
        Just(Handler::Errs),
        Just(Handler::Panics),
        Just(Handler::IgnoresToken),
        Just(Handler::WaitsForInput),
    ]
}

fn stop_by() -> impl Strategy<Value = StopBy> {
    prop_oneof![
        Just(StopBy::None),
        Just(StopBy::TasksCancel),
        Just(StopBy::Ttl),
        Just(StopBy::Shutdown),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    create: Plan,
    update: Plan,
    finish: Plan,
    get: Plan,
    stop: StopBy,
    /// The stop's instant, in 100 ms steps from the call.
    steps: u32,
    grace: bool,
    handler: Handler,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (plan(), plan(), plan(), plan()),
        stop_by(),
        0u32..30,
        any::<bool>(),
        handler(),
    )
        .prop_map(
            |((create, update, finish, get), stop, steps, grace, handler)| Case {
                create,
                update,
                finish,
                get,
                stop,
                steps,
                grace,
                handler,
            },
        )
}

fn schedule(store: &FaultyStore<MemoryStore>, op: Op, plan: Plan) {
    match plan {
        Plan::Ok => {}
        Plan::FailOnce => store.once(op, Fault::Fail),
        Plan::Fail(n) => store.times(op, n, Fault::Fail),
        Plan::Delay(ms) => store.always(op, Fault::Delay(Duration::from_millis(ms))),
        Plan::FailAfterApply => store.once(op, Fault::FailAfterApply),
    }
}

/// Runs one case; `Err` names the invariant broken.
async fn run(case: Case) -> Result<(), String> {
    let panics_before = crate::panics::count();
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    for (op, plan) in [
        (Op::Create, case.create),
        (Op::Update, case.update),
        (Op::Finish, case.finish),
        (Op::Get, case.get),
    ] {
        schedule(&store, op, plan);
    }
    let shutdown = CancellationToken::new();
    let stop_at = Duration::from_millis(100) * case.steps;
    let ttl = match case.stop {
        StopBy::Ttl => stop_at,
        _ => Duration::from_secs(3600),
    };
    let grace = if case.grace {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    };
    let tasks = TasksLayer::with_store(store.clone())
        .default_policy(TaskPolicy::optional())
        .grace(grace)
        .ttl(Some(ttl))
        .retention(Duration::from_secs(3600))
        .shutdown(shutdown.clone());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let (tool, ms) = match case.handler {
        Handler::Completes => ("sleep", 1000),
        Handler::Errs => ("fail", 1000),
        Handler::Panics => ("panic", 1000),
        Handler::IgnoresToken => ("sleep", 600_000),
        Handler::WaitsForInput => ("ask", 0),
    };
    let start = tokio::time::Instant::now();
    let mut answer = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, call(1, tool, json!({"ms": ms}))).await }
    });
    tokio::time::sleep_until(start + stop_at).await;
    let mut acked = false;
    let mut early = None;
    match case.stop {
        StopBy::TasksCancel => {
            // The client knows the id once the call answered.
            if let Ok(a) = tokio::time::timeout_at(start + HEAL, &mut answer).await {
                early = Some(a);
                if let Some(id) = calls.get(0).await.task_id() {
                    let req = task_req(2, "tasks/cancel", &id, json!({}));
                    acked = send(&svc, req).await.is_ok();
                }
            }
        }
        StopBy::Shutdown => shutdown.cancel(),
        StopBy::None | StopBy::Ttl => {}
    }
    tokio::time::sleep_until((start + HEAL).max(tokio::time::Instant::now())).await;
    store.heal_all();
    // Whatever still runs (a handler that ignores its token, not stopped)
    // is stopped by a shutdown once the store healed.
    let late_shutdown = !shutdown.is_cancelled();
    shutdown.cancel();
    let bound = END_BOUND + grace;
    let answered = match early {
        Some(a) => Ok(a),
        None => tokio::time::timeout(bound, answer).await,
    };
    let answered = match answered {
        Ok(Ok(a)) => a.map_err(|e| e.to_string()),
        Ok(Err(join)) => return Err(format!("(e) the call panicked: {join}")),
        Err(_) => return Err("(a) the call never answered".into()),
    };
    // (b)
    if tokio::time::timeout(bound, handle.drained()).await.is_err() {
        return Err(format!("(b) running() = {}", handle.running()));
    }
    let work = calls.get(0).await;
    // (c)
    if !work.probe.is_dropped() {
        return Err("(c) the work was neither dropped nor ended".into());
    }
    // (a), (d)
    let Some(id) = work.task_id() else {
        return Ok(());
    };
    let Some(record) = store.inner().get(&id).await.map_err(|e| e.to_string())? else {
        return Ok(());
    };
    let status = record.status.as_str();
    let message = record
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    let failed_by = |m: &str| {
        (case.handler == Handler::Errs && m.contains("the handler failed"))
            || (case.handler == Handler::Panics && m.contains("panic"))
            || (case.handler == Handler::WaitsForInput && m.contains("input"))
            || (case.stop == StopBy::Ttl && m.contains("TTL"))
            || ((case.stop == StopBy::Shutdown || late_shutdown) && m.contains("shut down"))
            || m.contains("store")
    };
    let truthful = match status {
        "cancelled" => acked,
        "completed" => {
            case.handler == Handler::Completes
                && record.result.as_ref().is_some_and(|r| r["content"][0]["text"] == "done")
        }
        "failed" => failed_by(&message),
        other => {
            return Err(format!(
                "(a) the record reads {other} {bound:?} after the store healed (the call: {answered:?})"
            ))
        }
    };
    if !truthful {
        return Err(format!(
            "(d) the record reads {status} ({message:?}), acked cancel: {acked}"
        ));
    }
    // (e)
    if crate::panics::count() != panics_before {
        return Err("(e) an unplanned panic".into());
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_task_ends_truthfully_whatever_the_store_does(case in case()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let out = rt.block_on(run(case.clone()));
        prop_assert!(out.is_ok(), "{}: {case:?}", out.unwrap_err());
    }
}
