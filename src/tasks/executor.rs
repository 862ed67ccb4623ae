//! The per-layer executor: it owns the futures of the tasks this process
//! runs, each under its own [`Cancellation`](crate::Cancellation), and the
//! ends it has not managed to write yet; the [`runner`](super::runner)
//! takes one task from its record's creation to its end.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{Phase, TaskCore};
use super::record::{TaskEnd, TaskRecord};
use super::runner::Runner;
use super::store::{StoreError, TaskSignal};
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;
use crate::CancelReason;

/// The work of one task.
pub(crate) type Work = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

/// The message of a task whose handler panicked.
pub(crate) const PANICKED: &str = "task handler panicked";

/// `work` with a panic in it caught: it ends as an internal error that
/// says so, like a plain request's panic, and never takes the task's end
/// (or its slot) with it.
pub(crate) fn catching_panics(
    work: impl Future<Output = Result<Value, BoxError>> + Send + 'static,
) -> Work {
    Box::pin(AssertUnwindSafe(work).catch_unwind().map(|out| {
        out.unwrap_or_else(|_panic| {
            tracing::error!(target: "tower_mcp_cancel::task", "task handler panicked");
            Err(Box::new(ErrorObject::new(ErrorObject::INTERNAL_ERROR, PANICKED)) as BoxError)
        })
    }))
}

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
    tasks: Mutex<Tasks>,
    /// Woken when the last task ended and the last end was written.
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

/// The tasks of one executor.
#[derive(Default)]
struct Tasks {
    /// Those whose work runs: each holds one of the `max_tasks` slots.
    running: HashMap<String, Arc<TaskCore>>,
    /// Those whose work ended but whose end the store has not taken yet
    /// (it failed): retried by their runner, and the truth a `tasks/*`
    /// request of this process answers meanwhile; with whether
    /// [`drained`](Executor::drained) still waits for it.
    unwritten: HashMap<String, (TaskEnd, bool)>,
}

impl Tasks {
    fn idle(&self) -> bool {
        self.running.is_empty() && !self.unwritten.values().any(|(_, waited)| *waited)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.lock().running.get(id).cloned()
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("running", &self.running())
            .finish()
    }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Tasks> {
        self.inner.lock()
    }

    /// How many tasks run.
    pub(crate) fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// The end of task `id` when its work ended and the store has not
    /// taken that end yet.
    pub(crate) fn unwritten(&self, id: &str) -> Option<TaskEnd> {
        self.lock().unwritten.get(id).map(|(end, _)| end.clone())
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.inner.get(id)
    }

    /// Resolves once no task runs and every task's end is written (or,
    /// the shutdown token fired, was tried its last times before the
    /// drain, see [`Runner`]).
    pub(crate) async fn drained(&self) {
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.lock().idle() {
                return;
            }
            idle.await;
        }
    }

    /// Starts task `core` with `work`, created now: its record (built
    /// from `seed` at this instant, so that `createdAt` is where its TTL
    /// counts from) is written first, and the receiver resolves with it
    /// once a `tasks/get` would find it (or with the store's error; the
    /// work is then dropped). Refused, and the work dropped, when
    /// `max_tasks` run already.
    pub(crate) fn spawn(
        &self,
        core: Arc<TaskCore>,
        work: Work,
        seed: RecordSeed,
        settings: &RunSettings,
    ) -> Result<oneshot::Receiver<Result<TaskRecord, StoreError>>, ErrorObject> {
        {
            let mut tasks = self.lock();
            if tasks.running.len() >= settings.max_tasks {
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
            tasks.running.insert(core.id.clone(), core.clone());
        }
        let ttl = core.promoted(Instant::now());
        let mut record =
            TaskRecord::new(core.id.clone(), ttl, settings.poll_interval, seed.principal);
        record.owner = Some(self.inner.owner.clone());
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
        let mut settings = settings.clone();
        if settings.shutdown.is_none() {
            settings.shutdown = seed.transport_shutdown;
        }
        let runner = Runner::new(self.clone(), core, settings);
        tokio::spawn(runner.run(work, record, tx).instrument(span));
        Ok(rx)
    }

    /// Frees task `id`'s slot: its work is over. `unwritten`: its end, when
    /// the store has not taken it (kept until [`written`](Self::written)).
    pub(crate) fn finished(&self, id: &str, unwritten: Option<TaskEnd>) {
        let mut tasks = self.lock();
        tasks.running.remove(id);
        if let Some(end) = unwritten {
            tasks.unwritten.insert(id.to_owned(), (end, true));
        }
        if tasks.idle() {
            self.inner.idle.notify_waiters();
        }
    }

    /// Task `id`'s end is written.
    pub(crate) fn written(&self, id: &str) {
        let mut tasks = self.lock();
        tasks.unwritten.remove(id);
        if tasks.idle() {
            self.inner.idle.notify_waiters();
        }
    }

    /// [`drained`](Self::drained) no longer waits for task `id`'s
    /// unwritten end (it is still written as soon as the store takes it).
    pub(crate) fn not_waited(&self, id: &str) {
        let mut tasks = self.lock();
        if let Some((_, waited)) = tasks.unwritten.get_mut(id) {
            *waited = false;
        }
        if tasks.idle() {
            self.inner.idle.notify_waiters();
        }
    }
}

/// What a task's record takes from its creating request.
#[derive(Debug)]
pub(crate) struct RecordSeed {
    /// Whom the task belongs to ([`TasksLayer::bind`](super::TasksLayer::bind)).
    pub(crate) principal: Option<String>,
    /// The shutdown token of the transport that took the creating request:
    /// the task stops with it when the layer has no token of its own.
    pub(crate) transport_shutdown: Option<CancellationToken>,
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
pub(crate) fn count(outcome: &'static str) {
    metrics::counter!("mcp.server.tasks", "mcp.task.outcome" => outcome).increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn count(_outcome: &'static str) {}

#[cfg(feature = "metrics")]
pub(crate) fn count_grace(what: &'static str) {
    metrics::counter!("mcp.server.tasks.grace", "mcp.grace" => what).increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn count_grace(_what: &'static str) {}

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
