//! Every task ends, and says truly how: a panicking handler, a store that
//! fails an end or a change, a cancel while the record is written, a limit
//! inside the layer, settings at their extremes, anonymous callers.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Context;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::tasks::runner::END_RETRY_MAX;
use crate::{CancelReason, Cancellation, TimeoutLayer};

/// A memory store that fails the next `n` calls of an operation, and whose
/// creations may wait for a permit.
#[derive(Clone, Default)]
struct Faults {
    inner: MemoryStore,
    fail_finish: Arc<AtomicUsize>,
    fail_update: Arc<AtomicUsize>,
    gate_create: Arc<AtomicBool>,
    create_arrived: Arc<Notify>,
    create_permit: Arc<Notify>,
}

fn injected(n: &AtomicUsize) -> Result<(), StoreError> {
    let left = n.load(Ordering::SeqCst);
    if left == 0 {
        return Ok(());
    }
    n.store(left - 1, Ordering::SeqCst);
    Err(StoreError::Unavailable("injected".into()))
}

impl TaskStore for Faults {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if self.gate_create.load(Ordering::SeqCst) {
                self.create_arrived.notify_one();
                self.create_permit.notified().await;
            }
            self.inner.create(record).await
        })
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        self.inner.get(id)
    }
    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            injected(&self.fail_update)?;
            self.inner.update(id, change).await
        })
    }
    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            injected(&self.fail_finish)?;
            self.inner.finish(id, end, retain).await
        })
    }
}

async fn status(svc: &mut Svc, id: &str) -> Value {
    send(svc, task_req(99, "tasks/get", id, json!({})))
        .await
        .unwrap()
}

async fn panicker(req: McpRequest) -> Result<Value, BoxError> {
    let args: Value = req.params_as::<Value>()?["arguments"].clone();
    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
    panic!("the handler's bug");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_ends_its_task_failed_and_frees_its_slot() {
    let layer = layer().max_tasks(1);
    let handle = layer.handle();
    let mut svc = stack(layer, panicker);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 1000}), true)).await;
    assert_eq!(handle.running(), 1);
    tokio::time::sleep(Duration::from_millis(1001)).await;
    handle.drained().await;
    assert_eq!(handle.running(), 0);
    let got = status(&mut svc, &id).await;
    assert_eq!(got["status"], "failed", "{got}");
    assert_eq!(got["error"]["code"], ErrorObject::INTERNAL_ERROR);
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("panicked"),
        "{got}"
    );
    // The slot is free: with max_tasks(1), another task is taken.
    create(&mut svc, call(2, "sleep", json!({"ms": 1000}), true)).await;
}

#[tokio::test(start_paused = true)]
async fn an_end_the_store_failed_is_written_again_and_answered_meanwhile() {
    let store = Faults::default();
    store.fail_finish.store(6, Ordering::SeqCst);
    let layer = TasksLayer::with_store(store.clone()).tool("sleep", TaskPolicy::optional());
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 1000}), true)).await;
    tokio::time::sleep(Duration::from_millis(1001)).await;
    tokio::task::yield_now().await;
    // The work is over: its slot is free while its end waits for the store.
    assert_eq!(handle.running(), 0);
    assert_eq!(
        store.inner.get(&id).await.unwrap().unwrap().status,
        TaskStatus::Working,
        "the store has not taken the end yet"
    );
    let got = status(&mut svc, &id).await;
    assert_eq!(
        got["status"], "completed",
        "this process answers the end it holds: {got}"
    );
    assert_eq!(got["result"]["content"][0]["text"], "done");
    let start = tokio::time::Instant::now();
    handle.drained().await;
    // Six failures: tries at 50, 100, 200, 400, 800 ms apart, then written.
    assert!(
        start.elapsed() <= END_RETRY_MAX * 2,
        "{:?}",
        start.elapsed()
    );
    let stored = store.inner.get(&id).await.unwrap().unwrap();
    assert_eq!(stored.status, TaskStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stays_down_is_caught_up_once_it_is_back() {
    let store = Faults::default();
    store.fail_finish.store(usize::MAX, Ordering::SeqCst);
    let layer = TasksLayer::with_store(store.clone()).tool("sleep", TaskPolicy::optional());
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 10}), true)).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(handle.running(), 0);
    assert_eq!(
        store.inner.get(&id).await.unwrap().unwrap().status,
        TaskStatus::Working
    );
    // Back: terminal within the longest wait between tries.
    store.fail_finish.store(0, Ordering::SeqCst);
    let back = tokio::time::Instant::now();
    handle.drained().await;
    assert!(back.elapsed() <= END_RETRY_MAX, "{:?}", back.elapsed());
    assert_eq!(
        store.inner.get(&id).await.unwrap().unwrap().status,
        TaskStatus::Completed
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_while_the_record_is_written_cancels_the_unannounced_task() {
    for grace in [Duration::ZERO, Duration::from_secs(2)] {
        let store = Faults::default();
        store.gate_create.store(true, Ordering::SeqCst);
        let layer = TasksLayer::with_store(store.clone()).tool("sleep", TaskPolicy::optional());
        let handle = layer.handle();
        let mut svc = stack(layer, sleeper);
        // As a transport's: it owns the drop, with its grace.
        let outer = Cancellation::new();
        outer.own_grace(grace);
        let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
        let req = req.with_cancellation(outer.clone());
        let mut creator = svc.clone();
        let mut answer = Box::pin(async move { send(&mut creator, req).await });
        assert!(answer.as_mut().poll(&mut noop_cx()).is_pending());
        store.create_arrived.notified().await;
        outer.cancel(CancelReason::peer(Some("changed my mind")));
        store.create_permit.notify_one();
        // A transport with a grace polls the call on; the answer goes nowhere.
        let out = tokio::time::timeout(grace.max(Duration::from_millis(1)), answer).await;
        assert!(
            !matches!(out, Ok(Ok(_))),
            "no CreateTaskResult for a cancelled request: {out:?}"
        );
        dropped.await.unwrap();
        handle.drained().await;
        let ids = store.inner.ids();
        assert_eq!(ids.len(), 1, "the record was written");
        let got = status(&mut svc, &ids[0]).await;
        assert_eq!(got["status"], "cancelled", "grace {grace:?}: {got}");
    }
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(std::task::Waker::noop())
}

#[tokio::test(start_paused = true)]
async fn a_limit_inside_the_layer_caps_the_ttl_and_reads_failed_with_its_error() {
    for grace in [Duration::ZERO, Duration::from_secs(1)] {
        let layer = layer().ttl(Some(Duration::from_secs(600))).grace(grace);
        let inner = tower::ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(60)))
            .service(service_fn(sleeper));
        let mut svc = {
            use tower::Layer;
            layer.layer(tower::util::BoxCloneSyncService::new(inner))
        };
        let created = send(&mut svc, call(1, "sleep", json!({"ms": 3_600_000}), true))
            .await
            .unwrap();
        assert_eq!(created["ttlMs"], 60_000, "the TTL the work has: {created}");
        let id = created["taskId"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_secs(61)).await;
        let got = status(&mut svc, &id).await;
        assert_eq!(got["status"], "failed", "grace {grace:?}: {got}");
        let message = got["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("timed out") || message.contains("TTL"),
            "{got}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_waiting_for_input_hears_the_end_before_its_grace() {
    let heard = Arc::new(std::sync::Mutex::new(None));
    let seen = heard.clone();
    let layer = layer().grace(Duration::from_secs(10));
    let mut svc = stack(layer, move |req: McpRequest| {
        let seen = seen.clone();
        async move {
            let task = TaskContext::of(&req).unwrap();
            let out = task
                .input("q", json!({"method": "elicitation/create"}))
                .await;
            *seen.lock().unwrap() = Some((tokio::time::Instant::now(), out.is_err()));
            std::future::pending::<()>().await;
            Ok(json!({}))
        }
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    tokio::task::yield_now().await;
    let cancelled_at = tokio::time::Instant::now();
    send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let (at, ended) = heard.lock().unwrap().expect("the input call returned");
    assert!(ended, "it heard the task ended");
    assert_eq!(at, cancelled_at, "at the cancel, not at the grace's end");
}

#[tokio::test(start_paused = true)]
async fn a_failed_update_write_answers_the_request_and_leaves_the_input_waiting() {
    let store = Faults::default();
    let layer = TasksLayer::with_store(store.clone()).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer, |req: McpRequest| async move {
        let task = TaskContext::of(&req).unwrap();
        let answer = task
            .input("q", json!({"method": "elicitation/create"}))
            .await?;
        Ok(json!({"content": [{"type": "text", "text": answer["v"]}]}))
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    tokio::task::yield_now().await;
    store.fail_update.store(1, Ordering::SeqCst);
    let answer = json!({"inputResponses": {"q": {"v": "yes"}}});
    let err = send(&mut svc, task_req(2, "tasks/update", &id, answer.clone()))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INTERNAL_ERROR);
    let got = status(&mut svc, &id).await;
    assert_eq!(got["status"], "input_required", "the task as it was: {got}");
    send(&mut svc, task_req(3, "tasks/update", &id, answer))
        .await
        .unwrap();
    tokio::task::yield_now().await;
    let got = status(&mut svc, &id).await;
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "yes");
}

#[derive(Clone)]
struct Principal(&'static str);

#[tokio::test(start_paused = true)]
async fn with_bind_a_request_without_a_principal_sees_no_task_and_makes_none() {
    let layer = layer().bind(|ext| ext.get::<Principal>().map(|p| p.0.to_owned()));
    let mut svc = stack(layer, sleeper);
    let alice = create(
        &mut svc,
        call(1, "sleep", json!({"ms": 60_000}), true).with_extension(Principal("alice")),
    )
    .await;
    let err = send(&mut svc, task_req(2, "tasks/get", &alice, json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INVALID_PARAMS);
    // Anonymous: a plain call for an optional tool, refused for a required one.
    let plain = send(&mut svc, call(3, "sleep", json!({"ms": 10}), true))
        .await
        .unwrap();
    assert_eq!(plain["content"][0]["text"], "done", "{plain}");
    let err = send(&mut svc, call(4, "must", json!({"ms": 10}), true))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INVALID_REQUEST);
}

#[tokio::test(start_paused = true)]
async fn every_duration_setting_at_its_maximum_never_panics_and_tasks_still_end() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let layer = layer()
        .ttl(Some(Duration::MAX))
        .poll_interval(Duration::MAX)
        .retention(Duration::MAX)
        .grace(Duration::ZERO)
        .store_timeout(Duration::MAX)
        .drain_grace(Duration::MAX)
        .shutdown(shutdown.clone());
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let id = create(&mut svc, req).await;
    send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    dropped.await.unwrap();
    assert_eq!(status(&mut svc, &id).await["status"], "cancelled");
    let long = create(&mut svc, call(3, "sleep", json!({"ms": 3_600_000}), true)).await;
    shutdown.cancel();
    tokio::time::sleep(Duration::from_secs(3_000)).await;
    assert_eq!(handle.running(), 1, "a drain grace of MAX lets it run");
    tokio::time::sleep(Duration::from_secs(700)).await;
    handle.drained().await;
    assert_eq!(status(&mut svc, &long).await["status"], "completed");
}

#[tokio::test(start_paused = true)]
async fn a_ttl_extension_the_store_did_not_record_is_not_enforced_either() {
    let store = Faults::default();
    let layer = TasksLayer::with_store(store.clone())
        .tool("sleep", TaskPolicy::optional())
        .ttl(Some(Duration::from_secs(10)));
    let extended = Arc::new(std::sync::Mutex::new(None));
    let seen = extended.clone();
    let faults = store.clone();
    let mut svc = stack(layer, move |req: McpRequest| {
        let (seen, faults) = (seen.clone(), faults.clone());
        async move {
            let task = TaskContext::of(&req).unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            faults.fail_update.store(1, Ordering::SeqCst);
            *seen.lock().unwrap() = Some(task.extend_ttl(Duration::from_secs(60)).await);
            std::future::pending::<()>().await;
            Ok(json!({}))
        }
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(*extended.lock().unwrap(), Some(false), "not recorded");
    assert_eq!(status(&mut svc, &id).await["ttlMs"], 10_000);
    tokio::time::sleep(Duration::from_secs(9)).await;
    let got = status(&mut svc, &id).await;
    assert_eq!(
        got["status"], "failed",
        "the TTL reported is the one enforced: {got}"
    );
}
