//! Two layers (two replicas) sharing one store: a `tasks/cancel` or
//! `tasks/update` served by one reaches the work on the other through the
//! store's owner signals, and an owner whose lease lapsed leaves `failed`
//! tasks, never overwritten by its late answer.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::mpsc;

use super::*;

/// A memory store with owner signals carried by in-process channels, and
/// leases the test revokes.
#[derive(Clone, Default)]
struct Shared {
    inner: MemoryStore,
    bus: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<TaskSignal>>>>,
    /// Owners whose lease lapsed.
    gone: Arc<Mutex<HashSet<String>>>,
    /// Signals sent (delivered or not).
    sent: Arc<Mutex<Vec<TaskSignal>>>,
    /// Whether signals are lost on the way.
    lose: Arc<std::sync::atomic::AtomicBool>,
    /// How many of the next signal streams end at once.
    ending_streams: Arc<AtomicUsize>,
}

impl TaskStore for Shared {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.create(record)
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
    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.sent.lock().unwrap().push(signal.clone());
        if !self.lose.load(Ordering::SeqCst) {
            if let Some(tx) = self.bus.lock().unwrap().get(owner) {
                let _ = tx.send(signal);
            }
        }
        Box::pin(async { Ok(()) })
    }
    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        let ending = self.ending_streams.load(Ordering::SeqCst);
        if ending > 0 {
            self.ending_streams.store(ending - 1, Ordering::SeqCst);
            return Some(Box::pin(futures_util::stream::empty()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.bus.lock().unwrap().insert(owner.to_owned(), tx);
        Some(Box::pin(futures_util::stream::unfold(rx, |mut rx| async {
            rx.recv().await.map(|s| (s, rx))
        })))
    }
    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let alive = !self.gone.lock().unwrap().contains(owner);
        Box::pin(async move { Ok(alive) })
    }
}

fn replicas(store: &Shared) -> (TasksLayer, TasksLayer) {
    let make = || {
        TasksLayer::with_store(store.clone())
            .tool("sleep", TaskPolicy::optional())
            .tool("ask", TaskPolicy::optional())
    };
    (make(), make())
}

fn owner_of(store: &Shared, id: &str) -> String {
    let r = futures_util::FutureExt::now_or_never(store.inner.get(id))
        .unwrap()
        .unwrap()
        .unwrap();
    r.owner.expect("a record names its owner")
}

#[tokio::test(start_paused = true)]
async fn a_cancel_on_another_replica_drops_the_work_on_its_owner() {
    let store = Shared::default();
    let (a, b) = replicas(&store);
    assert_ne!(
        a.shared.executor.owner(),
        b.shared.executor.owner(),
        "one owner per layer"
    );
    let mut on_a = stack(a, sleeper);
    let mut on_b = stack(b.clone(), sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let id = create(&mut on_b, req).await;
    assert_eq!(owner_of(&store, &id), b.shared.executor.owner());
    let got = send(&mut on_a, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working", "read on the other replica: {got}");
    let ack = send(&mut on_a, task_req(3, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    assert_eq!(
        *store.sent.lock().unwrap(),
        vec![TaskSignal::Cancel { id: id.clone() }]
    );
    tokio::time::timeout(Duration::from_secs(1), dropped)
        .await
        .expect("the owner drops the work")
        .unwrap();
    let got = send(&mut on_b, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    b.handle().drained().await;
}

#[tokio::test(start_paused = true)]
async fn tasks_update_on_another_replica_answers_the_owners_input() {
    let store = Shared::default();
    let (a, b) = replicas(&store);
    let mut on_a = stack(a, |_req: McpRequest| async { Ok(json!({})) });
    let mut on_b = stack(b, |req: McpRequest| async move {
        let task = TaskContext::of(&req).unwrap();
        let ask = json!({"method": "elicitation/create", "params": {"message": "name?"}});
        let answer = task.input("name", ask).await?;
        Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}))
    });
    let id = create(&mut on_b, call(1, "ask", json!({}), true)).await;
    tokio::task::yield_now().await;
    let got = send(&mut on_a, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "input_required", "{got}");
    let answer = json!({"inputResponses": {
        "name": {"action": "accept", "content": {"name": "Ada"}},
        "stray": {"action": "accept"}
    }});
    send(&mut on_a, task_req(3, "tasks/update", &id, answer))
        .await
        .unwrap();
    let got = send(&mut on_a, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert!(got.get("inputRequests").is_none(), "gone at once: {got}");
    let sent = store.sent.lock().unwrap().clone();
    assert!(
        matches!(&sent[..], [TaskSignal::Input { answers, .. }] if answers.len() == 1),
        "only the outstanding key is signalled: {sent:?}"
    );
    let done = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            let got = send(&mut on_a, task_req(5, "tasks/get", &id, json!({})))
                .await
                .unwrap();
            if got["status"] == "completed" {
                return got;
            }
            // The paused clock: lets the owner's loop run between reads.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the owner's handler got its answer");
    assert_eq!(done["result"]["content"][0]["text"], "Ada");
}

#[tokio::test(start_paused = true)]
async fn an_owner_whose_lease_lapsed_leaves_a_failed_task_its_late_answer_cannot_change() {
    let store = Shared::default();
    let (a, b) = replicas(&store);
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let go = Arc::new(Mutex::new(Some(go_rx)));
    let (ended_tx, ended_rx) = oneshot::channel::<()>();
    let ended = Arc::new(Mutex::new(Some(ended_tx)));
    let mut on_a = stack(a, |_req: McpRequest| async { Ok(json!({})) });
    let mut on_b = stack(b.clone(), move |_req: McpRequest| {
        let go = go.lock().unwrap().take();
        let ended = ended.lock().unwrap().take();
        async move {
            // Slow, and deaf to its token: it answers when told.
            if let Some(go) = go {
                let _ = go.await;
            }
            drop(ended);
            Ok(json!({"content": [], "isError": false}))
        }
    });
    let id = create(&mut on_b, call(1, "sleep", json!({}), true)).await;
    // B is alive but slow: its lease lapsed, and what it is told is lost.
    store
        .gone
        .lock()
        .unwrap()
        .insert(b.shared.executor.owner().to_owned());
    store.lose.store(true, Ordering::SeqCst);
    let got = send(&mut on_a, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "failed", "{got}");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("went away"),
        "{got}"
    );
    go_tx.send(()).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), ended_rx)
        .await
        .expect("the slow handler answered");
    b.handle().drained().await;
    let got = send(&mut on_b, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "failed", "first writer wins: {got}");
    assert!(got.get("result").is_none());
}

#[tokio::test(start_paused = true)]
async fn the_owners_own_tasks_are_never_failed_for_its_lease() {
    let store = Shared::default();
    let (_, b) = replicas(&store);
    let mut on_b = stack(b.clone(), sleeper);
    let id = create(&mut on_b, call(1, "sleep", json!({"ms": 1_000}), true)).await;
    store
        .gone
        .lock()
        .unwrap()
        .insert(b.shared.executor.owner().to_owned());
    let got = send(&mut on_b, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working", "it runs here: {got}");
}

#[tokio::test(start_paused = true)]
async fn an_owner_whose_signal_stream_ended_asks_for_it_again() {
    let store = Shared::default();
    store.ending_streams.store(2, Ordering::SeqCst);
    let (a, b) = replicas(&store);
    let mut on_a = stack(a, sleeper);
    let mut on_b = stack(b.clone(), sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 600_000}), true));
    let id = create(&mut on_b, req).await;
    // Its first two streams end at once; the third carries the cancel.
    tokio::time::sleep(crate::tasks::owner::RESUBSCRIBE * 3).await;
    assert_eq!(store.ending_streams.load(Ordering::SeqCst), 0);
    send(&mut on_a, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), dropped)
        .await
        .expect("the owner drops the work")
        .unwrap();
    b.handle().drained().await;
}
