//! `notifications/tasks` on a `subscriptions/listen` stream that asked for
//! task ids.

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
pub(crate) async fn listen(
    layer: Shared,
    ctx: RequestContext,
    subscription: RequestId,
    ids: Vec<String>,
    principal: Option<String>,
) -> Result<Value, BoxError> {
    let mut changes = layer.watched.subscribe();
    let mut agreed = Vec::new();
    for id in ids {
        if let Ok(Some(r)) = layer.store.get(&id).await {
            if layer.visible(&r, principal.as_ref()) && !agreed.contains(&id) {
                agreed.push(id);
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
    loop {
        let due: Vec<String> = match changes.recv().await {
            Ok(id) if agreed.iter().any(|a| **a == *id) => vec![id.to_string()],
            Ok(_) => continue,
            // Fell behind: every followed task, as it is now.
            Err(broadcast::error::RecvError::Lagged(_)) => agreed.clone(),
            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
        };
        for id in due {
            if let Ok(Some(record)) = layer.store.get(&id).await {
                if !send(record).await {
                    // The stream is over; whoever ended it drops this future.
                    return std::future::pending().await;
                }
            }
        }
    }
}
