//! [`TasksLayer`]: the settings, and the [`Tasks`] services it makes.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;

use super::executor::{Executor, RunSettings};
use super::listen::Watched;
use super::policy::TaskPolicy;
use super::record::TaskRecord;
use super::service::Tasks;
use super::store::{MemoryStore, TaskStore};

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

/// Turns long `tools/call`s into tasks (the `io.modelcontextprotocol/tasks`
/// extension) over any MCP request service, and answers `tasks/get`,
/// `tasks/update` and `tasks/cancel` itself. See the [module docs](super).
///
/// Every service made from one layer (and from its clones) shares its
/// tasks: its store and the executor that runs their work.
#[derive(Clone)]
pub struct TasksLayer {
    pub(crate) config: Arc<Config>,
    /// The store, through `watched`.
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) watched: Arc<Watched>,
    pub(crate) executor: Executor,
}

impl fmt::Debug for TasksLayer {
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

impl Default for TasksLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl TasksLayer {
    /// A layer over an in-memory [`MemoryStore`], with no tool as a task
    /// yet (add them with [`tool`](Self::tool) or
    /// [`default_policy`](Self::default_policy)); TTL one hour, polling
    /// interval 500 ms, retention five minutes, no grace, at most 1024
    /// tasks running.
    pub fn new() -> Self {
        Self::with_store(MemoryStore::new())
    }

    /// A layer over `store` (shared by several processes, it lets any of
    /// them answer for a task; see [`TaskStore`]).
    pub fn with_store(store: impl TaskStore) -> Self {
        let watched = Arc::new(Watched::new(store));
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

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// The policy of tool `name`.
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>, policy: TaskPolicy) -> Self {
        self.config_mut().tools.insert(name.into(), policy);
        self
    }

    /// The policy of every tool without one of its own (default
    /// [`TaskPolicy::never`]).
    #[must_use]
    pub fn default_policy(mut self, policy: TaskPolicy) -> Self {
        self.config_mut().default = policy;
        self
    }

    /// A task's time to live from its creation (`None`: unlimited; default
    /// one hour). It is a hard maximum, enforced by a timer: when it ends,
    /// the work's token fires, the [grace](Self::grace) runs, the work is
    /// dropped, and the task is `failed` with an error that says its TTL
    /// elapsed. Only the task's handler can extend it
    /// ([`TaskContext::extend_ttl`](super::TaskContext::extend_ttl)).
    #[must_use]
    pub fn ttl(mut self, ttl: Option<Duration>) -> Self {
        self.config_mut().ttl = ttl;
        self
    }

    /// The polling interval suggested to clients (default 500 ms).
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config_mut().run.poll_interval = interval;
        self
    }

    /// How long an ended task's record is kept, for `tasks/get` to find it
    /// (default five minutes); then it is gone (`-32602`).
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.config_mut().run.retention = retention;
        self
    }

    /// The cooperative grace of a stopped task (default zero): on
    /// `tasks/cancel`, at the TTL and at shutdown its token fires at once
    /// and its status is final at once; its work is polled on for up to
    /// this long so that it can clean up, then dropped. A handler's own
    /// [`Cancellation::set_grace`](crate::Cancellation::set_grace) on
    /// [`TaskContext::cancellation`](super::TaskContext::cancellation)
    /// overrides it.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.config_mut().run.grace = grace;
        self
    }

    /// Bounds the tasks running at once (default 1024, at least 1). A call
    /// that would become a task past it is answered `-32603` ("the server
    /// runs its maximum of N tasks") and its work dropped.
    #[must_use]
    pub fn max_tasks(mut self, tasks: usize) -> Self {
        self.config_mut().run.max_tasks = tasks.max(1);
        self
    }

    /// Binds each task to a principal read from the creating request's
    /// extensions (e.g. the authenticated user an auth layer put there):
    /// a `tasks/get`, `tasks/update` or `tasks/cancel` whose request binds
    /// to another principal, or to none, is answered as for an unknown task.
    #[must_use]
    pub fn bind<F>(mut self, principal: F) -> Self
    where
        F: Fn(&Extensions) -> Option<String> + Send + Sync + 'static,
    {
        self.config_mut().bind = Some(Arc::new(principal));
        self
    }

    /// The server's shutdown token: when it fires, running tasks may go on
    /// for the [drain grace](Self::drain_grace), then they are stopped
    /// (token, [grace](Self::grace), drop) and `failed` with an error that
    /// says the server shut down. [`TasksHandle::drained`] resolves once
    /// they all ended.
    #[must_use]
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.config_mut().run.shutdown = Some(token);
        self
    }

    /// How long running tasks may go on once the [shutdown](Self::shutdown)
    /// token fired (default zero).
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config_mut().run.drain_grace = grace;
        self
    }

    /// Whether a request bound to `principal` may see `record`.
    pub(crate) fn visible(&self, record: &TaskRecord, principal: Option<&String>) -> bool {
        self.config.bind.is_none() || record.principal.as_ref() == principal
    }

    /// A handle on the tasks this layer's services run.
    pub fn handle(&self) -> TasksHandle {
        TasksHandle {
            executor: self.executor.clone(),
        }
    }
}

/// A new owner id: random, as task ids are; should the OS random source
/// fail, the process id and the time, unique enough among replicas.
fn owner_id() -> String {
    super::service::mint_id().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{:x}-{nanos:x}", std::process::id())
    })
}

impl<S> Layer<S> for TasksLayer {
    type Service = Tasks<S>;

    fn layer(&self, inner: S) -> Tasks<S> {
        Tasks::new(inner, self.clone())
    }
}

/// The tasks running in this process, for a server's drain: how many, and
/// a future that resolves once none is left.
#[derive(Clone, Debug)]
pub struct TasksHandle {
    executor: Executor,
}

impl TasksHandle {
    /// How many tasks run (those whose work has not ended).
    pub fn running(&self) -> usize {
        self.executor.running()
    }

    /// Resolves once no task runs (at once when none does). With the
    /// layer's [shutdown](TasksLayer::shutdown) token fired, that is at
    /// most the drain grace plus the grace away.
    pub async fn drained(&self) {
        self.executor.drained().await;
    }
}
