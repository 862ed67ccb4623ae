//! Settings past what Redis takes (`Duration::MAX` for "forever") are
//! clamped, not refused: a task is created, cancelled and kept.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;
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
}
