//! [`TasksLayer`]: the settings, and the [`Tasks`] services it makes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;

use super::executor::Executor;
use super::policy::TaskPolicy;
use super::service::Tasks;
use super::shared::{Config, Shared};
use super::store::{MemoryStore, TaskStore};

/// Turns long `tools/call`s into tasks (the `io.modelcontextprotocol/tasks`
/// extension) over any MCP request service, and answers `tasks/get`,
/// `tasks/update` and `tasks/cancel` itself. See the [module docs](super).
///
/// Every service made from one layer (and from its clones) shares its
/// tasks: its store and the executor that runs their work.
#[derive(Clone)]
pub struct TasksLayer {
    pub(crate) shared: Shared,
}

impl fmt::Debug for TasksLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shared, f)
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
        Self {
            shared: Shared::new(store),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.shared.config)
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

    /// The most one call of the store may take (default 10 s): past it the
    /// call fails as if the store were unavailable, and a panic in it
    /// fails it too. A store that hangs or panics never holds a task: a
    /// creation it fails is answered with an error and its work dropped, an
    /// end it fails is written again (see the [module docs](super#every-task-ends)).
    /// Zero fails every call the store does not answer at once.
    #[must_use]
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.shared.store_timeout(timeout);
        self
    }

    /// How long running tasks may go on once the [shutdown](Self::shutdown)
    /// token fired (default zero).
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config_mut().run.drain_grace = grace;
        self
    }

    /// A handle on the tasks this layer's services run.
    pub fn handle(&self) -> TasksHandle {
        TasksHandle {
            executor: self.shared.executor.clone(),
        }
    }
}

impl<S> Layer<S> for TasksLayer {
    type Service = Tasks<S>;

    fn layer(&self, inner: S) -> Tasks<S> {
        Tasks::new(inner, self.shared.clone())
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
