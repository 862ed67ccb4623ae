//! The store seam: [`TaskStore`], and the in-memory [`MemoryStore`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::record::{TaskChange, TaskEnd, TaskRecord};

/// Where tasks are kept: records, their changes, one atomic end each, and
/// their expiry.
///
/// The futures that do a task's work are never in a store: they stay with
/// the [`TasksLayer`](super::TasksLayer) of the process that created the
/// task. A store shared by several processes (Redis, a database) lets any
/// of them answer `tasks/get` for a task another runs.
///
/// The rules a store keeps:
/// * [`create`](Self::create) resolves once a [`get`](Self::get) for the
///   task, from any process sharing the store, finds it: the layer answers
///   `CreateTaskResult` only then.
/// * [`update`](Self::update) and [`finish`](Self::finish) change a task
///   atomically ([`TaskRecord::apply`], [`TaskRecord::end`]); of two
///   racing ends, the first wins and the other returns `false`, so a
///   terminal status never changes.
/// * A record is kept for `retain` after its end, then it is gone: `get`
///   returns `None`.
///
/// # Several replicas
///
/// A store shared by several processes also carries what one replica asks
/// of the replica that runs a task, its *owner* ([`TaskRecord::owner`]:
/// each [`TasksLayer`](super::TasksLayer) is one, with a random id), and
/// says whether that owner is still there. The three methods for it have
/// defaults for a store of one process, where every owner is local:
/// nothing to deliver, every owner alive.
/// * [`signal_owner`](Self::signal_owner) carries a [`TaskSignal`] to the
///   owner: a `tasks/cancel` (after the store recorded the task
///   `cancelled`) and the answers of a `tasks/update` (after which the
///   answered keys leave the record).
/// * [`owner_signals`](Self::owner_signals) is the owner's side: a stream
///   the owner's executor polls from its first task on, for as long as its
///   layer lives. A signal must reach it even when a message is lost on
///   the way (e.g. a periodic re-read of the owner's tasks: a task ended in
///   the store is a [`TaskSignal::Cancel`]); a signal may come twice. While
///   it is polled, the store keeps the owner's *lease* alive.
/// * [`owner_alive`](Self::owner_alive) tells whether an owner's lease
///   holds; the layer ends the unfinished task of an owner whose lease
///   lapsed `failed` ("its server went away") when a `tasks/*` request
///   reads it, instead of reporting it `working` forever. A store must
///   take the lease of a record's owner no later than it creates the
///   record.
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new record. Fails with [`StoreError::Full`] when the store
    /// has no room for it.
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The record of task `id`, `None` when there is none (never created,
    /// or expired).
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Applies `change` to a task that has not ended ([`TaskRecord::apply`])
    /// and returns the record as it is now (unchanged for an ended task),
    /// `None` when there is none.
    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>>;

    /// Ends task `id` ([`TaskRecord::end`]) and keeps its record for
    /// `retain`. Returns `true` when this call ended it, `false` when it had
    /// ended already or there is no such task.
    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Carries `signal` to `owner`, the replica running the task (see
    /// [above](#several-replicas)). The default does nothing: in one
    /// process, every task's owner is local and is reached directly.
    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (owner, signal);
        Box::pin(async { Ok(()) })
    }

    /// The signals for `owner`'s tasks, for its executor to act on; polling
    /// the stream keeps `owner`'s lease alive (see
    /// [above](#several-replicas)). `None` (the default): this store
    /// carries no signals.
    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        let _ = owner;
        None
    }

    /// Whether `owner`'s lease holds (the default: always, every owner is
    /// in this process).
    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let _ = owner;
        Box::pin(async { Ok(true) })
    }
}

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

/// A store operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store holds as many tasks as it may.
    Full {
        /// Its capacity.
        capacity: usize,
    },
    /// The store could not be reached or answered an error.
    Unavailable(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { capacity } => {
                write!(f, "the task store holds its maximum of {capacity} tasks")
            }
            Self::Unavailable(e) => write!(f, "the task store is unavailable: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unavailable(e) => Some(&**e),
            Self::Full { .. } => None,
        }
    }
}

/// The default [`TaskStore`]: the records of one process, in memory.
///
/// Clones share the records. At most [`capacity`](Self::with_capacity)
/// records are kept, those of running tasks and those of ended tasks
/// within their retention; an ended record is gone once its retention has
/// passed (a read finds it expired and removes it, and a create that finds
/// the store full first removes every expired one), so no timer or sweep
/// task runs for the store.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Records>>,
}

struct Records {
    capacity: usize,
    map: HashMap<String, Slot>,
}

struct Slot {
    record: TaskRecord,
    /// Once ended: when the record goes.
    expires: Option<Instant>,
}

impl Slot {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| e > now)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = self.lock();
        f.debug_struct("MemoryStore")
            .field("capacity", &records.capacity)
            .field("records", &records.map.len())
            .finish()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// The default capacity: 10 000 records.
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// An empty store of the default capacity.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// An empty store of at most `capacity` records (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Records {
                capacity: capacity.max(1),
                map: HashMap::new(),
            })),
        }
    }

    /// How many records it holds (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids it holds.
    #[cfg(test)]
    pub(crate) fn ids(&self) -> Vec<String> {
        self.lock().map.keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        // A panic while holding the lock leaves records that are each whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn create_now(&self, record: TaskRecord) -> Result<(), StoreError> {
        let mut records = self.lock();
        if records.map.len() >= records.capacity {
            let now = Instant::now();
            records.map.retain(|_, slot| slot.live(now));
            if records.map.len() >= records.capacity {
                return Err(StoreError::Full {
                    capacity: records.capacity,
                });
            }
        }
        let id = record.id.clone();
        records.map.insert(
            id,
            Slot {
                record,
                expires: None,
            },
        );
        Ok(())
    }

    /// The live slot of `id`: an expired one is removed.
    fn with_live<T>(&self, id: &str, f: impl FnOnce(&mut Slot) -> T) -> Option<T> {
        let mut records = self.lock();
        let now = Instant::now();
        match records.map.get_mut(id) {
            Some(slot) if slot.live(now) => Some(f(slot)),
            Some(_) => {
                records.map.remove(id);
                None
            }
            None => None,
        }
    }
}

impl TaskStore for MemoryStore {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let out = self.create_now(record);
        Box::pin(async move { out })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let out = self.with_live(id, |slot| slot.record.clone());
        Box::pin(async move { Ok(out) })
    }

    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let out = self.with_live(id, |slot| {
            slot.record.apply(&change);
            slot.record.clone()
        });
        Box::pin(async move { Ok(out) })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let out = self
            .with_live(id, |slot| {
                let ended = slot.record.end(&end);
                if ended {
                    slot.expires = Some(expiry(retain));
                }
                ended
            })
            .unwrap_or(false);
        Box::pin(async move { Ok(out) })
    }
}

/// When a record retained for `retain` from now goes: a retention past
/// what the clock can count (`Duration::MAX`) is thirty years, "never".
fn expiry(retain: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(retain)
        .or_else(|| now.checked_add(Duration::from_secs(30 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskStatus;

    fn record(id: &str) -> TaskRecord {
        TaskRecord::new(id.into(), None, Duration::from_millis(100), None)
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_record_is_kept_for_its_retention_then_gone() {
        let store = MemoryStore::new();
        store.create(record("a")).await.unwrap();
        assert!(store
            .finish(
                "a",
                TaskEnd::Completed(serde_json::json!({})),
                Duration::from_secs(5)
            )
            .await
            .unwrap());
        tokio::time::advance(Duration::from_millis(4_999)).await;
        let r = store.get("a").await.unwrap().unwrap();
        assert_eq!(r.status, TaskStatus::Completed);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(store.get("a").await.unwrap().is_none());
        assert!(store.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_store_refuses_until_an_ended_record_expired() {
        let store = MemoryStore::with_capacity(1);
        store.create(record("a")).await.unwrap();
        let err = store.create(record("b")).await.unwrap_err();
        assert!(matches!(err, StoreError::Full { capacity: 1 }));
        assert!(err.to_string().contains("maximum of 1 tasks"));
        store
            .finish("a", TaskEnd::Cancelled(None), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(
            store.create(record("b")).await.is_err(),
            "a is still retained"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        store.create(record("b")).await.unwrap();
        assert!(store.get("a").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn of_two_ends_the_first_wins() {
        let store = MemoryStore::new();
        store.create(record("a")).await.unwrap();
        let retain = Duration::from_secs(60);
        assert!(store
            .finish("a", TaskEnd::Cancelled(None), retain)
            .await
            .unwrap());
        assert!(!store
            .finish("a", TaskEnd::Completed(serde_json::json!({})), retain)
            .await
            .unwrap());
        assert!(!store
            .finish("nope", TaskEnd::Cancelled(None), retain)
            .await
            .unwrap());
        assert_eq!(
            store.get("a").await.unwrap().unwrap().status,
            TaskStatus::Cancelled
        );
    }
}
