//! The per-layer executor: it owns the futures of the tasks this process
//! runs, each under its own [`Cancellation`](crate::Cancellation), and the
//! ends it has not managed to write yet; the [`runner`](super::runner)
//! takes one task from its record's creation to its end.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Once};

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{Phase, TaskCore};
use super::record::{TaskEnd, TaskRecord};
use super::runner::{RunSettings, Runner, Work};
use super::slots::Slots;
use super::store::{StoreError, TaskSignal};
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;
use crate::CancelReason;

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

/// The tasks running in this process. Clones share them.
#[derive(Clone)]
pub(crate) struct Executor {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    slots: Arc<Slots>,
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
    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.slots.get(id)
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
                slots: Arc::default(),
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

    /// How many tasks run.
    pub(crate) fn running(&self) -> usize {
        self.inner.slots.running()
    }

    /// The end of task `id` when its work ended and the store has not
    /// taken that end yet.
    pub(crate) fn unwritten(&self, id: &str) -> Option<TaskEnd> {
        self.inner.slots.unwritten(id)
    }

    /// The running task `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<TaskCore>> {
        self.inner.get(id)
    }

    /// Resolves once no task runs and every task's end is written (or,
    /// the shutdown token fired, was tried its last times before the
    /// drain, see [`Runner`]).
    pub(crate) async fn drained(&self) {
        self.inner.slots.drained().await;
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
        if !self.inner.slots.take(&core, settings.max_tasks) {
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
        let runner = Runner::new(self.inner.slots.clone(), core, settings);
        tokio::spawn(runner.run(work, record, tx).instrument(span));
        Ok(rx)
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
