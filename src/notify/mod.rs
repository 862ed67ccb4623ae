//! Request-scoped notifications from a handler to its peer, and the
//! handler-facing [`RequestContext`].
//!
//! A server transport gives each request a notifier (in its extensions,
//! reached through [`RequestContext`]) that queues messages to that
//! request's peer: the shared stdio writer, or the request's own SSE stream
//! over HTTP. Nothing is ever written for a request after its end: once its
//! response is queued or it is cancelled, [`RequestContext::notify`]
//! refuses (and says so with `false`), and what was queued for a request
//! that is then cancelled is dropped unsent.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cancel::Cancellation;
use crate::jsonrpc::{self, ProgressParams, ProgressToken};
use crate::progress::ProgressTap;
use crate::request::RequestView;
use crate::state::Stamp;
use crate::timeout::DeadlineCap;
// Only the transports create notifiers and drain their queues.
#[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]
pub(crate) mod outbox;

use outbox::{Outgoing, Scope};

/// Sends notifications that belong to one request.
///
/// A server transport puts one in each request's extensions. Its messages
/// go through the request's outgoing gate: once the request's response (or
/// the teardown of a listen stream) is queued, or the request is
/// cancelled, nothing more of it is queued, whichever task sends it, and
/// messages still queued for a cancelled request are dropped unsent.
#[derive(Clone)]
pub(crate) struct Notifier {
    /// The transport's queue; `None`: the scope's own, made when the
    /// first message is sent (HTTP).
    tx: Option<mpsc::Sender<Outgoing>>,
    progress_token: Option<ProgressToken>,
    scope: Scope,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("progress_token", &self.progress_token)
            .finish()
    }
}

impl Notifier {
    /// A notifier for one request. `progress_token` is the token the peer sent
    /// (progress is only sent for a token the peer provided); `tx` the
    /// transport's queue, or `None` for the scope's own
    /// ([`Scope::with_own_queue`]).
    // Only the transports build one.
    #[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]
    pub(crate) fn new(
        tx: Option<mpsc::Sender<Outgoing>>,
        progress_token: Option<ProgressToken>,
        scope: Scope,
    ) -> Self {
        Self {
            tx,
            progress_token,
            scope,
        }
    }

    /// Queues a notification for this request, waiting for queue space (a
    /// slow peer slows the handler instead of growing memory).
    ///
    /// Returns `true` if the message was queued ahead of the request's end:
    /// it reaches the peer unless the request is cancelled before the
    /// writer gets to it. Returns `false`, and sends nothing, once the
    /// request is over (answered or cancelled) or the connection is gone —
    /// a reporter should stop then — and when `params` cannot be
    /// serialized (logged at `warn`).
    ///
    /// A `notifications/progress` sent this way is progress all the same:
    /// it is sent only under the rules of [`progress`](Self::progress), and
    /// only with this request's own progress token.
    pub(crate) async fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> bool {
        if method != jsonrpc::PROGRESS {
            return self.queue(method, params, None).await;
        }
        let parsed =
            serde_json::to_value(params).and_then(serde_json::from_value::<ProgressParams>);
        match parsed {
            Ok(p) if Some(&p.progress_token) == self.progress_token.as_ref() => {
                self.queue(method, params, Some(p.progress)).await
            }
            Ok(p) => {
                tracing::debug!(progress_token = %p.progress_token, "progress for another request's token not sent");
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, "malformed notifications/progress not sent");
                false
            }
        }
    }

    /// Encodes and queues one notification; `progress`: it is a progress
    /// report with that value, queued only if the value increases.
    async fn queue<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        progress: Option<f64>,
    ) -> bool {
        if !self.scope.is_open() {
            return false;
        }
        let bytes = match jsonrpc::encode_notification(method, params) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(method, error = %e, "notification not sent: its params cannot be serialized");
                return false;
            }
        };
        let own;
        let tx = match &self.tx {
            Some(tx) => tx,
            None => match self.scope.own_sender() {
                Some(tx) => {
                    own = tx;
                    &own
                }
                None => return false,
            },
        };
        let Ok(permit) = tx.reserve().await else {
            return false;
        };
        match progress {
            None => self.scope.send(permit, bytes),
            Some(value) => {
                let sent = self.scope.send_progress(permit, value, bytes);
                if !sent && self.scope.is_open() {
                    tracing::debug!(
                        progress_token = self.progress_token.as_ref().map(ToString::to_string),
                        progress = value,
                        "progress that does not increase not sent"
                    );
                }
                sent
            }
        }
    }

    /// Sends `notifications/progress` if the peer asked for progress and
    /// `progress` is greater than every value sent for this request before
    /// (progress MUST increase: a repeat, a decrease or a value that is not
    /// a finite number is not sent); see [`notify`](Self::notify) for what
    /// the result means.
    pub(crate) async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> bool {
        let Some(token) = self.progress_token.clone() else {
            return false;
        };
        let sent = self
            .queue(
                jsonrpc::PROGRESS,
                &ProgressParams {
                    progress_token: token,
                    progress,
                    total,
                    message,
                },
                Some(progress),
            )
            .await;
        #[cfg(feature = "metrics")]
        if sent {
            crate::observe::metrics::progress(crate::observe::Side::Server);
        }
        sent
    }
}

/// Where the progress of a request that may run as a task goes once it
/// does: a task has no progress channel (nothing is written on its
/// creating request's stream after the `CreateTaskResult`); its progress
/// becomes its status message. Put in the request's extensions by the
/// tasks layer.
pub(crate) trait TaskStatusSink: Send + Sync {
    /// `None` while the request is not a task: its progress goes to the
    /// request's stream as usual. Otherwise, records `message` as the
    /// task's status and resolves to whether it was.
    fn status(&self, message: String) -> Option<BoxFuture<'_, bool>>;
}

/// A request's [`TaskStatusSink`], in its extensions.
#[derive(Clone)]
pub(crate) struct TaskSink(pub(crate) Arc<dyn TaskStatusSink>);

impl fmt::Debug for TaskSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskSink")
    }
}

/// What a handler needs of its request's context: the cancellation token,
/// progress reporting, request-scoped notifications. Taken from the
/// request (through [`RequestView`]); every part is optional, so it works
/// in unit tests with a bare request too.
///
/// ```
/// use tower_mcp_cancel::{notify::RequestContext, McpRequest};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let req = McpRequest::new(1, "tools/call");
/// let ctx = RequestContext::of(&req);
/// assert!(!ctx.progress(1.0, None, None).await); // nobody asked for progress
/// assert!(!ctx.is_cancelled());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct RequestContext {
    notifier: Option<Notifier>,
    tap: Option<ProgressTap>,
    cancellation: Option<Cancellation>,
    task: Option<TaskSink>,
}

impl RequestContext {
    /// The context of `req`.
    pub fn of<R: RequestView>(req: &R) -> Self {
        let ext = req.extensions();
        Self {
            notifier: ext.get::<Notifier>().cloned(),
            tap: req.progress_tap().cloned(),
            cancellation: req.cancellation().cloned(),
            task: ext.get::<TaskSink>().cloned(),
        }
    }

    /// The request's cancellation (token and reason), if a layer or
    /// transport set one.
    pub fn cancellation(&self) -> Option<&Cancellation> {
        self.cancellation.as_ref()
    }

    /// The request's effective deadline: the earliest of its
    /// [`TimeoutLayer`](crate::TimeoutLayer) deadlines, its
    /// [`ProgressResetLayer`](crate::ProgressResetLayer) hard maximum and a
    /// deadline it inherited (a [`DeadlineCap`], a budget from the wire);
    /// `None` when it has none. The idle limit, which progress moves, is
    /// not a deadline. See [deadlines](crate::timeout#deadlines-that-travel).
    pub fn deadline(&self) -> Option<Instant> {
        let state = self
            .cancellation
            .as_ref()
            .and_then(|c| c.request_state().deadlines().offered())
            .map(Stamp::at);
        let max = self.tap.as_ref().and_then(ProgressTap::max_deadline);
        match (state, max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The time left until [`deadline`](Self::deadline) (zero once it
    /// passed), or `None` when the request has no deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The request's [`deadline`](Self::deadline) as a cap for a call the
    /// handler makes downstream: put it in that request's extensions, and
    /// the timer layers of the downstream stack enforce
    /// `min(own limit, cap)` (uncapped when this request has no deadline).
    ///
    /// ```
    /// use tower_mcp_cancel::{McpRequest, RequestContext};
    /// # fn f(ctx: &RequestContext) {
    /// let downstream = McpRequest::new(1, "tools/call").with_extension(ctx.deadline_cap());
    /// # let _ = downstream; }
    /// ```
    pub fn deadline_cap(&self) -> DeadlineCap {
        self.deadline()
            .map_or_else(DeadlineCap::none, DeadlineCap::at)
    }

    /// A token that fires when the request is cancelled (a fresh, never
    /// firing token when there is no cancellation).
    pub fn token(&self) -> tokio_util::sync::CancellationToken {
        self.cancellation
            .as_ref()
            .map(Cancellation::token)
            .unwrap_or_default()
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation
            .as_ref()
            .is_some_and(Cancellation::is_cancelled)
    }

    /// Reports progress: recorded in the request's [`ProgressTap`] (so a
    /// server-side [`ProgressResetLayer`](crate::ProgressResetLayer) sees it)
    /// and sent to the peer if it asked for progress. A value that does not
    /// increase, or progress after the request ended, is neither, with or
    /// without a tap. Returns whether it was sent.
    ///
    /// Once the request runs as a task (the `tasks` module, feature `tasks`), its
    /// progress is not sent: its message (or, without one, `progress` and
    /// `total`) becomes the task's status message, and the result says
    /// whether it was recorded.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> bool {
        if let Some(tap) = &self.tap {
            if !tap.record(progress, total, message.clone()) {
                return false;
            }
        }
        if let Some(task) = &self.task {
            let status = match (&message, total) {
                (Some(m), _) => m.clone(),
                (None, Some(total)) => format!("{progress}/{total}"),
                (None, None) => progress.to_string(),
            };
            if let Some(recorded) = task.0.status(status) {
                return recorded.await;
            }
        }
        match &self.notifier {
            Some(n) => n.progress(progress, total, message).await,
            None => false,
        }
    }

    /// Sends a request-scoped notification (e.g. `notifications/message`),
    /// waiting for queue space (a slow peer slows the handler instead of
    /// growing memory).
    ///
    /// Returns `true` if the message was queued ahead of the request's end:
    /// it reaches the peer unless the request is cancelled before the
    /// writer gets to it. Returns `false`, and sends nothing, once the
    /// request is over (answered or cancelled) or the connection is gone —
    /// a reporter should stop then —, when `params` cannot be serialized
    /// (logged at `warn`), and when the request has no transport to send
    /// through (a bare request in a unit test).
    ///
    /// A `notifications/progress` sent this way is progress all the same:
    /// it is sent only under the rules of [`progress`](Self::progress), and
    /// only with this request's own progress token.
    pub async fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> bool {
        match &self.notifier {
            Some(n) => n.notify(method, params).await,
            None => false,
        }
    }
}
