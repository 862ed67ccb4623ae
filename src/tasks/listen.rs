//! `notifications/tasks` on a `subscriptions/listen` stream that asked for
//! task ids.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::record::TaskRecord;
use super::shared::Shared;
use crate::error::BoxError;
use crate::jsonrpc::{RequestId, SUBSCRIPTION_ID_META};
use crate::RequestContext;

/// Serves a `subscriptions/listen` that asked only for task ids: the
/// acknowledgement names those the caller may see, then each of their
/// changes is sent as `notifications/tasks` (the task as `tasks/get`
/// would answer it), until the stream is cancelled.
///
/// Changes made in this process are told by [`Watched`]; those made by
/// another replica sharing the store (its handler's status, its end, an
/// end for a lapsed lease) are found by re-reading the followed tasks
/// every polling interval, and sent when the record differs from the one
/// sent last.
pub(crate) async fn listen(
    layer: Shared,
    ctx: RequestContext,
    subscription: RequestId,
    ids: Vec<String>,
    principal: Option<String>,
) -> Result<Value, BoxError> {
    let mut changes = layer.watched.subscribe();
    let mut agreed = Vec::new();
    let mut last: HashMap<String, TaskRecord> = HashMap::new();
    for id in ids {
        if let Ok(Some(r)) = layer.read(&id).await {
            if layer.visible(&r, principal.as_ref()) && !agreed.contains(&id) {
                agreed.push(id.clone());
                last.insert(id, r);
            }
        }
    }
    let meta = json!({ SUBSCRIPTION_ID_META: subscription });
    let ack = json!({"_meta": meta, "notifications": {"taskIds": agreed}});
    if !ctx
        .notify("notifications/subscriptions/acknowledged", &ack)
        .await
    {
        return std::future::pending().await;
    }
    let send = |record: TaskRecord| {
        let mut params = record.to_json(None);
        params["_meta"] = meta.clone();
        let ctx = &ctx;
        async move { ctx.notify("notifications/tasks", &params).await }
    };
    // Remote changes are noticed within a polling interval, and within a
    // minute whatever the interval (which may be `Duration::MAX`).
    let period = layer
        .config
        .run
        .poll_interval
        .clamp(Duration::from_millis(1), Duration::from_secs(60));
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // (ids to read, whether to send only what differs from the last sent)
        let (due, only_changed): (Vec<String>, bool) = tokio::select! {
            change = changes.recv() => match change {
                Ok(id) if agreed.iter().any(|a| **a == *id) => (vec![id.to_string()], false),
                Ok(_) => continue,
                // Fell behind: every followed task, as it is now.
                Err(broadcast::error::RecvError::Lagged(_)) => (agreed.clone(), false),
                Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
            },
            _ = recheck.tick() => (agreed.clone(), true),
        };
        for id in due {
            let Ok(Some(record)) = layer.read(&id).await else {
                continue;
            };
            if only_changed && last.get(&id) == Some(&record) {
                continue;
            }
            last.insert(id, record.clone());
            if !send(record).await {
                // The stream is over; whoever ended it drops this future.
                return std::future::pending().await;
            }
        }
    }
}
