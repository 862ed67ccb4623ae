//! Tasks whose work runs on another replica: the signals a store carries
//! to a task's owner ([`TaskSignal`](super::TaskSignal)), the loop that takes them,
//! and the owner lease that turns a vanished owner's tasks `failed`.
//!
//! Each [`TasksLayer`](super::TasksLayer) is an owner, with a random id;
//! the records of its tasks name it ([`TaskRecord::owner`]). A
//! `tasks/cancel` or `tasks/update` served by another replica writes to
//! the store and asks the store to tell the owner
//! ([`TaskStore::signal_owner`]); the owner's executor takes its signals
//! from [`TaskStore::owner_signals`], a stream it polls from its first
//! task on, for as long as the layer lives.

use std::panic::AssertUnwindSafe;

use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::store::{TaskSignal, TaskStore};

/// The status message of a task whose owner's lease lapsed.
pub(crate) const OWNER_GONE: &str =
    "task failed: its server went away (the lease of the replica running it lapsed)";

/// How long the owner waits before it asks the store for its signals again
/// after their stream ended or panicked.
pub(crate) const RESUBSCRIBE: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes the owner's signals from the store while the executor lives:
/// spawned by the executor with its first task (inside a runtime), ended
/// when the executor is dropped (`stop`). A stream that ends, or panics,
/// while the executor lives is asked for again after [`RESUBSCRIBE`]:
/// polling it keeps the owner's lease, so an owner that stopped polling
/// would have its running tasks read `failed` on the other replicas.
pub(crate) async fn run_signals(
    store: std::sync::Arc<dyn TaskStore>,
    owner: String,
    deliver: impl Fn(TaskSignal) -> bool + Send,
    stop: CancellationToken,
) {
    loop {
        let Some(mut signals) = store.owner_signals(&owner) else {
            return;
        };
        loop {
            let next = AssertUnwindSafe(signals.next()).catch_unwind();
            let signal = tokio::select! {
                () = stop.cancelled() => return,
                s = next => s,
            };
            match signal {
                Ok(Some(signal)) => {
                    // `false`: the executor is gone.
                    if !deliver(signal) {
                        return;
                    }
                }
                Ok(None) => {
                    tracing::warn!(target: "tower_mcp_cancel::task", "the store's owner signals ended; asked for again");
                    break;
                }
                Err(_panic) => {
                    tracing::error!(target: "tower_mcp_cancel::task", "the store's owner signals panicked; asked for again");
                    break;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RESUBSCRIBE) => {}
        }
    }
}
