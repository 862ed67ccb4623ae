//! Settings past what Redis takes (`Duration::MAX` for "forever") are
//! clamped, not refused: a task is created, cancelled and kept.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::time::timeout;
use tower_mcp_cancel::tasks::{TaskPolicy, TaskStatus, TaskStore, TasksLayer};
use tower_mcp_cancel_redis::RedisStore;

async fn pttl(redis: &Redis, key: String) -> i64 {
    match redis.command(redis::cmd("PTTL").arg(key)).await {
        redis::Value::Int(n) => n,
        other => panic!("PTTL: {other:?}"),
    }
}

#[tokio::test]
async fn settings_past_what_redis_takes_are_clamped_not_refused() {
    watch_panics();
    let Some(redis) = Redis::start() else { return };
    let store = RedisStore::builder(redis.url())
        .lease(Duration::MAX)
        .reread(Duration::MAX)
        .timeout(Duration::MAX)
        .backstop(Duration::MAX)
        .connect()
        .await
        .unwrap();
    let layer = TasksLayer::with_store(store.clone())
        .tool("sleep", TaskPolicy::optional())
        .ttl(None)
        .retention(Duration::MAX);
    let mut svc = stack(layer, sleeper);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 600_000}))).await;
    let ack = send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete");
    let r = store.get(&id).await.unwrap().unwrap();
    assert_eq!(r.status, TaskStatus::Cancelled);
    assert!(pttl(&redis, format!("mcp:tasks:task:{id}")).await > 0);
    assert_no_panic();
}

/// A bound, not a synchronisation: every wait here ends well before it.
const BOUND: Duration = Duration::from_secs(10);

/// Through `svc`: a task cancelled (its work dropped, it reads
/// `cancelled`), one that completes (it reads `completed`), then the
/// layer drains.
async fn a_task_cancelled_and_one_completed(layer: &TasksLayer, svc: &mut Svc) {
    let (p, dropped) = probe();
    let id = create(
        svc,
        call(1, "sleep", json!({"ms": 600_000})).with_extension(p),
    )
    .await;
    let ack = send(svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    let got = send(svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled", "{got}");
    timeout(BOUND, dropped)
        .await
        .expect("its work dropped")
        .unwrap();
    let id = create(svc, call(4, "sleep", json!({"ms": 50}))).await;
    let got = timeout(BOUND, async {
        loop {
            let got = send(svc, task_req(5, "tasks/get", &id, json!({})))
                .await
                .unwrap();
            if got["status"] != "working" {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("it ended");
    assert_eq!(got["status"], "completed", "{got}");
    timeout(BOUND, layer.handle().drained())
        .await
        .expect("drained");
    assert_no_panic();
}

#[tokio::test]
async fn the_store_settings_at_zero_are_taken_as_their_floor_and_tasks_still_end() {
    watch_panics();
    let Some(redis) = Redis::start() else { return };
    let store = RedisStore::builder(redis.url())
        .lease(Duration::ZERO)
        .reread(Duration::ZERO)
        .backstop(Duration::ZERO)
        .connect()
        .await
        .unwrap();
    let layer = TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer.clone(), sleeper);
    a_task_cancelled_and_one_completed(&layer, &mut svc).await;
}

#[tokio::test]
async fn a_zero_timeout_fails_calls_cleanly_or_serves_them_never_panics() {
    watch_panics();
    let Some(redis) = Redis::start() else { return };
    // Taken as 1 ms: on a loaded machine, a call may miss it.
    let store = match RedisStore::builder(redis.url())
        .timeout(Duration::ZERO)
        .connect()
        .await
    {
        Ok(store) => store,
        Err(e) => {
            assert!(e.to_string().contains("unavailable"), "{e}");
            return;
        }
    };
    let layer = TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional());
    let mut svc = stack(layer.clone(), sleeper);
    let mut served = 0;
    for n in 0..20 {
        let out = timeout(BOUND, send(&mut svc, call(n, "sleep", json!({"ms": 1}))))
            .await
            .expect("no hang");
        match out {
            Ok(v) => served += usize::from(v["resultType"] == "task"),
            Err(e) => assert!(e.to_string().contains("unavailable"), "{e}"),
        }
    }
    eprintln!("a 1 ms timeout: {served} of 20 tasks created");
    // Every task ends; an end Redis missed is written again until taken.
    timeout(BOUND, layer.handle().drained())
        .await
        .expect("drained");
    assert_no_panic();
}

#[tokio::test]
async fn the_largest_store_and_layer_settings_never_panic_and_tasks_still_end() {
    watch_panics();
    let Some(redis) = Redis::start() else { return };
    let store = RedisStore::builder(redis.url())
        .lease(Duration::MAX)
        .reread(Duration::MAX)
        .timeout(Duration::MAX)
        .backstop(Duration::MAX)
        .connect()
        .await
        .unwrap();
    let layer = TasksLayer::with_store(store.clone())
        .tool("sleep", TaskPolicy::optional())
        .ttl(Some(Duration::MAX))
        .poll_interval(Duration::MAX)
        .retention(Duration::MAX);
    let mut svc = stack(layer.clone(), sleeper);
    let id = create(&mut svc, call(9, "sleep", json!({"ms": 600_000}))).await;
    let live = pttl(&redis, format!("mcp:tasks:task:{id}")).await;
    assert!(live > 0, "a live record expires, clamped: {live}");
    let ack = send(&mut svc, task_req(10, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        TaskStatus::Cancelled
    );
    a_task_cancelled_and_one_completed(&layer, &mut svc).await;
}

/// A topology with no nodes, a URL that is none, a Sentinel that is not
/// there, or more replicas asked than exist: an error from `connect` or
/// the call, within the timeout, never a panic.
#[tokio::test]
async fn topologies_out_of_nothing_are_errors_not_panics() {
    watch_panics();
    let quick = Duration::from_millis(300);
    let bound = Duration::from_secs(5);
    let none: Vec<String> = Vec::new();
    let attempts = [
        RedisStore::cluster(none.clone()),
        RedisStore::cluster(["not a url"]),
        RedisStore::sentinel(none, "mymaster"),
        RedisStore::sentinel(["redis://127.0.0.1:1"], "mymaster"),
        RedisStore::sentinel(["not a url"], ""),
    ];
    for builder in attempts {
        let seen = format!("{builder:?}");
        let out = timeout(bound, builder.timeout(quick).connect())
            .await
            .unwrap_or_else(|_| panic!("{seen}: connect hung"));
        assert!(out.is_err(), "{seen}: connected to nothing");
    }
    let Some(redis) = Redis::start() else { return };
    // No replica at all, or more than a WAIT can count.
    for replicas in [1, usize::MAX] {
        let store = RedisStore::builder(redis.url())
            .timeout(quick)
            .acknowledged_by(replicas)
            .connect()
            .await
            .unwrap();
        let layer = TasksLayer::with_store(store).tool("sleep", TaskPolicy::optional());
        let mut svc = stack(layer, sleeper);
        let out = timeout(bound, send(&mut svc, call(1, "sleep", json!({"ms": 10}))))
            .await
            .expect("the creation ends");
        assert!(
            out.is_err(),
            "acknowledged by {replicas} of 0 replicas: {out:?}"
        );
    }
    assert_no_panic();
}

/// `primary_auth` is for a primary found through Sentinel: on one node
/// (reachable, without a password) and on a cluster it makes `connect`
/// fail, saying where the credentials go, rather than be ignored; and no
/// `Debug` of a builder shows the password.
#[tokio::test]
async fn primary_auth_elsewhere_than_sentinel_is_an_error_at_connect() {
    watch_panics();
    // The URLs' passwords are not shown either.
    let urls = [
        RedisStore::builder("redis://:hunter2@127.0.0.1:1/0"),
        RedisStore::builder("redis://app:hunter2@127.0.0.1:1"),
        RedisStore::cluster(["redis://:hunter2@127.0.0.1:1"]),
        RedisStore::sentinel(["redis://:hunter2@127.0.0.1:1"], "mymaster"),
    ];
    for builder in urls {
        let seen = format!("{builder:?}");
        assert!(
            !seen.contains("hunter2") && seen.contains("127.0.0.1:1"),
            "{seen}"
        );
    }
    let Some(redis) = Redis::start() else { return };
    let bound = Duration::from_secs(5);
    let attempts = [
        RedisStore::builder(redis.url()),
        RedisStore::cluster([redis.url()]),
    ];
    for builder in attempts {
        let builder = builder
            .timeout(Duration::from_millis(300))
            .primary_auth(Some("app"), "hunter2");
        let seen = format!("{builder:?}");
        assert!(!seen.contains("hunter2"), "the password shown: {seen}");
        let out = timeout(bound, builder.connect())
            .await
            .unwrap_or_else(|_| panic!("{seen}: connect hung"));
        let e = out.expect_err("primary_auth ignored");
        assert!(
            e.to_string().contains("in the URL"),
            "{seen}: not said where the credentials go: {e}"
        );
    }
    let through_sentinel =
        RedisStore::sentinel(["redis://127.0.0.1:1"], "mymaster").primary_auth(None, "hunter2");
    let seen = format!("{through_sentinel:?}");
    assert!(!seen.contains("hunter2"), "the password shown: {seen}");
    assert_no_panic();
}

/// TLS is not served by this build (the redis crate's TLS features are
/// not enabled): a `rediss://` URL, of a node, a cluster's seed or a
/// Sentinel, is an error at `connect` that says so, not a plain-text
/// connection.
#[tokio::test]
async fn a_tls_url_is_an_error_at_connect_in_this_build() {
    watch_panics();
    let attempts = [
        RedisStore::builder("rediss://127.0.0.1:1/"),
        RedisStore::sentinel(["rediss://127.0.0.1:1"], "mymaster"),
        RedisStore::cluster(["rediss://127.0.0.1:1"]),
    ];
    for builder in attempts {
        let seen = format!("{builder:?}");
        let out = timeout(Duration::from_secs(5), builder.connect())
            .await
            .unwrap_or_else(|_| panic!("{seen}: connect hung"));
        let e = out.expect_err("a TLS URL connected");
        eprintln!("TLS: {e}");
        assert!(e.to_string().contains("TLS"), "{seen}: {e}");
    }
    assert_no_panic();
}
