//! The store on each topology, in one run against real processes started
//! here on loopback ports: one `redis-server` (the baseline), a Redis
//! Cluster (three primaries, a replica each) and a primary with a replica
//! under one Sentinel. For each: `tasks/cancel` on replica A -> the work
//! dropped on replica B (p50/p99), and a creation's latency, with
//! `acknowledged_by(0)` and `(1)` (the cost of `WAIT`); ratios against the
//! one-node figures of the same run.
//!
//! `cargo bench -p tower-mcp-cancel-redis --bench topologies`
//! (`-- --smoke` for a short run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::cluster::{Cluster, Sentinel, MASTER};
use support::*;
use tower_mcp_cancel::tasks::{TaskPolicy, TasksLayer};
use tower_mcp_cancel_redis::{RedisStore, RedisStoreBuilder};

fn layer(store: RedisStore) -> TasksLayer {
    TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// p50 and p99 of `v`.
fn quantiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// Creation p50/p99 and cancel -> drop p50/p99 with stores from `make`.
async fn measure(make: impl Fn() -> RedisStoreBuilder, n: i64) -> [(Duration, Duration); 2] {
    let store = || make().reread(Duration::from_secs(1)).connect();
    let b = layer(store().await.unwrap());
    let mut on_a = stack(layer(store().await.unwrap()), sleeper);
    let mut on_b = stack(b.clone(), sleeper);
    // Warm up: B's first task starts its signal loop (and subscription).
    let id = create(&mut on_b, call(0, "sleep", json!({"ms": 600_000}))).await;
    send(&mut on_a, task_req(0, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    b.handle().drained().await;
    let (mut creations, mut cancels) = (Vec::new(), Vec::new());
    for n in 1..=n {
        let (p, dropped) = probe();
        let t0 = Instant::now();
        let id = create(
            &mut on_b,
            call(n, "sleep", json!({"ms": 600_000})).with_extension(p),
        )
        .await;
        creations.push(t0.elapsed());
        let t0 = Instant::now();
        send(&mut on_a, task_req(n, "tasks/cancel", &id, json!({})))
            .await
            .unwrap();
        dropped.await.unwrap();
        cancels.push(t0.elapsed());
    }
    b.handle().drained().await;
    [quantiles(creations), quantiles(cancels)]
}

fn row(name: &str, figures: [(Duration, Duration); 2], base: [(Duration, Duration); 2]) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let [(c50, c99), (x50, x99)] = figures;
    let [(b_c50, _), (b_x50, b_x99)] = base;
    println!(
        "{name}: creation p50 {c50:.2?} p99 {c99:.2?} ({:.2}x); \
         cancel on A -> dropped on B p50 {x50:.2?} ({:.2}x) p99 {x99:.2?} ({:.2}x)",
        ratio(c50, b_c50),
        ratio(x50, b_x50),
        ratio(x99, b_x99),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let n = if smoke { 20 } else { 300 };
    let Some(redis) = Redis::start() else { return };
    let Some(cluster) = Cluster::start(1).await else {
        return;
    };
    let Some(sentinel) = Sentinel::start().await else {
        return;
    };
    let base = measure(|| RedisStore::builder(redis.url()), n).await;
    row("one node (baseline)", base, base);
    let seeds = cluster.seeds();
    let on_cluster = |k: usize| RedisStore::cluster(seeds.clone()).acknowledged_by(k);
    row("cluster", measure(|| on_cluster(0), n).await, base);
    row(
        "cluster, acknowledged_by(1)",
        measure(|| on_cluster(1), n).await,
        base,
    );
    let sentinels = sentinel.sentinels();
    let through = |k: usize| RedisStore::sentinel(sentinels.clone(), MASTER).acknowledged_by(k);
    row("sentinel", measure(|| through(0), n).await, base);
    row(
        "sentinel, acknowledged_by(1)",
        measure(|| through(1), n).await,
        base,
    );
}
