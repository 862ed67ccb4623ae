//! One task, from its record's creation to its end: the race of its work
//! against a cancel, its TTL and the shutdown; its end, written once; the
//! grace; the drop.
//!
//! # Every task ends
//!
//! * The work's panic is caught ([`catching_panics`](super::executor::catching_panics)):
//!   the task ends `failed` ("task handler panicked").
//! * Every store call is bounded ([`TasksLayer::store_timeout`](super::TasksLayer::store_timeout))
//!   and a panic in it caught: a store that hangs or panics fails the call.
//! * The end is written before the grace. When the store fails it, the
//!   slot is freed all the same once the work is over, and the end is
//!   written again with backoff ([`END_RETRY_FIRST`] doubling to
//!   [`END_RETRY_MAX`]) until the store takes it: once the store is back,
//!   the record is terminal within [`END_RETRY_MAX`] plus one store call.
//!   Meanwhile a `tasks/*` request this process serves answers that end,
//!   and [`TasksHandle::drained`](super::TasksHandle::drained) waits for
//!   it; once the shutdown token fired, the drain waits for at most
//!   [`END_TRIES_AFTER_SHUTDOWN`] more tries (the tries go on while the
//!   process does; a process that exits first leaves the record to the
//!   store: a shared store fails it when this process's lease lapses).
//! * A handler waiting for input hears that its task ended
//!   ([`InputError::Ended`](super::InputError::Ended)) before its grace
//!   starts.
//! * Should the runner itself be dropped (its runtime shutting down), its
//!   slot is freed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::{Phase, TaskCore};
use super::record::{TaskChange, TaskEnd, TaskRecord};
use super::slots::Slots;
use super::store::StoreError;
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

/// The first wait before an end the store failed is written again.
pub(crate) const END_RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between two tries of an end the store failed.
pub(crate) const END_RETRY_MAX: Duration = Duration::from_secs(5);

/// How many more tries an unwritten end gets once the shutdown token fired.
pub(crate) const END_TRIES_AFTER_SHUTDOWN: u32 = 3;

/// Why a task's work stopped before it ended on its own.
#[derive(Debug)]
enum Stop {
    /// `tasks/cancel`, or the creating request cancelled before the task
    /// was announced: `cancelled`.
    Cancelled(CancelReason),
    /// A limit inside the tasks layer, or another stop that is no client's
    /// cancel: `failed` with this error.
    Failed(ErrorObject),
    /// Its TTL elapsed.
    Expired(Duration),
    /// The server shut down.
    Shutdown,
}

impl Stop {
    /// The stop a fired token means: only a cancel the client asked for
    /// reads `cancelled`.
    fn of(reason: CancelReason) -> Self {
        match reason {
            CancelReason::Peer(_)
            | CancelReason::ClientDisconnected
            | CancelReason::TransportClosed
            | CancelReason::CallerDropped => Self::Cancelled(reason),
            // The error the limit's layer answers without a grace.
            CancelReason::Timeout(elapsed) => Self::Failed(ErrorObject::of_error(&elapsed)),
            CancelReason::Shutdown => Self::Shutdown,
            other => Self::Failed(ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                format!("task stopped: {other}"),
            )),
        }
    }

    fn end(&self) -> (TaskEnd, &'static str) {
        match self {
            Self::Cancelled(reason) => (
                TaskEnd::Cancelled(Some(format!("cancelled: {reason}"))),
                "cancelled",
            ),
            Self::Failed(error) => (TaskEnd::Failed(error.clone()), "failed"),
            Self::Expired(ttl) => (
                TaskEnd::Failed(
                    ErrorObject::new(
                        ErrorObject::INTERNAL_ERROR,
                        format!("task TTL elapsed: it ran for its maximum of {ttl:?}"),
                    )
                    .with_data(serde_json::json!({"ttlMs": super::record::millis(*ttl)})),
                ),
                "expired",
            ),
            Self::Shutdown => (
                TaskEnd::Failed(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    "task stopped: the server shut down",
                )),
                "shutdown",
            ),
        }
    }
}

/// Frees the task's slot if the runner is dropped before it did (its
/// runtime shut down): the slot never outlives the work.
struct Slot {
    slots: Arc<Slots>,
    core: Arc<TaskCore>,
    held: bool,
}

impl Slot {
    /// The work is over: frees the slot, keeping `unwritten` as the
    /// task's end until it is written.
    fn free(&mut self, unwritten: Option<TaskEnd>) {
        if std::mem::take(&mut self.held) {
            self.core.set_phase(Phase::Gone);
            self.slots.finished(&self.core.id, unwritten);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.held {
            self.core.cancellation.cancel(CancelReason::Shutdown);
            self.free(None);
        }
    }
}

/// One task's work, from its record's creation to its end.
pub(crate) struct Runner {
    slots: Arc<Slots>,
    core: Arc<TaskCore>,
    settings: RunSettings,
}

impl Runner {
    pub(crate) fn new(slots: Arc<Slots>, core: Arc<TaskCore>, settings: RunSettings) -> Self {
        Self {
            slots,
            core,
            settings,
        }
    }

    pub(crate) async fn run(
        self,
        mut work: Work,
        record: TaskRecord,
        created: oneshot::Sender<Result<TaskRecord, StoreError>>,
    ) {
        let core = self.core.clone();
        let mut slot = Slot {
            slots: self.slots.clone(),
            core: core.clone(),
            held: true,
        };
        let written_ttl = record.ttl_ms;
        if let Err(e) = core.store.create(record.clone()).await {
            tracing::warn!(target: "tower_mcp_cancel::task", error = %e, "task not created; its work is dropped");
            core.cancellation
                .cancel(CancelReason::Other("the task store failed".into()));
            drop(work);
            // The write may have landed with its answer lost: the record
            // must not read `working` with nothing running it.
            let end = TaskEnd::Failed(ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                format!("task not created: {e}"),
            ));
            let _ = created.send(Err(e));
            slot.free(Some(end.clone()));
            self.write_late(end).await;
            return;
        }
        let (message, ttl) = core.created(written_ttl);
        if let Some(message) = message {
            let _ = core
                .store
                .update(&core.id, TaskChange::Message(message))
                .await;
        }
        if let Some(ttl) = ttl {
            let _ = core.store.update(&core.id, TaskChange::Ttl(ttl)).await;
        }
        tracing::info!(target: "tower_mcp_cancel::task", "task created");
        count("created");
        let _ = created.send(Ok(record));

        let (end, stop) = match self.race(&mut work).await {
            Ok(out) => {
                core.cancellation.complete();
                match out {
                    Ok(result) => ((TaskEnd::Completed(result), "completed"), None),
                    Err(e) => (
                        (TaskEnd::Failed(ErrorObject::of_error(&*e)), "failed"),
                        None,
                    ),
                }
            }
            Err(stop) => (stop.end(), Some(stop)),
        };
        let (end, mut outcome) = end;
        // Its end first: a handler waiting for input hears it before its
        // grace, and nothing it does in the grace changes the status.
        core.end_inputs();
        let written = self.finish(end.clone()).await;
        if let Some(stop) = stop {
            self.grace(&mut work).await;
            tracing::debug!(target: "tower_mcp_cancel::task", reason = ?stop, "task work dropped");
        }
        drop(work);
        match written {
            Some(true) => {}
            // Another end was written first (a `tasks/cancel`).
            Some(false) => outcome = "cancelled",
            None => {
                slot.free(Some(end.clone()));
                if !self.write_late(end).await {
                    outcome = "store_error";
                }
            }
        }
        slot.free(None);
        tracing::Span::current().record("mcp.task.outcome", outcome);
        tracing::info!(target: "tower_mcp_cancel::task", outcome, "task ended");
        count(outcome);
    }

    /// Runs the work until it ends or something stops it: a cancel (checked
    /// first, so a cancelled task's answer is never taken), the TTL, the
    /// shutdown after its drain grace.
    async fn race(&self, work: &mut Work) -> Result<Result<Value, BoxError>, Stop> {
        let core = &self.core;
        let shutdown = self.settings.shutdown.clone().unwrap_or_default();
        let mut draining = false;
        // `None` while draining: a drain grace past what the clock counts.
        let mut drain_end: Option<Instant> = None;
        loop {
            let deadline = core.deadline();
            let ttl_changed = core.ttl_changed.notified();
            tokio::select! {
                biased;
                reason = core.cancellation.cancelled() => return Err(Stop::of(reason)),
                out = work.as_mut() => return Ok(out),
                () = at(deadline) => {
                    // A limit inside the layer that fired at this instant
                    // (the TTL is capped to it) names the end.
                    if let Some(reason) = core.cancellation.reason().cloned() {
                        return Err(Stop::of(reason));
                    }
                    let ttl = core.ttl().unwrap_or_default();
                    core.cancellation.cancel(CancelReason::Other(
                        format!("task TTL of {ttl:?} elapsed").into(),
                    ));
                    return Err(Stop::Expired(ttl));
                }
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    drain_end = Instant::now().checked_add(self.settings.drain_grace);
                }
                () = at(drain_end) => {
                    core.cancellation.cancel(CancelReason::Shutdown);
                    return Err(Stop::Shutdown);
                }
                () = ttl_changed => {}
            }
        }
    }

    /// One try at writing the task's end: `Some(true)` written, `Some(false)`
    /// another end was first, `None` the store failed.
    async fn finish(&self, end: TaskEnd) -> Option<bool> {
        let core = &self.core;
        match core
            .store
            .finish(&core.id, end, self.settings.retention)
            .await
        {
            Ok(ended) => Some(ended),
            Err(e) => {
                tracing::warn!(target: "tower_mcp_cancel::task", error = %e, "task end not recorded; it is tried again");
                None
            }
        }
    }

    /// Writes an end the store failed, again and again with backoff, until
    /// it takes it. Once the shutdown token fired, the drain waits for
    /// [`END_TRIES_AFTER_SHUTDOWN`] more tries only (`false`: it stopped
    /// waiting before the end was written); the tries go on while the
    /// process does.
    async fn write_late(&self, end: TaskEnd) -> bool {
        let mut wait = END_RETRY_FIRST;
        let mut left_after_shutdown = END_TRIES_AFTER_SHUTDOWN;
        let shutdown = self.settings.shutdown.clone().unwrap_or_default();
        let mut waited = true;
        loop {
            tokio::time::sleep(wait).await;
            if waited && shutdown.is_cancelled() {
                if left_after_shutdown == 0 {
                    tracing::warn!(target: "tower_mcp_cancel::task", "task end not recorded by the drain; still tried");
                    self.slots.not_waited(&self.core.id);
                    waited = false;
                } else {
                    left_after_shutdown -= 1;
                }
            }
            if self.finish(end.clone()).await.is_some() {
                break;
            }
            wait = (wait * 2).min(END_RETRY_MAX);
        }
        self.slots.written(&self.core.id);
        waited
    }

    /// The cooperative grace of a stopped task: its work is polled on for
    /// up to the grace (a handler's own `set_grace`, zero included, over
    /// the layer's), its output going nowhere.
    async fn grace(&self, work: &mut Work) {
        let grace = self
            .core
            .cancellation
            .grace()
            .unwrap_or(self.settings.grace);
        if grace.is_zero() {
            return;
        }
        let finished = tokio::time::timeout(grace, work.as_mut()).await.is_ok();
        let what = if finished { "finished" } else { "dropped" };
        tracing::Span::current().record("mcp.grace", what);
        count_grace(what);
        tracing::debug!(target: "tower_mcp_cancel::task", grace = what, "task grace over");
    }
}

/// Resolves at `deadline`; never without one.
async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
