//! Redis failing at a task's two writes, against a real `redis-server`:
//! an end written while Redis is paused lands once it is back, and a
//! creation whose answer was lost ends `failed`, not `working` for ever;
//! Redis going away fails calls cleanly, and they recover after its restart.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde_json::{json, Value};
use support::*;
use tokio::sync::{oneshot, watch};
use tokio::time::timeout;
use tower_mcp_cancel::tasks::{
    StoreError, TaskChange, TaskEnd, TaskPolicy, TaskRecord, TaskSignal, TaskStatus, TaskStore,
    TasksLayer,
};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_redis::RedisStore;

/// A bound, not a synchronisation: every wait here ends well before it.
const BOUND: Duration = Duration::from_secs(10);

/// The Redis store's timeout in these tests: a paused Redis fails a call
/// this long after it was made.
const STORE_TIMEOUT: Duration = Duration::from_millis(200);

/// Once Redis answers again, an end the store failed is written within
/// the executor's longest wait between two tries (`END_RETRY_MAX`, 5 s)
/// plus one store call (its timeout); plus 1 s for a loaded machine.
const END_BOUND: Duration = Duration::from_millis(5_000 + 200 + 1_000);

/// A store over Redis that tells the test what its `finish` calls
/// answered, keeps the ids it was asked to create, and can lose the answer
/// of a `create` that Redis applied.
#[derive(Clone)]
struct Watched {
    inner: RedisStore,
    finishes: Arc<watch::Sender<Vec<Result<bool, String>>>>,
    created: Arc<Mutex<Vec<String>>>,
    lose_create_answer: Arc<AtomicBool>,
    /// The next `finish` says it arrived, then waits to be let through.
    hold_finish: Arc<Mutex<Option<Hold>>>,
}

type Hold = (oneshot::Sender<()>, oneshot::Receiver<()>);

impl Watched {
    fn new(inner: RedisStore) -> Self {
        Self {
            inner,
            finishes: Arc::new(watch::Sender::new(Vec::new())),
            created: Arc::default(),
            lose_create_answer: Arc::default(),
            hold_finish: Arc::default(),
        }
    }

    /// What the `n`th `finish` (from 0) answered, once it has.
    async fn finish_answer(&self, n: usize) -> Result<bool, String> {
        let mut rx = self.finishes.subscribe();
        let answers = rx
            .wait_for(|a| a.len() > n)
            .await
            .expect("the sender lives");
        answers[n].clone()
    }

    fn created(&self) -> Vec<String> {
        self.created.lock().unwrap().clone()
    }
}

impl TaskStore for Watched {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.created.lock().unwrap().push(record.id.clone());
            self.inner.create(record).await?;
            if self.lose_create_answer.swap(false, Ordering::SeqCst) {
                return Err(StoreError::Unavailable(
                    "written, its answer lost (staged)".into(),
                ));
            }
            Ok(())
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
        Box::pin(async move {
            let hold = self.hold_finish.lock().unwrap().take();
            if let Some((arrived, through)) = hold {
                let _ = arrived.send(());
                let _ = through.await;
            }
            let out = self.inner.finish(id, end, retain).await;
            let answer = out.as_ref().map(|b| *b).map_err(ToString::to_string);
            self.finishes.send_modify(|a| a.push(answer));
            out
        })
    }

    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.signal_owner(owner, signal)
    }

    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        self.inner.owner_signals(owner)
    }

    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.owner_alive(owner)
    }
}

async fn connect(redis: &Redis, timeout: Duration) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(timeout)
        .connect()
        .await
        .unwrap()
}

/// Task `id`'s record once it has ended, read by another replica's store
/// every 20 ms; `None` when it has not within `bound`.
async fn terminal(other: &RedisStore, id: &str, bound: Duration) -> Option<TaskRecord> {
    timeout(bound, async {
        loop {
            if let Ok(Some(r)) = other.get(id).await {
                if r.status.is_terminal() {
                    return r;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .ok()
}

/// A handler that answers "done" once the test says go.
fn on_go() -> (
    oneshot::Sender<()>,
    impl Fn(McpRequest) -> BoxFuture<'static, Result<Value, tower::BoxError>> + Clone,
) {
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let go = Arc::new(Mutex::new(Some(go_rx)));
    let handler = move |_req: McpRequest| -> BoxFuture<'static, _> {
        let go = go.lock().unwrap().take();
        Box::pin(async move {
            if let Some(go) = go {
                let _ = go.await;
            }
            Ok(json!({"content": [{"type": "text", "text": "done"}], "isError": false}))
        })
    };
    (go_tx, handler)
}

/// A task running on a replica over Redis (its store watched, its
/// handler waiting for `go`), and another store to read it through.
struct TaskToEnd {
    redis: Redis,
    store: Watched,
    other: RedisStore,
    handle: tower_mcp_cancel::tasks::TasksHandle,
    go: oneshot::Sender<()>,
    svc: Svc,
    id: String,
}

/// [`TaskToEnd`], or `None` without a `redis-server`.
async fn task_to_end() -> Option<TaskToEnd> {
    let redis = Redis::start()?;
    let store = Watched::new(connect(&redis, STORE_TIMEOUT).await);
    let other = connect(&redis, Duration::from_secs(2)).await;
    let layer = TasksLayer::with_store(store.clone()).tool("slow", TaskPolicy::optional());
    let handle = layer.handle();
    let (go, handler) = on_go();
    let mut svc = stack(layer, handler);
    let id = create(&mut svc, call(1, "slow", json!({}))).await;
    Some(TaskToEnd {
        redis,
        store,
        other,
        handle,
        go,
        svc,
        id,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_written_while_redis_is_paused_lands_once_it_is_back() {
    let Some(TaskToEnd {
        redis,
        store,
        other,
        handle,
        go,
        mut svc,
        id,
    }) = task_to_end().await
    else {
        return;
    };
    // The work ends while Redis answers nothing.
    redis.pause();
    go.send(()).unwrap();
    let first = timeout(BOUND, store.finish_answer(0))
        .await
        .expect("the end was tried");
    assert!(first.is_err(), "Redis is paused, yet: {first:?}");
    timeout(BOUND, async {
        while handle.running() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the slot is freed while the end is unwritten");
    assert!(
        timeout(Duration::ZERO, handle.drained()).await.is_err(),
        "drained() resolved with the end unwritten"
    );
    redis.resume();
    let back = Instant::now();
    let Some(r) = terminal(&other, &id, END_BOUND).await else {
        let now = other.get(&id).await;
        let answers = store.finishes.borrow().clone();
        panic!("the end was not written within {END_BOUND:?} of Redis coming back: {now:?}; finish answers {answers:?}");
    };
    let took = back.elapsed();
    assert_eq!(r.status, TaskStatus::Completed, "{r:?}");
    assert_eq!(r.result.as_ref().unwrap()["content"][0]["text"], "done");
    timeout(BOUND, handle.drained())
        .await
        .expect("drained once the end is written");
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    eprintln!(
        "end written {took:?} after Redis came back; finish answers {:?}",
        *store.finishes.borrow()
    );
}

/// The store's connections are dropped as the end is written: the
/// connection manager reconnects, and the end lands (on the first try when
/// it reconnected before it, on the next when the try met the dropped
/// connection — about half the runs here, "broken pipe").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_written_as_redis_drops_the_connection_lands_on_the_next() {
    let Some(TaskToEnd {
        redis,
        store,
        other,
        handle,
        go,
        svc: _svc,
        id,
    }) = task_to_end().await
    else {
        return;
    };
    let (arrived_tx, arrived) = oneshot::channel();
    let (through, through_rx) = oneshot::channel();
    *store.hold_finish.lock().unwrap() = Some((arrived_tx, through_rx));
    go.send(()).unwrap();
    timeout(BOUND, arrived)
        .await
        .expect("the end is being written")
        .unwrap();
    // Every command connection dropped (not this one, nor pub/sub).
    redis
        .command(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"))
        .await;
    through.send(()).unwrap();
    let Some(r) = terminal(&other, &id, END_BOUND).await else {
        let now = other.get(&id).await;
        let answers = store.finishes.borrow().clone();
        panic!("the end was not written within {END_BOUND:?} of the drop: {now:?}; finish answers {answers:?}");
    };
    assert_eq!(r.status, TaskStatus::Completed, "{r:?}");
    assert_eq!(r.result.as_ref().unwrap()["content"][0]["text"], "done");
    timeout(BOUND, handle.drained()).await.expect("drained");
    eprintln!("finish answers {:?}", *store.finishes.borrow());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_ends_failed_not_working_for_ever() {
    let Some(redis) = Redis::start() else { return };
    let store = Watched::new(connect(&redis, STORE_TIMEOUT).await);
    let other = connect(&redis, Duration::from_secs(2)).await;
    let layer = TasksLayer::with_store(store.clone()).tool("sleep", TaskPolicy::optional());
    let handle = layer.handle();
    let mut svc = stack(layer, sleeper);
    store.lose_create_answer.store(true, Ordering::SeqCst);
    let (p, dropped) = probe();
    let out = send(
        &mut svc,
        call(1, "sleep", json!({"ms": 600_000})).with_extension(p),
    )
    .await;
    if let Ok(v) = &out {
        assert_ne!(v["resultType"], "task", "announced a task not created: {v}");
    }
    let id = store.created().pop().expect("a create was asked");
    let written = other.get(&id).await.unwrap().expect("Redis has the record");
    assert_eq!(
        written.status,
        TaskStatus::Working,
        "as written: {written:?}"
    );
    let start = Instant::now();
    let Some(r) = terminal(&other, &id, END_BOUND).await else {
        let now = other.get(&id).await;
        panic!("the record still reads {now:?} {END_BOUND:?} after the lost answer");
    };
    assert_eq!(r.status, TaskStatus::Failed, "{r:?}");
    let message = &r.error.as_ref().expect("an error").message;
    assert!(message.contains("task not created"), "{message}");
    timeout(BOUND, dropped)
        .await
        .expect("its work is dropped")
        .unwrap();
    timeout(BOUND, handle.drained()).await.expect("drained");
    eprintln!("answer: {out:?}; failed {:?} after it", start.elapsed());
}

#[tokio::test]
async fn redis_going_away_fails_calls_cleanly_and_they_recover_after_its_restart() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let layer = TasksLayer::with_store(connect(&redis, Duration::from_millis(500)).await)
        .tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer.clone(), sleeper);
    let (p, dropped) = probe();
    let id = create(
        &mut svc,
        call(1, "sleep", json!({"ms": 300})).with_extension(p),
    )
    .await;
    redis.stop();
    let err = timeout(
        BOUND,
        send(&mut svc, task_req(2, "tasks/get", &id, json!({}))),
    )
    .await
    .expect("no hang")
    .unwrap_err();
    assert!(err.to_string().contains("unavailable"), "{err}");
    let err = timeout(
        BOUND,
        send(&mut svc, call(3, "sleep", json!({"ms": 600_000}))),
    )
    .await
    .expect("no hang")
    .unwrap_err();
    assert!(err.to_string().contains("unavailable"), "{err}");
    // The running task ends, its end not recorded: its slot is freed, and
    // drained() waits for its end, written again until Redis takes it.
    timeout(BOUND, dropped)
        .await
        .expect("its work ended")
        .unwrap();
    timeout(BOUND, async {
        while layer.handle().running() != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("its slot freed");
    assert!(
        timeout(Duration::ZERO, layer.handle().drained())
            .await
            .is_err(),
        "drained() resolved with the end unwritten"
    );
    redis.restart();
    // The next try (at most 5 s away) finds Redis back.
    timeout(BOUND, layer.handle().drained())
        .await
        .expect("drained once Redis is back");
    let id = timeout(BOUND, async {
        loop {
            match send(&mut svc, call(4, "sleep", json!({"ms": 600_000}))).await {
                Ok(v) => return v["taskId"].as_str().unwrap().to_owned(),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("recovered after the restart");
    let got = send(&mut svc, task_req(5, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working");
}
