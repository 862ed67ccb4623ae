//! The Redis store against a real `redis-server` (started by the tests on
//! a loopback port; skipped with a message when it is not installed
//! outside CI): the store's rules, and two tasks layers (two replicas) in
//! this process sharing one Redis.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::time::timeout;
use tower_mcp_cancel::tasks::{TaskEnd, TaskPolicy, TaskStatus, TaskStore, TasksLayer};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_redis::RedisStore;

/// A bound, not a synchronisation: every wait here ends well before it.
const BOUND: Duration = Duration::from_secs(10);

async fn store(redis: &Redis) -> RedisStore {
    RedisStore::builder(redis.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap()
}

/// A record as the tasks layer makes one: through a layer's `tools/call`.
async fn record_via_layer(store: RedisStore) -> (String, Svc) {
    let layer = TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer, sleeper);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 600_000}))).await;
    (id, svc)
}

async fn pttl(redis: &Redis, key: String) -> i64 {
    match redis.command(redis::cmd("PTTL").arg(key)).await {
        redis::Value::Int(n) => n,
        other => panic!("PTTL: {other:?}"),
    }
}

#[tokio::test]
async fn create_get_update_finish_and_expiry_by_redis() {
    let Some(redis) = Redis::start() else { return };
    let a = store(&redis).await;
    let (id, _svc) = record_via_layer(a.clone()).await;
    // Another connection (another replica) finds it at once.
    let b = store(&redis).await;
    let r = b.get(&id).await.unwrap().expect("created before the ack");
    assert_eq!(r.status, TaskStatus::Working);
    assert!(r.owner.is_some());
    // A live record expires at TTL (one hour) + backstop (5 min).
    let live = pttl(&redis, format!("mcp:tasks:task:{id}")).await;
    assert!((3_600_000..=3_900_000).contains(&live), "{live}");
    let r = b
        .update(
            &id,
            tower_mcp_cancel::tasks::TaskChange::Message("half".into()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status_message.as_deref(), Some("half"));
    assert!(b
        .update(
            "nope",
            tower_mcp_cancel::tasks::TaskChange::Message("x".into())
        )
        .await
        .unwrap()
        .is_none());
    let retain = Duration::from_secs(30);
    assert!(b
        .finish(&id, TaskEnd::Cancelled(None), retain)
        .await
        .unwrap());
    assert!(!a
        .finish(&id, TaskEnd::Completed(json!({})), retain)
        .await
        .unwrap());
    assert!(!a
        .finish("nope", TaskEnd::Completed(json!({})), retain)
        .await
        .unwrap());
    let r = a.get(&id).await.unwrap().unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled);
    assert_eq!(r.result, None);
    // Kept for its retention by Redis's own expiry.
    let kept = pttl(&redis, format!("mcp:tasks:task:{id}")).await;
    assert!((1..=30_000).contains(&kept), "{kept}");
    // Changes to an ended task change nothing.
    let r = a
        .update(
            &id,
            tower_mcp_cancel::tasks::TaskChange::Message("late".into()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        r.status_message,
        a.get(&id).await.unwrap().unwrap().status_message
    );
    assert_ne!(r.status_message.as_deref(), Some("late"));
    // The record really goes: a short retention, read after it.
    let (id2, _svc2) = record_via_layer(a.clone()).await;
    assert!(a
        .finish(&id2, TaskEnd::Cancelled(None), Duration::from_millis(50))
        .await
        .unwrap());
    timeout(BOUND, async {
        while a.get(&id2).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("expired by Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_racing_ends_the_first_wins() {
    let Some(redis) = Redis::start() else { return };
    let (a, b) = (store(&redis).await, store(&redis).await);
    let layer = TasksLayer::with_store(a.clone()).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer, sleeper);
    let retain = Duration::from_secs(60);
    for n in 0..40 {
        let id = create(&mut svc, call(n, "sleep", json!({"ms": 600_000}))).await;
        let (a2, b2) = (a.clone(), b.clone());
        let (i1, i2) = (id.clone(), id.clone());
        let done = tokio::spawn(async move {
            a2.finish(&i1, TaskEnd::Completed(json!({"n": 1})), retain)
                .await
        });
        let cancel =
            tokio::spawn(async move { b2.finish(&i2, TaskEnd::Cancelled(None), retain).await });
        let (done, cancel) = (done.await.unwrap().unwrap(), cancel.await.unwrap().unwrap());
        assert!(done ^ cancel, "exactly one end wins ({done}, {cancel})");
        let r = a.get(&id).await.unwrap().unwrap();
        let expected = if done {
            TaskStatus::Completed
        } else {
            TaskStatus::Cancelled
        };
        assert_eq!(r.status, expected);
        assert_eq!(r.result.is_some(), done);
    }
}

fn replica(store: RedisStore) -> TasksLayer {
    TasksLayer::with_store(store)
        .tool("sleep", TaskPolicy::optional())
        .tool("slow", TaskPolicy::optional())
}

#[tokio::test]
async fn a_cancel_on_replica_a_drops_the_work_on_replica_b() {
    let Some(redis) = Redis::start() else { return };
    // Re-reads a minute apart: the drop is the pub/sub message's.
    let slow_reread = |r: &Redis| {
        RedisStore::builder(r.url())
            .reread(Duration::from_secs(60))
            .lease(Duration::from_secs(180))
    };
    let a = replica(slow_reread(&redis).connect().await.unwrap());
    let b = replica(slow_reread(&redis).connect().await.unwrap());
    let mut on_a = stack(a, sleeper);
    let mut on_b = stack(b.clone(), sleeper);
    let (p, dropped) = probe();
    let id = create(
        &mut on_b,
        call(1, "sleep", json!({"ms": 600_000})).with_extension(p),
    )
    .await;
    let got = send(&mut on_a, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working", "{got}");
    // B's subscription is made on its first tick, right after its first
    // task; a cancel before it would wait for the re-read.
    wait_subscribed(&redis, 1).await;
    let ack = send(&mut on_a, task_req(3, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete");
    timeout(BOUND, dropped)
        .await
        .expect("B dropped the work")
        .unwrap();
    timeout(BOUND, b.handle().drained())
        .await
        .expect("B's task ended");
    let got = send(&mut on_b, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
}

/// Waits (bounded) until `n` clients subscribe to owner channels.
async fn wait_subscribed(redis: &Redis, n: i64) {
    timeout(BOUND, async {
        loop {
            let v = redis.command(redis::cmd("PUBSUB").arg("NUMPAT")).await;
            let _ = v;
            let chans = redis
                .command(
                    redis::cmd("PUBSUB")
                        .arg("CHANNELS")
                        .arg("mcp:tasks:owner:*"),
                )
                .await;
            if let redis::Value::Array(c) = chans {
                if c.len() as i64 >= n {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("subscribed");
}

#[tokio::test]
async fn a_lost_message_is_delivered_by_the_reread_within_its_period() {
    let Some(redis) = Redis::start() else { return };
    let period = Duration::from_millis(200);
    let b_store = RedisStore::builder(redis.url())
        .reread(period)
        .connect()
        .await
        .unwrap();
    let b = replica(b_store);
    let mut on_b = stack(b.clone(), sleeper);
    let (p, dropped) = probe();
    let id = create(
        &mut on_b,
        call(1, "sleep", json!({"ms": 600_000})).with_extension(p),
    )
    .await;
    wait_subscribed(&redis, 1).await;
    // The cancel is recorded, and its message lost: A's store writes the
    // end and never publishes.
    let a = store(&redis).await;
    assert!(a
        .finish(&id, TaskEnd::Cancelled(None), Duration::from_secs(60))
        .await
        .unwrap());
    let written = std::time::Instant::now();
    timeout(BOUND, dropped)
        .await
        .expect("the re-read found it")
        .unwrap();
    let took = written.elapsed();
    // The period plus a loaded machine's scheduling (the bench measures it).
    assert!(took <= period * 5, "within the period: {took:?}");
}

#[tokio::test]
async fn a_lease_that_lapses_while_the_owner_is_slow_leaves_failed_for_good() {
    let Some(redis) = Redis::start() else { return };
    let b_store = RedisStore::builder(redis.url())
        .lease(Duration::from_secs(60))
        .reread(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let b = replica(b_store);
    let a = replica(store(&redis).await);
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let go = Arc::new(std::sync::Mutex::new(Some(go_rx)));
    let mut on_b = stack(b.clone(), move |_req: McpRequest| {
        let go = go.lock().unwrap().take();
        async move {
            if let Some(go) = go {
                let _ = go.await;
            }
            Ok(json!({"content": [], "isError": false}))
        }
    });
    let mut on_a = stack(a, sleeper);
    let id = create(&mut on_b, call(1, "slow", json!({}))).await;
    wait_subscribed(&redis, 1).await;
    // B is alive but slow: its lease lapsed, and it hears nothing (its
    // subscription is cut; its next re-read is a minute away).
    redis
        .command(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"))
        .await;
    let owner = b_owner(&redis).await;
    redis
        .command(redis::cmd("DEL").arg(format!("mcp:tasks:lease:{owner}")))
        .await;
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
    // Its late answer does not overwrite the end.
    go_tx.send(()).unwrap();
    timeout(BOUND, b.handle().drained())
        .await
        .expect("B's work ended");
    let got = send(&mut on_b, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "failed", "first writer wins: {got}");
    assert!(got.get("result").is_none());
}

async fn b_owner(redis: &Redis) -> String {
    match redis
        .command(redis::cmd("KEYS").arg("mcp:tasks:lease:*"))
        .await
    {
        redis::Value::Array(keys) => match keys.as_slice() {
            [redis::Value::BulkString(k)] => String::from_utf8_lossy(k)
                .trim_start_matches("mcp:tasks:lease:")
                .to_owned(),
            other => panic!("one lease expected: {other:?}"),
        },
        other => panic!("KEYS: {other:?}"),
    }
}

#[tokio::test]
async fn tasks_update_on_replica_a_answers_the_input_waiting_on_replica_b() {
    let Some(redis) = Redis::start() else { return };
    let a = replica(store(&redis).await);
    let b = replica(store(&redis).await);
    let mut on_a = stack(a, sleeper);
    let mut on_b = stack(b, |req: McpRequest| async move {
        let task = tower_mcp_cancel::tasks::TaskContext::of(&req).unwrap();
        let ask = json!({"method": "elicitation/create", "params": {"message": "name?"}});
        let answer = task.input("name", ask).await?;
        Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}))
    });
    let id = create(&mut on_b, call(1, "slow", json!({}))).await;
    let got = until_status(&mut on_a, &id, "input_required").await;
    assert_eq!(got["inputRequests"]["name"]["method"], "elicitation/create");
    let answer =
        json!({"inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}});
    send(&mut on_a, task_req(3, "tasks/update", &id, answer))
        .await
        .unwrap();
    let got = send(&mut on_a, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert!(
        got.get("inputRequests").is_none(),
        "gone before the ack: {got}"
    );
    let done = until_status(&mut on_a, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada");
}

#[tokio::test]
async fn a_crashed_replicas_task_reads_failed_once_its_lease_lapsed() {
    let Some(redis) = Redis::start() else { return };
    // The crashed replica: it created its task (and so took its lease), and
    // never refreshed the lease again.
    let crashed = RedisStore::builder(redis.url())
        .lease(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let record: tower_mcp_cancel::tasks::TaskRecord = serde_json::from_value(json!({
        "id": "0123456789abcdef0123456789abcdef", "status": "working",
        "status_message": null, "created_at_ms": 1, "updated_at_ms": 1,
        "ttl_ms": null, "poll_interval_ms": 100, "input_requests": {},
        "result": null, "error": null, "principal": null, "owner": "crashed-replica"
    }))
    .unwrap();
    crashed.create(record).await.unwrap();
    let mut on_a = stack(replica(store(&redis).await), sleeper);
    let id = "0123456789abcdef0123456789abcdef";
    let got = send(&mut on_a, task_req(1, "tasks/get", id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "working", "within its lease: {got}");
    let got = timeout(BOUND, async {
        loop {
            let got = send(&mut on_a, task_req(2, "tasks/get", id, json!({})))
                .await
                .unwrap();
            if got["status"] != "working" {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("failed after the lease");
    assert_eq!(got["status"], "failed", "{got}");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("went away"),
        "{got}"
    );
}

#[tokio::test]
async fn an_input_answer_whose_message_was_lost_is_delivered_by_the_reread() {
    let Some(redis) = Redis::start() else { return };
    let a = replica(store(&redis).await);
    let b_store = RedisStore::builder(redis.url())
        .reread(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let mut on_a = stack(a, sleeper);
    let mut on_b = stack(replica(b_store), |req: McpRequest| async move {
        let task = tower_mcp_cancel::tasks::TaskContext::of(&req).unwrap();
        let answer = task
            .input("name", json!({"method": "elicitation/create"}))
            .await?;
        Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}))
    });
    let id = create(&mut on_b, call(1, "slow", json!({}))).await;
    wait_subscribed(&redis, 1).await;
    until_status(&mut on_a, &id, "input_required").await;
    // B hears nothing until its next re-read: the message is lost.
    redis
        .command(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"))
        .await;
    let answer =
        json!({"inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}});
    send(&mut on_a, task_req(3, "tasks/update", &id, answer))
        .await
        .unwrap();
    let done = until_status(&mut on_a, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada");
}

/// The re-read takes every live task's inbox: one it cannot read (here a
/// key of the wrong type; on a cluster, a node failing over) does not
/// lose the answers it took from the others (taken is emptied).
#[tokio::test]
async fn an_unreadable_inbox_loses_no_other_tasks_answers() {
    watch_panics();
    let Some(redis) = Redis::start() else { return };
    let b_store = RedisStore::builder(redis.url())
        .reread(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let mut on_b = stack(replica(b_store), |req: McpRequest| async move {
        let task = tower_mcp_cancel::tasks::TaskContext::of(&req).unwrap();
        let answer = task
            .input("name", json!({"method": "elicitation/create"}))
            .await?;
        Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}))
    });
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(create(&mut on_b, call(n, "slow", json!({}))).await);
    }
    for id in &ids {
        timeout(BOUND, async {
            while send(&mut on_b, task_req(9, "tasks/get", id, json!({})))
                .await
                .unwrap()["status"]
                != "input_required"
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("input_required");
    }
    // One inbox unreadable; the others' answers written with no message:
    // only the re-read delivers them, each re-read failing on the first.
    redis
        .command(
            redis::cmd("SET")
                .arg(format!("mcp:tasks:inbox:{}", ids[0]))
                .arg("x"),
        )
        .await;
    for id in &ids[1..] {
        redis
            .command(
                redis::cmd("HSET")
                    .arg(format!("mcp:tasks:inbox:{id}"))
                    .arg("name")
                    .arg(r#"{"action":"accept","content":{"name":"Ada"}}"#),
            )
            .await;
    }
    for id in &ids[1..] {
        let done = until_status(&mut on_b, id, "completed").await;
        assert_eq!(done["result"]["content"][0]["text"], "Ada");
    }
    assert_no_panic();
}
