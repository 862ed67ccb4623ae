//! Two replicas of a server (two tasks layers) on a store that goes
//! through a failover, and what the tests read of it.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::time::timeout;
use tower_mcp_cancel::tasks::{StoreError, TaskChange, TaskPolicy, TaskStore, TasksLayer};
use tower_mcp_cancel_redis::{RedisStore, RedisStoreBuilder};

use super::*;

/// A bound, not a synchronisation: every wait here ends well before it.
pub const BOUND: Duration = Duration::from_secs(20);

pub fn replica(store: RedisStore) -> TasksLayer {
    TasksLayer::with_store(store)
        .tool("sleep", TaskPolicy::optional())
        .tool("ask", TaskPolicy::optional())
}

/// Runs `sleep` tasks on A until cancelled, reads and cancels them on B.
pub struct Fleet {
    pub a: TasksLayer,
    pub on_a: Svc,
    pub on_b: Svc,
    pub store_b: RedisStore,
    pub tasks: Vec<(String, tokio::sync::oneshot::Receiver<()>)>,
}

impl Fleet {
    /// Two replicas on stores made by `builder` (each its own
    /// connection), acknowledged by `durable` Redis replicas.
    pub async fn new(builder: impl Fn(usize) -> RedisStoreBuilder, durable: usize) -> Self {
        // Short re-reads: whatever a failover loses of the messages, the
        // re-read delivers within its period.
        let make = |first| {
            builder(first)
                .timeout(Duration::from_millis(1500))
                .reread(Duration::from_millis(200))
                .lease(Duration::from_secs(60))
                .acknowledged_by(durable)
                .connect()
        };
        let a = replica(make(0).await.unwrap());
        let store_b = make(1).await.unwrap();
        Self {
            on_a: stack(a.clone(), sleeper),
            on_b: stack(replica(store_b.clone()), sleeper),
            a,
            store_b,
            tasks: Vec::new(),
        }
    }

    /// A running task, acknowledged.
    pub async fn start(&mut self) -> Result<String, serde_json::Value> {
        let (p, rx) = probe();
        let n = i64::try_from(self.tasks.len()).unwrap();
        let req = call(n, "sleep", json!({"ms": 600_000})).with_extension(p);
        let out = match send(&mut self.on_a, req).await {
            Ok(out) if out["resultType"] == "task" => out,
            Ok(out) => return Err(out),
            Err(e) => return Err(json!({"error": e.to_string()})),
        };
        let id = out["taskId"].as_str().unwrap().to_owned();
        self.tasks.push((id.clone(), rx));
        Ok(id)
    }

    /// Every acknowledged task reads `working` on B, then a cancel on B
    /// drops its work on A and it reads `cancelled`.
    pub async fn all_survive_and_end(&mut self) {
        for (id, dropped) in std::mem::take(&mut self.tasks) {
            let got = until_status(&mut self.on_b, &id, "working").await;
            assert_eq!(got["status"], "working", "{got}");
            let ack = send(&mut self.on_b, task_req(3, "tasks/cancel", &id, json!({})))
                .await
                .unwrap();
            assert_eq!(ack["resultType"], "complete", "{ack}");
            timeout(BOUND, dropped)
                .await
                .expect("A dropped the work")
                .unwrap();
            until_status(&mut self.on_b, &id, "cancelled").await;
        }
        timeout(BOUND, self.a.handle().drained())
            .await
            .expect("every task on A ended");
    }
}

/// Writes task `id` (a status message: a write, which a demoted primary
/// refuses) through `store` every 10 ms until `switched` holds and a
/// write succeeded after it; every failure is `Unavailable` within the
/// store's timeout (1.5 s) plus scheduling slack. How long writes failed
/// (first failure to last; zero when none did).
pub async fn failing_until_served<F: std::future::Future<Output = bool>>(
    store: &RedisStore,
    id: &str,
    mut switched: impl FnMut() -> F,
) -> Duration {
    let start = Instant::now();
    let mut failed: Option<(Instant, Instant)> = None;
    let mut done = false;
    loop {
        assert!(start.elapsed() < BOUND, "calls still fail after {BOUND:?}");
        let call = Instant::now();
        let change = TaskChange::Message(format!("at {:?}", start.elapsed()));
        match store.update(id, change).await {
            Ok(_) if done => break,
            Ok(_) => done = switched().await,
            Err(StoreError::Unavailable(_)) => {
                assert!(call.elapsed() < Duration::from_millis(2500), "a call hung");
                let first = failed.map_or(call, |(first, _)| first);
                failed = Some((first, Instant::now()));
                done = switched().await;
            }
            Err(e) => panic!("not Unavailable: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    failed.map_or(Duration::ZERO, |(first, last)| last - first)
}
