//! What every service of one [`TasksLayer`](super::TasksLayer) shares: its
//! settings, its store and the executor that runs its tasks' work.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;

use super::executor::Executor;
use super::owner::OWNER_GONE;
use super::policy::TaskPolicy;
use super::record::{mint_id, TaskEnd, TaskRecord};
use super::runner::RunSettings;
use super::store::{StoreError, TaskSignal, TaskStore};
use super::watched::Watched;
use crate::jsonrpc::ErrorObject;

/// Binds a task to whoever created it.
type Bind = Arc<dyn Fn(&Extensions) -> Option<String> + Send + Sync>;

/// The settings every [`Tasks`] service of one layer shares.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) tools: HashMap<String, TaskPolicy>,
    pub(crate) default: TaskPolicy,
    pub(crate) ttl: Option<Duration>,
    pub(crate) bind: Option<Bind>,
    pub(crate) run: RunSettings,
}

/// The settings, the store (through the wrapper that tells listeners of
/// each change) and the executor.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) watched: Arc<Watched>,
    pub(crate) executor: Executor,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TasksLayer")
            .field("tools", &self.config.tools)
            .field("default", &self.config.default)
            .field("ttl", &self.config.ttl)
            .field("run", &self.config.run)
            .field("executor", &self.executor)
            .finish()
    }
}

/// The most one store call may take, by default.
pub(crate) const STORE_TIMEOUT: Duration = Duration::from_secs(10);

impl Shared {
    pub(crate) fn new(store: impl TaskStore) -> Self {
        let watched = Arc::new(Watched::new(store, STORE_TIMEOUT));
        Self {
            config: Arc::new(Config {
                tools: HashMap::new(),
                default: TaskPolicy::never(),
                ttl: Some(Duration::from_secs(3600)),
                bind: None,
                run: RunSettings {
                    poll_interval: Duration::from_millis(500),
                    retention: Duration::from_secs(300),
                    grace: Duration::ZERO,
                    max_tasks: 1024,
                    shutdown: None,
                    drain_grace: Duration::ZERO,
                },
            }),
            store: watched.clone(),
            watched,
            executor: Executor::new(owner_id()),
        }
    }

    /// The same tasks, each store call bounded by `timeout`.
    pub(crate) fn store_timeout(&mut self, timeout: Duration) {
        let watched = Arc::new(self.watched.with_timeout(timeout));
        self.store = watched.clone();
        self.watched = watched;
    }

    /// Whether a request bound to `principal` may see `record`: with
    /// [`bind`](super::TasksLayer::bind), only a request bound to the
    /// record's own principal (no principal sees no task).
    pub(crate) fn visible(&self, record: &TaskRecord, principal: Option<&String>) -> bool {
        self.config.bind.is_none()
            || principal.is_some_and(|p| record.principal.as_ref() == Some(p))
    }

    /// The principal a request binds to.
    pub(crate) fn principal(&self, extensions: &Extensions) -> Option<String> {
        self.config.bind.as_ref().and_then(|b| b(extensions))
    }
}

impl Shared {
    /// Task `id` as a `tasks/*` request sees it: a task that has not ended
    /// and whose owner (another replica) lost its lease is ended `failed`
    /// first (first writer wins: an end recorded meanwhile stays).
    pub(crate) async fn read(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let mut record = self.store.get(id).await?;
        if let Some(r) = &mut record {
            // An end this process has not managed to write yet is the
            // truth: the store's `working` is only late.
            if let Some(end) = self.executor.unwritten(id) {
                r.end(&end);
            }
        }
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

/// A new owner id: random, as task ids are; should the OS random source
/// fail, the process id and the time, unique enough among replicas.
fn owner_id() -> String {
    mint_id().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{:x}-{nanos:x}", std::process::id())
    })
}
