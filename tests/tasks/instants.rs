//! A stop at each instant of a task's life: the creating request
//! cancelled, `tasks/cancel`, the TTL, the shutdown — during the policy's
//! delay, while the record's `create` is in flight, during the first
//! status update, while the handler waits for input. A store call is held
//! at a [`Gate`] to hit its instant, never by sleeping. And a store error
//! is the failing request's, never the task's.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TaskStore, TasksLayer};
use tower_mcp_cancel::test_util::{Fault, FaultyStore, Gate, Op};
use tower_mcp_cancel::{CancelReason, Cancellation};

use crate::harness::{
    call, create, drained, get, send, stack, task_req, terminal_within, Calls, Svc, END_BOUND, HANG,
};
use crate::panics::assert_no_panic;

/// The grace of every stopped task here.
const GRACE: Duration = Duration::from_secs(1);

/// Waits (on tokio's clock, in 1 ms steps) until the task reads `status`.
async fn until_status(svc: &Svc, id: &str, status: &str) {
    let start = Instant::now();
    loop {
        if let Ok(r) = get(svc, id).await {
            if r["status"] == status {
                return;
            }
        }
        assert!(start.elapsed() < HANG, "never {status}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    TasksCancel,
    Ttl,
    Shutdown,
}

/// A handler waiting for input is told the task ended (`InputError::Ended`)
/// at the instant it is stopped, before its grace, not when the grace
/// ends.
async fn input_ends_at_the_stop(stop: Stop) {
    let calls = Calls::default();
    let shutdown = CancellationToken::new();
    let tasks = TasksLayer::new()
        .default_policy(TaskPolicy::optional())
        .grace(Duration::from_secs(5))
        .ttl(Some(Duration::from_secs(10)))
        .shutdown(shutdown.clone());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let created = Instant::now();
    let id = create(&svc, call(1, "ask", json!({}))).await;
    until_status(&svc, &id, "input_required").await;
    let stopped_at = match stop {
        Stop::TasksCancel => {
            send(&svc, task_req(2, "tasks/cancel", &id, json!({})))
                .await
                .unwrap();
            Instant::now()
        }
        Stop::Ttl => {
            // The paused clock stood still from the call to the record.
            let expiry = created + Duration::from_secs(10);
            tokio::time::sleep_until(expiry).await;
            expiry
        }
        Stop::Shutdown => {
            shutdown.cancel();
            Instant::now()
        }
    };
    let call = calls.get(0).await;
    call.probe.dropped().await;
    let (at, got) = call.input().unwrap_or_else(|| {
        panic!("{stop:?}: the waiting input never ended; dropped after the grace")
    });
    assert!(got.contains("ended"), "{stop:?}: {got}");
    assert_eq!(
        at - stopped_at,
        Duration::ZERO,
        "{stop:?}: told at its stop"
    );
    drained(&handle, "input ended").await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_input_ends_at_the_instant_of_a_tasks_cancel() {
    input_ends_at_the_stop(Stop::TasksCancel).await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_input_ends_at_the_instant_of_the_ttl() {
    input_ends_at_the_stop(Stop::Ttl).await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_input_ends_at_the_instant_of_the_shutdown() {
    input_ends_at_the_stop(Stop::Shutdown).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_tasks_update_write_fails_that_request_and_keeps_the_input_pending() {
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    let tasks = TasksLayer::with_store(store.clone()).default_policy(TaskPolicy::optional());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let id = create(&svc, call(1, "ask", json!({}))).await;
    until_status(&svc, &id, "input_required").await;
    let answers =
        json!({"inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}}});
    store.once(Op::Update, Fault::Fail);
    let failed = send(&svc, task_req(2, "tasks/update", &id, answers.clone())).await;
    assert!(
        failed.is_err(),
        "the store error is the request's: {failed:?}"
    );
    let got = get(&svc, &id).await.unwrap();
    assert_eq!(got["status"], "input_required", "still waiting: {got}");
    send(&svc, task_req(3, "tasks/update", &id, answers))
        .await
        .expect("the retried tasks/update");
    let got = terminal_within(&svc, &id, END_BOUND).await.unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "Hello, Luca!", "{got}");
    drained(&handle, "input answered").await;
}

/// Where the stop lands.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Within the policy's delay (the call is not a task yet).
    Delay,
    /// While the record's `create` is in flight.
    Create,
    /// While the handler's first status update is in flight.
    Status,
}

/// What stops it.
#[derive(Clone, Copy, Debug)]
enum By {
    /// The creating request cancelled (a transport's cancel), its future
    /// polled on for the transport's grace, then dropped.
    Request,
    /// `tasks/cancel`.
    TasksCancel,
    /// The TTL (1 s), passing while the call is held.
    Ttl,
    /// The shutdown token (no drain grace).
    Shutdown,
}

/// One stop at one instant; `Err` says which rule broke.
async fn stop_at(at: At, by: By) -> Result<(), String> {
    let calls = Calls::default();
    let store = FaultyStore::new(MemoryStore::new());
    let shutdown = CancellationToken::new();
    let delay = match at {
        At::Delay => Duration::from_secs(2),
        _ => Duration::ZERO,
    };
    let ttl = match by {
        By::Ttl => Duration::from_secs(1),
        _ => Duration::from_secs(600),
    };
    let tasks = TasksLayer::with_store(store.clone())
        .default_policy(TaskPolicy::optional().after(delay))
        .grace(GRACE)
        .ttl(Some(ttl))
        .shutdown(shutdown.clone());
    let handle = tasks.handle();
    let svc = stack(&tasks, &calls);
    let gate = Gate::new();
    match at {
        At::Create => store.once(Op::Create, Fault::Gate(gate.clone())),
        At::Status => store.once(Op::Update, Fault::Gate(gate.clone())),
        At::Delay => {}
    }
    let outer = Cancellation::new();
    let request = call(1, "status", json!({"ms": 600_000})).with_cancellation(outer.clone());
    let mut answer = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, request).await.map_err(|e| e.to_string()) }
    });
    match at {
        At::Delay => tokio::time::sleep(Duration::from_secs(1)).await,
        At::Create | At::Status => gate.arrived(1).await,
    }
    let work = calls.get(0).await;
    let id = work.task_id().expect("a task context");
    let mut acked = false;
    match by {
        By::Request => {
            outer.cancel(CancelReason::peer(Some("stop")));
        }
        By::TasksCancel => {
            acked = send(&svc, task_req(2, "tasks/cancel", &id, json!({})))
                .await
                .is_ok();
        }
        By::Ttl => tokio::time::sleep(Duration::from_secs(2)).await,
        By::Shutdown => shutdown.cancel(),
    }
    gate.open();
    if let By::Request = by {
        // The transport's grace, then its drop of the request's future.
        let _ = tokio::time::timeout(GRACE, &mut answer).await;
        answer.abort();
    }
    let dropped = tokio::time::timeout(END_BOUND, work.probe.dropped()).await;
    if dropped.is_err() {
        return Err(format!("the work still runs {END_BOUND:?} after the stop"));
    }
    if tokio::time::timeout(END_BOUND, handle.drained())
        .await
        .is_err()
    {
        return Err(format!("running() = {} after the stop", handle.running()));
    }
    let record = store.inner().get(&id).await.map_err(|e| e.to_string())?;
    let Some(record) = record else {
        return match by {
            By::Request | By::Shutdown => Ok(()),
            _ => Err("the record is gone".into()),
        };
    };
    let status = record.status.as_str();
    let message = record
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    let truthful = match by {
        By::Request => status == "cancelled",
        By::TasksCancel => status == "cancelled" && acked,
        By::Ttl => status == "failed" && message.contains("TTL"),
        By::Shutdown => status == "failed" && message.contains("shut down"),
    };
    if !truthful {
        return Err(format!("the record reads {status} ({message:?})"));
    }
    Ok(())
}

/// Runs every stop at `at` and reports every rule broken.
async fn stops_at(at: At, bys: &[By]) {
    let mut broken = Vec::new();
    for &by in bys {
        if let Err(e) = stop_at(at, by).await {
            broken.push(format!("{by:?} at {at:?}: {e}"));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    assert_no_panic();
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_policys_delay_ends_the_work_truthfully() {
    stops_at(At::Delay, &[By::Request, By::Shutdown]).await;
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_the_record_is_created_ends_the_task_truthfully() {
    stops_at(At::Create, &[By::Request, By::Ttl, By::Shutdown]).await;
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_first_status_update_ends_the_task_truthfully() {
    stops_at(At::Status, &[By::TasksCancel, By::Ttl, By::Shutdown]).await;
}
