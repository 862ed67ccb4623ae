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

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::store::{TaskSignal, TaskStore};

/// The status message of a task whose owner's lease lapsed.
pub(crate) const OWNER_GONE: &str =
    "task failed: its server went away (the lease of the replica running it lapsed)";

/// Takes the owner's signals from the store while the executor lives:
/// spawned by the executor with its first task (inside a runtime), ended
/// when the executor is dropped (`stop`) or the stream ends.
pub(crate) async fn run_signals(
    store: std::sync::Arc<dyn TaskStore>,
    owner: String,
    deliver: impl Fn(TaskSignal) -> bool + Send,
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
        // `false`: the executor is gone.
        if !deliver(signal) {
            return;
        }
    }
}
