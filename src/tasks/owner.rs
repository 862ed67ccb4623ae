//! Tasks whose work runs on another replica: the signals a store carries
//! to a task's owner ([`TaskSignal`]), the executor's loop that takes them,
//! and the owner lease that turns a vanished owner's tasks `failed`.
//!
//! Each [`TasksLayer`](super::TasksLayer) is an owner, with a random id;
//! the records of its tasks name it ([`TaskRecord::owner`]). A
//! `tasks/cancel` or `tasks/update` served by another replica writes to
//! the store and asks the store to tell the owner
//! ([`TaskStore::signal_owner`]); the owner's executor takes its signals
//! from [`TaskStore::owner_signals`], a stream it polls from its first
//! task on, for as long as the layer lives.

use std::sync::Weak;

use futures_util::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::executor::Inner;
use super::layer::TasksLayer;
use super::record::{TaskEnd, TaskRecord};
use super::store::{StoreError, TaskStore};
use crate::jsonrpc::ErrorObject;
use crate::CancelReason;

/// What a replica asks of the replica that runs a task.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TaskSignal {
    /// Task `id` has ended in the store (`tasks/cancel`, or its owner's
    /// lease lapsed): stop its work (token, grace, drop).
    Cancel {
        /// The task.
        id: String,
    },
    /// `tasks/update` answered these outstanding input requests of task
    /// `id` (by key): the handler's waiting
    /// [`TaskContext::input`](super::TaskContext::input) calls resolve.
    Input {
        /// The task.
        id: String,
        /// The answers, by input key.
        answers: Map<String, Value>,
    },
}

/// The status message of a task whose owner's lease lapsed.
pub(crate) const OWNER_GONE: &str =
    "task failed: its server went away (the lease of the replica running it lapsed)";

/// Takes the owner's signals from the store while the executor lives:
/// spawned by the executor with its first task (inside a runtime), ended
/// when the executor is dropped (`stop`) or the stream ends.
pub(crate) async fn run_signals(
    store: std::sync::Arc<dyn TaskStore>,
    owner: String,
    executor: Weak<Inner>,
    stop: CancellationToken,
) {
    let Some(mut signals) = store.owner_signals(&owner) else {
        return;
    };
    drop(store);
    loop {
        let signal = tokio::select! {
            () = stop.cancelled() => return,
            s = signals.next() => match s {
                Some(s) => s,
                None => return,
            },
        };
        let Some(inner) = executor.upgrade() else {
            return;
        };
        deliver(&inner, signal);
    }
}

/// Delivers one signal to a task of this executor (none: nothing to do;
/// a signal may come twice, the second finds nothing waiting).
fn deliver(inner: &Inner, signal: TaskSignal) {
    match signal {
        TaskSignal::Cancel { id } => {
            if let Some(core) = inner.get(&id) {
                core.cancellation
                    .cancel(CancelReason::peer(Some("tasks/cancel on another replica")));
            }
        }
        TaskSignal::Input { id, answers } => {
            if let Some(core) = inner.get(&id) {
                for (key, tx) in core.take_pending(&answers) {
                    let _ = tx.send(answers.get(&key).cloned().unwrap_or_default());
                }
            }
        }
    }
}

impl TasksLayer {
    /// Task `id` as a `tasks/*` request sees it: a task that has not ended
    /// and whose owner (another replica) lost its lease is ended `failed`
    /// first (first writer wins: an end recorded meanwhile stays).
    pub(crate) async fn read(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let record = self.store.get(id).await?;
        let Some(r) = &record else {
            return Ok(None);
        };
        let foreign = r.owner.as_deref().filter(|o| *o != self.executor.owner());
        let Some(owner) = foreign else {
            return Ok(record);
        };
        if r.status.is_terminal() || self.store.owner_alive(owner).await? {
            return Ok(record);
        }
        let end = TaskEnd::Failed(ErrorObject::new(ErrorObject::INTERNAL_ERROR, OWNER_GONE));
        if self
            .store
            .finish(id, end, self.config.run.retention)
            .await?
        {
            // A slow owner stops the work when it hears (or re-reads) it.
            let signal = TaskSignal::Cancel { id: id.to_owned() };
            if let Err(e) = self.store.signal_owner(owner, signal).await {
                tracing::debug!(target: "tower_mcp_cancel::task", error = %e, "owner not signalled");
            }
        }
        self.store.get(id).await
    }
}
