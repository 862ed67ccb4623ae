//! The per-layer executor: it owns the futures of the tasks this process
//! runs, each under its own [`Cancellation`](crate::Cancellation), with a
//! TTL timer, the grace, and one end.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{Phase, TaskCore};
use super::record::{TaskEnd, TaskRecord};
use super::store::{StoreError, TaskSignal};
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;
use crate::CancelReason;

/// The work of one task.
pub(crate) type Work = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

/// What the executor needs of the layer's settings.
#[derive(Clone, Debug)]
pub(crate) struct RunSettings {
    pub(crate) poll_interval: Duration,
    pub(crate) retention: Duration,
    pub(crate) grace: Duration,
    pub(crate) max_tasks: usize,
    pub(crate) shutdown: Option<CancellationToken>,
    pub(crate) drain_grace: Duration,
}

/// The tasks running in this process. Clones share them.
#[derive(Clone)]
pub(crate) struct Executor {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    tasks: Mutex<HashMap<String, Arc<TaskCore>>>,
    /// Woken when the last task ended.
    idle: Notify,
    /// This executor's owner id (random): records of its tasks name it.
    owner: String,
    /// Whether the loop that takes the owner's signals runs.
    signals: Once,
    /// Fired when the executor is gone: the signal loop ends.
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskCore>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.lock().get(id).cloned()
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("running", &self.running())
            .finish()
    }
}

/// Why a task's work stopped before it ended on its own.
#[derive(Debug)]
enum Stop {
    /// `tasks/cancel` (or the creating request gone before the task was
    /// announced).
    Cancelled(CancelReason),
    /// Its TTL elapsed.
    Expired(Duration),
    /// The server shut down.
    Shutdown,
}

impl Executor {
    /// An executor with no task, owner `owner`.
    pub(crate) fn new(owner: String) -> Self {
        Self {
            inner: Arc::new(Inner {
                tasks: Mutex::default(),
                idle: Notify::new(),
                owner,
                signals: Once::new(),
                stop: CancellationToken::new(),
            }),
        }
    }

    /// This executor's owner id.
    pub(crate) fn owner(&self) -> &str {
        &self.inner.owner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskCore>>> {
        self.inner.lock()
    }

    /// How many tasks run.
    pub(crate) fn running(&self) -> usize {
        self.lock().len()
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.inner.get(id)
    }

    /// Resolves once no task runs.
    pub(crate) async fn drained(&self) {
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.lock().is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Starts task `core` with `work`: its record is created first, and the
    /// receiver resolves with it once a `tasks/get` would find it (or with
    /// the store's error; the work is then dropped). Refused, and the work
    /// dropped, when `max_tasks` run already.
    pub(crate) fn spawn(
        &self,
        core: Arc<TaskCore>,
        work: Work,
        record: TaskRecord,
        settings: &RunSettings,
    ) -> Result<oneshot::Receiver<Result<TaskRecord, StoreError>>, ErrorObject> {
        {
            let mut tasks = self.lock();
            if tasks.len() >= settings.max_tasks {
                drop(tasks);
                core.cancellation.cancel(CancelReason::Other(
                    "the server runs its maximum of tasks".into(),
                ));
                core.set_phase(Phase::Gone);
                return Err(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    format!(
                        "the server runs its maximum of {} tasks; try again later",
                        settings.max_tasks
                    ),
                ));
            }
            tasks.insert(core.id.clone(), core.clone());
        }
        core.set_phase(Phase::Promoted);
        // With the first task (inside the runtime that runs it), the loop
        // that takes what other replicas signal to this owner.
        self.inner.signals.call_once(|| {
            let executor = Arc::downgrade(&self.inner);
            tokio::spawn(super::owner::run_signals(
                core.store.clone(),
                self.inner.owner.clone(),
                move |signal| match executor.upgrade() {
                    Some(inner) => {
                        deliver(&inner, signal);
                        true
                    }
                    None => false,
                },
                self.inner.stop.clone(),
            ));
        });
        let (tx, rx) = oneshot::channel();
        let span = tracing::info_span!(
            target: "tower_mcp_cancel::task",
            "mcp.server.task",
            "mcp.task.id" = %core.id,
            "gen_ai.tool.name" = %crate::sanitize::for_log(&core.tool),
            "mcp.task.outcome" = tracing::field::Empty,
            "mcp.grace" = tracing::field::Empty,
        );
        let runner = Runner {
            executor: self.clone(),
            core,
            settings: settings.clone(),
        };
        tokio::spawn(runner.run(work, record, tx).instrument(span));
        Ok(rx)
    }

    fn remove(&self, id: &str) {
        let mut tasks = self.lock();
        tasks.remove(id);
        if tasks.is_empty() {
            self.inner.idle.notify_waiters();
        }
    }
}

/// One task's work, from its record's creation to its end.
struct Runner {
    executor: Executor,
    core: Arc<TaskCore>,
    settings: RunSettings,
}

impl Runner {
    async fn run(
        self,
        mut work: Work,
        record: TaskRecord,
        created: oneshot::Sender<Result<TaskRecord, StoreError>>,
    ) {
        let core = self.core.clone();
        let created_at = Instant::now();
        match core.store.create(record.clone()).await {
            Ok(()) => {
                let message = core.created(created_at);
                if let Some(message) = message {
                    let _ = core
                        .store
                        .update(&core.id, super::TaskChange::Message(message))
                        .await;
                }
                tracing::info!(target: "tower_mcp_cancel::task", "task created");
                count("created");
                let _ = created.send(Ok(record));
            }
            Err(e) => {
                tracing::warn!(target: "tower_mcp_cancel::task", error = %e, "task not created; its work is dropped");
                core.cancellation
                    .cancel(CancelReason::Other("the task store failed".into()));
                drop(work);
                core.set_phase(Phase::Gone);
                self.executor.remove(&core.id);
                let _ = created.send(Err(e));
                return;
            }
        }
        let stop = self.race(&mut work).await;
        let outcome = match stop {
            Ok(out) => self.completed(out).await,
            Err(stop) => self.stopped(stop, work).await,
        };
        tracing::Span::current().record("mcp.task.outcome", outcome);
        tracing::info!(target: "tower_mcp_cancel::task", outcome, "task ended");
        count(outcome);
        core.set_phase(Phase::Gone);
        self.executor.remove(&core.id);
    }

    /// Runs the work until it ends or something stops it: a cancel (checked
    /// first, so a cancelled task's answer is never taken), the TTL, the
    /// shutdown after its drain grace.
    async fn race(&self, work: &mut Work) -> Result<Result<Value, BoxError>, Stop> {
        let core = &self.core;
        let shutdown = self.settings.shutdown.clone().unwrap_or_default();
        let mut draining: Option<Instant> = None;
        loop {
            let deadline = core.deadline();
            let ttl_changed = core.ttl_changed.notified();
            let expiry = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let drain_end = async {
                match draining {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                reason = core.cancellation.cancelled() => return Err(Stop::Cancelled(reason)),
                out = work.as_mut() => return Ok(out),
                () = expiry => {
                    let ttl = core.ttl().unwrap_or_default();
                    core.cancellation.cancel(CancelReason::Other(
                        format!("task TTL of {ttl:?} elapsed").into(),
                    ));
                    return Err(Stop::Expired(ttl));
                }
                () = shutdown.cancelled(), if draining.is_none() => {
                    draining = Some(Instant::now() + self.settings.drain_grace);
                }
                () = drain_end => {
                    core.cancellation.cancel(CancelReason::Shutdown);
                    return Err(Stop::Shutdown);
                }
                () = ttl_changed => {}
            }
        }
    }

    async fn completed(&self, out: Result<Value, BoxError>) -> &'static str {
        let core = &self.core;
        core.cancellation.complete();
        let (end, outcome) = match out {
            Ok(result) => (TaskEnd::Completed(result), "completed"),
            Err(e) => (TaskEnd::Failed(ErrorObject::of_error(&*e)), "failed"),
        };
        // First writer wins: a `tasks/cancel` recorded first keeps the task
        // cancelled, and this answer is dropped.
        match core
            .store
            .finish(&core.id, end, self.settings.retention)
            .await
        {
            Ok(true) => outcome,
            Ok(false) => "cancelled",
            Err(e) => {
                tracing::warn!(target: "tower_mcp_cancel::task", error = %e, "task end not recorded");
                "store_error"
            }
        }
    }

    /// Ends a stopped task (its token has fired): its terminal status
    /// first, so nothing it does in its grace changes it; then the grace,
    /// and the drop.
    async fn stopped(&self, stop: Stop, mut work: Work) -> &'static str {
        let core = &self.core;
        let (end, outcome) = match &stop {
            Stop::Cancelled(reason) => (
                TaskEnd::Cancelled(Some(format!("cancelled: {reason}"))),
                "cancelled",
            ),
            Stop::Expired(ttl) => (
                TaskEnd::Failed(
                    ErrorObject::new(
                        ErrorObject::INTERNAL_ERROR,
                        format!("task TTL elapsed: it ran for its maximum of {ttl:?}"),
                    )
                    .with_data(serde_json::json!({"ttlMs": ttl.as_millis() as u64})),
                ),
                "expired",
            ),
            Stop::Shutdown => (
                TaskEnd::Failed(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    "task stopped: the server shut down",
                )),
                "shutdown",
            ),
        };
        if let Err(e) = core
            .store
            .finish(&core.id, end, self.settings.retention)
            .await
        {
            tracing::warn!(target: "tower_mcp_cancel::task", error = %e, "task end not recorded");
        }
        // The layer's grace was given to the work's cancellation when the
        // call started; a handler's own `set_grace` (zero included) replaced it.
        let grace = core.cancellation.grace().unwrap_or(self.settings.grace);
        if !grace.is_zero() {
            let finished = tokio::time::timeout(grace, work.as_mut()).await.is_ok();
            let what = if finished { "finished" } else { "dropped" };
            tracing::Span::current().record("mcp.grace", what);
            count_grace(what);
            tracing::debug!(target: "tower_mcp_cancel::task", grace = what, "task grace over");
        }
        drop(work);
        tracing::debug!(target: "tower_mcp_cancel::task", reason = ?stop, "task work dropped");
        outcome
    }
}

/// Serializes a handler's result for the store.
pub(crate) fn to_value<R: Serialize>(out: Result<R, BoxError>) -> Result<Value, BoxError> {
    match out {
        Ok(r) => serde_json::to_value(&r).map_err(|e| {
            Box::new(ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                format!("result not serializable: {e}"),
            )) as BoxError
        }),
        Err(e) => Err(e),
    }
}

#[cfg(feature = "metrics")]
fn count(outcome: &'static str) {
    metrics::counter!("mcp.server.tasks", "mcp.task.outcome" => outcome).increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count(_outcome: &'static str) {}

#[cfg(feature = "metrics")]
fn count_grace(what: &'static str) {
    metrics::counter!("mcp.server.tasks.grace", "mcp.grace" => what).increment(1);
}

#[cfg(not(feature = "metrics"))]
fn count_grace(_what: &'static str) {}

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
