//! One call that may become a task: its shared state ([`TaskCore`]) and the
//! handler's side of it ([`TaskContext`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use super::record::TaskChange;
use super::store::{StoreError, TaskStore};
use crate::notify::TaskStatusSink;
use crate::request::RequestView;
use crate::Cancellation;

/// Where a call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A plain request: it may still become a task.
    Request,
    /// Handed to the executor; its record is being created.
    Promoted,
    /// A task whose record exists.
    Created,
    /// Over: answered as a plain request, or the task ended.
    Gone,
}

/// The state a call that may become a task shares between the layer's
/// future, the executor's runner, the handler's [`TaskContext`] and the
/// `tasks/*` methods.
pub(crate) struct TaskCore {
    pub(crate) id: String,
    /// The work's own cancellation (not the creating request's).
    pub(crate) cancellation: Cancellation,
    pub(crate) store: Arc<dyn TaskStore>,
    /// The tool called, for logs.
    pub(crate) tool: String,
    phase: watch::Sender<Phase>,
    /// Asks the layer's future to promote the call now (an input request
    /// needs a task); a stored permit, so it is never lost.
    pub(crate) promote: Notify,
    /// The TTL changed: the runner re-reads its deadline.
    pub(crate) ttl_changed: Notify,
    state: Mutex<State>,
}

struct State {
    ttl: Option<Duration>,
    /// The work's earliest deadline set by a limit inside the tasks layer
    /// (a `TimeoutLayer` below it): the TTL never runs past it.
    limit: Option<Instant>,
    /// When the task was created (its TTL counts from there).
    created: Option<Instant>,
    /// A status message given before the record existed.
    message: Option<String>,
    /// Every input key used over the task's life.
    used_keys: HashSet<String>,
    /// The input requests waiting for an answer.
    pending: HashMap<String, oneshot::Sender<Value>>,
    /// The task ended: no input request waits any more.
    inputs_closed: bool,
}

impl TaskCore {
    pub(crate) fn new(
        id: String,
        tool: String,
        store: Arc<dyn TaskStore>,
        ttl: Option<Duration>,
    ) -> Self {
        Self {
            id,
            cancellation: Cancellation::new(),
            store,
            tool,
            phase: watch::Sender::new(Phase::Request),
            promote: Notify::new(),
            ttl_changed: Notify::new(),
            state: Mutex::new(State {
                ttl,
                limit: None,
                created: None,
                message: None,
                used_keys: HashSet::new(),
                pending: HashMap::new(),
                inputs_closed: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.phase.send_replace(phase);
        if phase == Phase::Gone {
            self.end_inputs();
        }
    }

    /// Ends the input requests the handler waits on: each of its
    /// [`TaskContext::input`] calls resolves to [`InputError::Ended`].
    pub(crate) fn end_inputs(&self) {
        let mut state = self.lock();
        state.inputs_closed = true;
        state.pending.clear();
    }

    /// Records the deadline of a limit inside the tasks layer: the task's
    /// TTL is capped to it.
    pub(crate) fn set_limit(&self, limit: Option<Instant>) {
        self.lock().limit = limit;
    }

    /// Marks the task created at `at` (its TTL counts from there; the
    /// record is being written) and returns its TTL, capped to the limit.
    pub(crate) fn promoted(&self, at: Instant) -> Option<Duration> {
        let mut state = self.lock();
        state.created = Some(at);
        state.ttl = state.capped(state.ttl);
        state.ttl
    }

    /// Marks the record written with `written` as its `ttlMs`; returns the
    /// status message given meanwhile, and the TTL in milliseconds when it
    /// changed meanwhile (a handler's spawned work may extend it while the
    /// record is written).
    pub(crate) fn created(&self, written: Option<u64>) -> (Option<String>, Option<Option<u64>>) {
        let out = {
            let mut state = self.lock();
            let now = state.ttl.map(super::record::millis);
            (state.message.take(), (now != written).then_some(now))
        };
        self.set_phase(Phase::Created);
        out
    }

    pub(crate) fn ttl(&self) -> Option<Duration> {
        self.lock().ttl
    }

    /// When the TTL ends, once the task exists and has one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let state = self.lock();
        let created = state.created?;
        state.ttl.and_then(|ttl| created.checked_add(ttl))
    }

    /// Takes the waiting input requests among `keys`: those answered now.
    pub(crate) fn take_pending(
        &self,
        answers: &serde_json::Map<String, Value>,
    ) -> Vec<(String, oneshot::Sender<Value>)> {
        let mut state = self.lock();
        answers
            .keys()
            .filter_map(|k| state.pending.remove_entry(k))
            .collect()
    }

    /// The keys among `answers` of input requests waiting for an answer.
    pub(crate) fn pending_keys(&self, answers: &serde_json::Map<String, Value>) -> Vec<String> {
        let state = self.lock();
        answers
            .keys()
            .filter(|k| state.pending.contains_key(*k))
            .cloned()
            .collect()
    }

    async fn wait_created(&self) -> bool {
        let mut rx = self.phase.subscribe();
        let phase = rx
            .wait_for(|p| matches!(p, Phase::Created | Phase::Gone))
            .await
            .map(|p| *p);
        matches!(phase, Ok(Phase::Created))
    }
}

impl State {
    /// `ttl`, no longer than the limit leaves from the task's creation (a
    /// task with no TTL of its own gets the limit's). Before the creation,
    /// `ttl` as it is.
    fn capped(&self, ttl: Option<Duration>) -> Option<Duration> {
        let (Some(created), Some(limit)) = (self.created, self.limit) else {
            return ttl;
        };
        let left = limit.saturating_duration_since(created);
        Some(ttl.map_or(left, |t| t.min(left)))
    }
}

impl TaskStatusSink for TaskCore {
    fn status(&self, message: String) -> Option<BoxFuture<'_, bool>> {
        match self.phase() {
            Phase::Request => None,
            Phase::Promoted => {
                self.lock().message = Some(message);
                Some(Box::pin(async { true }))
            }
            Phase::Created => Some(Box::pin(async move {
                matches!(
                    self.store.update(&self.id, TaskChange::Message(message)).await,
                    Ok(Some(r)) if !r.status.is_terminal()
                )
            })),
            Phase::Gone => Some(Box::pin(async { false })),
        }
    }
}

/// The handler's side of a call that may run as a task: its id, input
/// requests to the client, its status message, its TTL.
///
/// Found in the request of every `tools/call` that the
/// [`TasksLayer`](super::TasksLayer) may turn into a task (its tool has a
/// policy other than [`never`](super::TaskPolicy::never) and the request
/// declared the extension); `None` otherwise.
///
/// ```
/// use tower_mcp_cancel::{tasks::TaskContext, McpRequest};
///
/// async fn handler(req: McpRequest) -> Result<serde_json::Value, tower::BoxError> {
///     if let Some(task) = TaskContext::of(&req) {
///         // Parks the task in `input_required` until the client answers.
///         let answer = task
///             .input("confirm", serde_json::json!({
///                 "method": "elicitation/create",
///                 "params": {"mode": "form", "message": "Delete it?", "requestedSchema": {"type": "object"}}
///             }))
///             .await?;
///         let _ = answer;
///     }
///     Ok(serde_json::json!({"content": []}))
/// }
/// # let _ = handler;
/// ```
#[derive(Clone)]
pub struct TaskContext {
    core: Arc<TaskCore>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("id", &self.core.id)
            .field("phase", &self.core.phase())
            .finish()
    }
}

impl TaskContext {
    pub(crate) fn new(core: Arc<TaskCore>) -> Self {
        Self { core }
    }

    /// The context of `req`, when it may run as a task.
    pub fn of<R: RequestView>(req: &R) -> Option<Self> {
        req.extensions().get::<Self>().cloned()
    }

    /// The task's id (fixed before the call becomes a task).
    pub fn id(&self) -> &str {
        &self.core.id
    }

    /// Whether the call runs as a task now.
    pub fn is_task(&self) -> bool {
        matches!(self.core.phase(), Phase::Promoted | Phase::Created)
    }

    /// The work's cancellation: its token fires on `tasks/cancel`, at the
    /// TTL, at shutdown, and when the creating request is cancelled before
    /// the call became a task.
    pub fn cancellation(&self) -> &Cancellation {
        &self.core.cancellation
    }

    /// Sets the task's status message. Returns `false` when the call is not
    /// a task (yet), or has ended.
    pub async fn status(&self, message: impl Into<String>) -> bool {
        match self.core.status(message.into()) {
            Some(f) if self.is_task() => f.await,
            _ => false,
        }
    }

    /// Extends the task's time to live by `by` (a client cannot: only its
    /// handler). Returns `false` when the call has ended or has no TTL.
    ///
    /// A limit inside the [`TasksLayer`](super::TasksLayer) (a
    /// [`TimeoutLayer`](crate::TimeoutLayer) below it) still ends the work
    /// at its deadline: the TTL is never extended past it, so the `ttlMs`
    /// the task reports is the one enforced.
    ///
    /// When the store fails to record the new TTL, the TTL stays as it was
    /// (the one the task reports is the one enforced) and this returns
    /// `false`.
    pub async fn extend_ttl(&self, by: Duration) -> bool {
        let (before, ttl) = {
            let mut state = self.core.lock();
            let before = state.ttl;
            let Some(ttl) = before.map(|t| t.saturating_add(by)) else {
                return false;
            };
            state.ttl = state.capped(Some(ttl));
            (before, state.ttl.unwrap_or(ttl))
        };
        self.core.ttl_changed.notify_one();
        if self.core.phase() != Phase::Created {
            return self.core.phase() != Phase::Gone;
        }
        let ms = super::record::millis(ttl);
        match self
            .core
            .store
            .update(&self.core.id, TaskChange::Ttl(Some(ms)))
            .await
        {
            Ok(Some(r)) => !r.status.is_terminal(),
            Ok(None) => false,
            Err(_) => {
                // Not recorded: the TTL enforced stays the one reported.
                let mut state = self.core.lock();
                if state.ttl == Some(ttl) {
                    state.ttl = before;
                }
                drop(state);
                self.core.ttl_changed.notify_one();
                false
            }
        }
    }

    /// Asks the client for input: `request` (`{"method", "params"}`, e.g. an
    /// `elicitation/create`) becomes an outstanding input request under
    /// `key`, the task goes `input_required`, and this resolves to the
    /// client's answer (`tasks/update`'s `inputResponses[key]`).
    ///
    /// A call that is not a task yet becomes one now. Each key may be used
    /// once over the task's life.
    pub async fn input(&self, key: impl Into<String>, request: Value) -> Result<Value, InputError> {
        let key = key.into();
        if !self.core.lock().used_keys.insert(key.clone()) {
            return Err(InputError::KeyReused(key));
        }
        if self.core.phase() == Phase::Request {
            self.core.promote.notify_one();
        }
        if !self.core.wait_created().await {
            return Err(InputError::Ended);
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.core.lock();
            if state.inputs_closed {
                return Err(InputError::Ended);
            }
            state.pending.insert(key.clone(), tx);
        }
        let change = TaskChange::AddInput {
            key: key.clone(),
            request,
        };
        match self.core.store.update(&self.core.id, change).await {
            Ok(Some(r)) if !r.status.is_terminal() => {}
            Ok(_) => {
                self.core.lock().pending.remove(&key);
                return Err(InputError::Ended);
            }
            Err(e) => {
                self.core.lock().pending.remove(&key);
                return Err(InputError::Store(e));
            }
        }
        rx.await.map_err(|_| InputError::Ended)
    }
}

/// An input request that got no answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum InputError {
    /// The key was used before in this task (keys are unique over a task's
    /// life).
    KeyReused(String),
    /// The task ended (cancelled, expired, shut down) before an answer.
    Ended,
    /// The store could not record the request.
    Store(StoreError),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KeyReused(k) => write!(
                f,
                "input key {:?} was used before in this task",
                crate::sanitize::for_log(k)
            ),
            Self::Ended => f.write_str("the task ended before its input was answered"),
            Self::Store(e) => write!(f, "input request not recorded: {e}"),
        }
    }
}

impl std::error::Error for InputError {}
