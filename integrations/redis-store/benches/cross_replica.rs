//! Tasks across replicas through a real `redis-server` (started here on a
//! loopback port): `tasks/cancel` on replica A -> the work dropped on
//! replica B, p50/p99 (pub/sub) and when the message is lost (the owner's
//! re-read); `tasks/get` CPU per request, in memory vs Redis.
//!
//! `cargo bench -p tower-mcp-cancel-redis --bench cross_replica`
//! (`-- --smoke` for a short run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use tower_mcp_cancel::tasks::{TaskEnd, TaskPolicy, TaskStore, TasksLayer};
use tower_mcp_cancel_redis::RedisStore;

fn layer(store: impl TaskStore) -> TasksLayer {
    TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{what}: n={} p50={:.2?} p99={:.2?} max={:.2?}",
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v[v.len() - 1]
    );
}

/// CPU time (user + system) of process `pid`, from /proc (Linux).
fn cpu(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let Some(redis) = Redis::start() else { return };
    let (n_cancel, n_lost, n_get) = if smoke {
        (20, 3, 2_000)
    } else {
        (500, 20, 20_000)
    };
    let period = Duration::from_secs(1);
    let store = || RedisStore::builder(redis.url()).reread(period).connect();
    let mut on_a = stack(layer(store().await.unwrap()), sleeper);
    let b = layer(store().await.unwrap());
    let mut on_b = stack(b.clone(), sleeper);
    let direct = store().await.unwrap();

    // Warm up: B's first task starts its signal loop (and subscription).
    let id = create(&mut on_b, call(0, "sleep", json!({"ms": 600_000}))).await;
    send(&mut on_a, task_req(0, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    b.handle().drained().await;

    let mut took = Vec::new();
    for n in 0..n_cancel {
        let (p, dropped) = probe();
        let id = create(
            &mut on_b,
            call(n, "sleep", json!({"ms": 600_000})).with_extension(p),
        )
        .await;
        let t0 = Instant::now();
        send(&mut on_a, task_req(n, "tasks/cancel", &id, json!({})))
            .await
            .unwrap();
        dropped.await.unwrap();
        took.push(t0.elapsed());
    }
    report(
        "tasks/cancel on replica A -> work dropped on replica B (pub/sub)",
        took,
    );

    let mut took = Vec::new();
    for n in 0..n_lost {
        let (p, dropped) = probe();
        let id = create(
            &mut on_b,
            call(n, "sleep", json!({"ms": 600_000})).with_extension(p),
        )
        .await;
        // The cancel recorded, its message lost (never published).
        let t0 = Instant::now();
        direct
            .finish(&id, TaskEnd::Cancelled(None), Duration::from_secs(60))
            .await
            .unwrap();
        dropped.await.unwrap();
        took.push(t0.elapsed());
    }
    report(
        &format!("message lost -> work dropped by the re-read (period {period:?})"),
        took,
    );
    b.handle().drained().await;

    let me = std::process::id().to_string();
    let server = redis.pid().map(|p| p.to_string()).unwrap_or_default();
    let runner = stack(layer(store().await.unwrap()), sleeper);
    let cases = [
        (
            "memory",
            layer(tower_mcp_cancel::tasks::MemoryStore::new()),
            None,
        ),
        ("redis", layer(store().await.unwrap()), None),
        // Read on another replica: the owner's lease is checked too.
        (
            "redis, task on another replica",
            layer(store().await.unwrap()),
            Some(runner),
        ),
    ];
    for (name, l, owner) in cases {
        let mut svc = stack(l.clone(), sleeper);
        let mut creator = owner.unwrap_or_else(|| svc.clone());
        let id = create(&mut creator, call(1, "sleep", json!({"ms": 600_000}))).await;
        let (c0, r0, t0) = (cpu(&me), cpu(&server), Instant::now());
        for n in 0..n_get {
            send(&mut svc, task_req(n, "tasks/get", &id, json!({})))
                .await
                .unwrap();
        }
        let (cpu_us, wall) = ((cpu(&me) - c0).as_micros() as f64, t0.elapsed());
        let redis_us = (cpu(&server) - r0).as_micros() as f64;
        let n = n_get as f64;
        println!(
            "tasks/get {name}: {:.0} req/s, CPU per request {:.1} us in the server process{}",
            n / wall.as_secs_f64(),
            cpu_us / n,
            if name.starts_with("redis") {
                format!(" + {:.1} us in redis-server", redis_us / n)
            } else {
                String::new()
            }
        );
        send(&mut creator, task_req(0, "tasks/cancel", &id, json!({})))
            .await
            .unwrap();
    }
}
