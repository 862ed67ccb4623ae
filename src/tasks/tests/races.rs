//! The races the spec names (a get during creation, cancel against the TTL,
//! cancel against completion) and the ones this design makes (the creating
//! request gone before the promotion, a full executor or store, shutdown),
//! and the binding of a task to its creator.

use std::future::Future;
use std::sync::Arc;
use std::task::Context;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::{CancelReason, Cancellation};

/// A memory store whose creations wait for a permit.
struct GatedStore {
    inner: MemoryStore,
    gate: Arc<Notify>,
}

impl TaskStore for GatedStore {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.gate.notified().await;
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
        self.inner.update(id, change)
    }
    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.finish(id, end, retain)
    }
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(std::task::Waker::noop())
}

#[tokio::test(start_paused = true)]
async fn the_create_task_result_waits_for_the_record() {
    let gate = Arc::new(Notify::new());
    let store = GatedStore {
        inner: MemoryStore::new(),
        gate: gate.clone(),
    };
    let layer = TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer, sleeper);
    let mut creator = svc.clone();
    let mut answer =
        Box::pin(
            async move { send(&mut creator, call(1, "sleep", json!({"ms": 60_000}), true)).await },
        );
    for _ in 0..10 {
        assert!(answer.as_mut().poll(&mut noop_cx()).is_pending());
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    let created = answer.await.unwrap();
    let id = created["taskId"].as_str().unwrap();
    // Found at once: the answer came only once the record existed.
    let got = send(&mut svc, task_req(2, "tasks/get", id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working");
}

#[tokio::test(start_paused = true)]
async fn cancel_against_the_ttl_ends_the_task_once() {
    let layer = layer().ttl(Some(Duration::from_secs(10)));
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let id = create(&mut svc, req).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    // The TTL's timer and the cancel are both due now; one end wins.
    let ack = send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    dropped.await.unwrap();
    handle.drained().await;
    let first = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert!(
        first["status"] == "cancelled" || first["status"] == "failed",
        "{first}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = send(&mut svc, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(
        first["status"], later["status"],
        "a terminal status never changes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_completion_after_the_cancel_is_dropped() {
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let release = Arc::new(std::sync::Mutex::new(Some(release_rx)));
    let mut svc = stack(
        layer().grace(Duration::from_secs(5)),
        move |_req: McpRequest| {
            let release = release.lock().unwrap().take();
            async move {
                if let Some(r) = release {
                    let _ = r.await; // ignores its token: ends when released
                }
                Ok(json!({"content": [{"type": "text", "text": "finished"}]}))
            }
        },
    );
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    release_tx.send(()).unwrap(); // completes inside its grace
    tokio::time::sleep(Duration::from_millis(10)).await;
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled");
    assert!(got.get("result").is_none(), "{got}");
}

#[tokio::test(start_paused = true)]
async fn the_creating_request_dropped_before_the_promotion_drops_the_work() {
    let layer = TasksLayer::new().tool(
        "sleep",
        TaskPolicy::optional().after(Duration::from_secs(5)),
    );
    let handle = layer.handle();
    let seen = Arc::new(std::sync::Mutex::new(None::<Cancellation>));
    let s = seen.clone();
    let mut svc = stack(layer, move |req: McpRequest| {
        *s.lock().unwrap() = req.cancellation().cloned();
        sleeper(req)
    });
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let answer = svc.ready().await.unwrap().call(req);
    let answer = tokio::spawn(answer);
    tokio::time::sleep(Duration::from_secs(1)).await;
    answer.abort();
    dropped.await.unwrap();
    let work = seen.lock().unwrap().clone().unwrap();
    assert_eq!(work.reason(), Some(&CancelReason::ClientDisconnected));
    assert!(work.token().is_cancelled(), "the work's token fired");
    assert_eq!(handle.running(), 0, "never became a task");
}

#[tokio::test(start_paused = true)]
async fn a_transport_cancel_before_the_promotion_fires_the_works_token() {
    let layer = TasksLayer::new().tool(
        "sleep",
        TaskPolicy::optional().after(Duration::from_secs(5)),
    );
    let mut svc = stack(layer, |req: McpRequest| async move {
        let reason = RequestContext::of(&req)
            .cancellation()
            .unwrap()
            .cancelled()
            .await;
        Err::<Value, BoxError>(Box::new(crate::Cancelled::new(reason)))
    });
    let outer = Cancellation::new();
    let req = call(1, "sleep", json!({}), true).with_cancellation(outer.clone());
    let answer = tokio::spawn(svc.ready().await.unwrap().call(req));
    tokio::time::sleep(Duration::from_secs(1)).await;
    outer.cancel(CancelReason::peer(Some("stop")));
    let err = answer.await.unwrap().unwrap_err();
    let cancelled = err
        .downcast_ref::<crate::Cancelled>()
        .expect("the handler's Cancelled");
    assert_eq!(cancelled.reason(), &CancelReason::peer(Some("stop")));
}

#[tokio::test(start_paused = true)]
async fn past_max_tasks_or_a_full_store_the_call_is_refused_and_its_work_dropped() {
    for layer in [
        layer().max_tasks(1),
        TasksLayer::with_store(MemoryStore::with_capacity(1)).tool("sleep", TaskPolicy::optional()),
    ] {
        let mut svc = stack(layer, sleeper);
        create(&mut svc, call(1, "sleep", json!({"ms": 60_000}), true)).await;
        let (req, dropped) = with_probe(call(2, "sleep", json!({"ms": 60_000}), true));
        let err = send(&mut svc, req).await.unwrap_err();
        assert_eq!(code(&err), ErrorObject::INTERNAL_ERROR);
        assert!(err.to_string().contains("maximum of 1 tasks"), "{err}");
        dropped.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_running_tasks_after_the_drain_grace() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let layer = layer()
        .shutdown(shutdown.clone())
        .drain_grace(Duration::from_secs(2));
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    let short = create(&mut svc, call(1, "sleep", json!({"ms": 1_000}), true)).await;
    let (req, dropped) = with_probe(call(2, "sleep", json!({"ms": 60_000}), true));
    let long = create(&mut svc, req).await;
    let start = tokio::time::Instant::now();
    shutdown.cancel();
    handle.drained().await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    dropped.await.unwrap();
    let got = send(&mut svc, task_req(3, "tasks/get", &short, json!({})))
        .await
        .unwrap();
    assert_eq!(
        got["status"], "completed",
        "it finished within the drain grace"
    );
    let got = send(&mut svc, task_req(4, "tasks/get", &long, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "failed");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shut down"),
        "{got}"
    );
}

#[derive(Clone)]
struct Principal(&'static str);

#[tokio::test(start_paused = true)]
async fn another_callers_task_looks_unknown() {
    let layer = layer().bind(|ext| ext.get::<Principal>().map(|p| p.0.to_owned()));
    let mut svc = stack(layer, sleeper);
    let req = call(1, "sleep", json!({"ms": 60_000}), true).with_extension(Principal("alice"));
    let id = create(&mut svc, req).await;
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        for who in [Some("mallory"), None] {
            let mut req = task_req(2, method, &id, json!({"inputResponses": {}}));
            if let Some(w) = who {
                req = req.with_extension(Principal(w));
            }
            let err = send(&mut svc, req).await.unwrap_err();
            assert_eq!(
                code(&err),
                ErrorObject::INVALID_PARAMS,
                "{method} as {who:?}"
            );
        }
    }
    let req = task_req(3, "tasks/get", &id, json!({})).with_extension(Principal("alice"));
    assert_eq!(send(&mut svc, req).await.unwrap()["status"], "working");
}

#[tokio::test]
async fn server_discover_advertises_the_extension() {
    let mut svc = stack(layer(), |_req: McpRequest| async {
        Ok(json!({"resultType": "complete", "capabilities": {"tools": {}}}))
    });
    let out = send(&mut svc, McpRequest::new(1, "server/discover"))
        .await
        .unwrap();
    assert_eq!(out["capabilities"]["extensions"][EXTENSION], json!({}));
    assert_eq!(out["capabilities"]["tools"], json!({}));
    assert!(out["capabilities"].get("tasks").is_none());
}
