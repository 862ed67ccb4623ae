//! The slots of one executor: the tasks whose work runs (each holds one of
//! the `max_tasks` slots), and the ends their store has not taken yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::context::TaskCore;
use super::record::TaskEnd;

/// The tasks of one executor. Woken when the last task ended and the last
/// end was written.
#[derive(Default)]
pub(crate) struct Slots {
    map: Mutex<Map>,
    idle: Notify,
}

#[derive(Default)]
struct Map {
    /// Those whose work runs.
    running: HashMap<String, Arc<TaskCore>>,
    /// Those whose work ended but whose end the store has not taken yet
    /// (it failed): retried by their runner, and the truth a `tasks/*`
    /// request of this process answers meanwhile; with whether
    /// [`drained`](Slots::drained) still waits for it.
    unwritten: HashMap<String, (TaskEnd, bool)>,
}

impl Map {
    fn idle(&self) -> bool {
        self.running.is_empty() && !self.unwritten.values().any(|(_, waited)| *waited)
    }
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        // A panic while holding the lock leaves maps that are each whole.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the map, and wakes the drain if that made it idle.
    fn change(&self, f: impl FnOnce(&mut Map)) {
        let mut map = self.lock();
        f(&mut map);
        if map.idle() {
            self.idle.notify_waiters();
        }
    }

    /// How many tasks run.
    pub(crate) fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.lock().running.get(id).cloned()
    }

    /// The end of task `id` when its work ended and the store has not
    /// taken that end yet.
    pub(crate) fn unwritten(&self, id: &str) -> Option<TaskEnd> {
        self.lock().unwritten.get(id).map(|(end, _)| end.clone())
    }

    /// Takes a slot for `core`, unless `max` run already (`false`).
    pub(crate) fn take(&self, core: &Arc<TaskCore>, max: usize) -> bool {
        let mut map = self.lock();
        if map.running.len() >= max {
            return false;
        }
        map.running.insert(core.id.clone(), core.clone());
        true
    }

    /// Frees task `id`'s slot: its work is over. `unwritten`: its end, when
    /// the store has not taken it (kept until [`written`](Self::written)).
    pub(crate) fn finished(&self, id: &str, unwritten: Option<TaskEnd>) {
        self.change(|map| {
            map.running.remove(id);
            if let Some(end) = unwritten {
                map.unwritten.insert(id.to_owned(), (end, true));
            }
        });
    }

    /// Task `id`'s end is written.
    pub(crate) fn written(&self, id: &str) {
        self.change(|map| {
            map.unwritten.remove(id);
        });
    }

    /// [`drained`](Self::drained) no longer waits for task `id`'s
    /// unwritten end (it is still written as soon as the store takes it).
    pub(crate) fn not_waited(&self, id: &str) {
        self.change(|map| {
            if let Some((_, waited)) = map.unwritten.get_mut(id) {
                *waited = false;
            }
        });
    }

    /// Resolves once no task runs and every end waited for is written.
    pub(crate) async fn drained(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.lock().idle() {
                return;
            }
            idle.await;
        }
    }
}
