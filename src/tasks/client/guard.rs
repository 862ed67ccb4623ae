//! [`CancelOnDrop`]: the `tasks/cancel` of a task whose call is given up.

use std::time::Duration;

use serde_json::Value;
use tokio_util::task::TaskTracker;
use tower::{Service, ServiceExt};

use super::task_request;
use crate::McpRequest;

/// Sends `tasks/cancel` for a task whose call is dropped (or failed) before
/// the task ended: once, in the background, bounded in time. Disarmed when
/// the task ended or the server no longer knows it.
pub(super) struct CancelOnDrop<S>
where
    S: Service<McpRequest, Response = Value> + Send + 'static,
    S::Future: Send + 'static,
{
    inner: Option<S>,
    id: String,
    timeout: Duration,
    tracker: TaskTracker,
}

impl<S> CancelOnDrop<S>
where
    S: Service<McpRequest, Response = Value> + Send + 'static,
    S::Future: Send + 'static,
{
    pub(super) fn new(inner: S, id: String, timeout: Duration, tracker: TaskTracker) -> Self {
        Self {
            inner: Some(inner),
            id,
            timeout,
            tracker,
        }
    }

    /// Nothing to cancel: the task ended, or is gone.
    pub(super) fn disarm(&mut self) {
        self.inner = None;
    }
}

impl<S> Drop for CancelOnDrop<S>
where
    S: Service<McpRequest, Response = Value> + Send + 'static,
    S::Future: Send + 'static,
{
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(task_id = %crate::sanitize::for_log(&self.id), "no runtime to send tasks/cancel on: the task runs on until its TTL");
            return;
        };
        let req = task_request("tasks/cancel", &self.id, None);
        let (id, timeout) = (crate::sanitize::for_log(&self.id), self.timeout);
        self.tracker.spawn_on(
            async move {
                // `timeout` with `Duration::MAX` never elapses (no deadline).
                match tokio::time::timeout(timeout, inner.oneshot(req)).await {
                    Ok(Ok(_)) => {
                        tracing::debug!(task_id = %id, "task cancelled (tasks/cancel acknowledged)")
                    }
                    Ok(Err(_)) => tracing::debug!(task_id = %id, "tasks/cancel failed"),
                    Err(_) => {
                        tracing::debug!(task_id = %id, "tasks/cancel unanswered within its timeout")
                    }
                }
            },
            &runtime,
        );
    }
}
