//! [`TaskCallLayer`] and its service, [`TaskCall`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::task::TaskTracker;
use tower::Service;
use tower_layer::Layer;

use super::answer::{DetailedTask, InvalidTaskAnswer, Shape};
use super::config::Config;
use super::guard::CancelOnDrop;
use super::poll::follow;
use super::{declare_extension, KeepTaskHandle};
use crate::error::BoxError;
use crate::jsonrpc::ProgressToken;
use crate::{McpRequest, ProgressObserver, ProgressTap};

/// Turns a task back into one call, over a client transport (any
/// `Service<McpRequest, Response = serde_json::Value>`).
///
/// # Declaring the extension
///
/// A server gives a task only to a request that declares the extension,
/// and answers `tasks/*` only to one that does (`-32021` otherwise). The
/// declaration is a key of the request's `params._meta`:
///
/// ```json
/// {
///   "name": "export",
///   "arguments": {},
///   "_meta": {
///     "io.modelcontextprotocol/clientCapabilities": {
///       "extensions": { "io.modelcontextprotocol/tasks": {} }
///     }
///   }
/// }
/// ```
///
/// [`declare_extension`] adds it to an [`McpRequest`]. [`TaskCallLayer`]
/// adds it to every `tools/call`, `tasks/get`, `tasks/update` and
/// `tasks/cancel` it passes on, and to a `subscriptions/listen` that asks
/// for `taskIds`; [`TaskClient`](super::TaskClient) to each request it sends.
///
/// # What the layer does with a task
///
/// When a `tools/call` is answered with a `CreateTaskResult`,
/// [`TaskCallLayer`] checks it, then polls `tasks/get` (at the task's
/// `pollIntervalMs`, kept within [`poll_bounds`](TaskCallLayer::poll_bounds);
/// at once when the `CreateTaskResult` does not say `working`) until the
/// task ends, and resolves the call with the task's `result`, or fails it
/// with the task's `error` (a `failed` task) or an error that says it was
/// cancelled. Input requests go to the [`on_input`](TaskCallLayer::on_input)
/// handler, its answers to `tasks/update`. Each change the task shows (its
/// `statusMessage`, its `lastUpdatedAt`) is recorded as progress in the
/// call's [`ProgressTap`](crate::ProgressTap): a
/// [`ProgressResetLayer`](crate::ProgressResetLayer) above restarts its
/// idle limit, and a [`ProgressObserver`](crate::ProgressObserver) sees the
/// status message.
///
/// Every answer is checked before it is used ([`InvalidTaskAnswer`]
/// otherwise): a `tasks/get` answer must be about the task polled, with
/// one of the spec's five statuses and the fields that status requires
/// (`completed`: a `result` object; `failed`: an `error` that is a
/// JSON-RPC error object; `input_required`: an `inputRequests` object),
/// `taskId`, `createdAt` and `lastUpdatedAt` strings, `ttlMs` an integer or
/// `null`, `pollIntervalMs` (if there) an integer — an integral float such
/// as `500.0` is one; a value past `u64::MAX` is read as `u64::MAX`, and
/// the interval is held to the bounds anyway. A `CreateTaskResult` is
/// checked for the same task fields.
///
/// # What the layer sends again
///
/// A `tasks/get` or `tasks/update` that fails *transiently* is sent again
/// after a backoff (the polling interval, doubled per failure, capped at
/// the upper poll bound), up to [`poll_retries`](TaskCallLayer::poll_retries)
/// failures in a row; an answer resets the count. A `tasks/update` sent
/// twice is harmless: a server ignores answers to keys no longer
/// outstanding. Transient:
///
/// * a JSON-RPC `-32603` (internal error: a store that failed, a replica
///   that went away);
/// * over Streamable HTTP, a `502`, `503`, `504` or `429` status, a
///   response stream that ended before its answer, a connection refused,
///   reset, failed or unresolved (DNS), a timeout;
/// * an I/O error of kind `ConnectionReset`, `ConnectionAborted`,
///   `ConnectionRefused`, `NotConnected`, `TimedOut`, `UnexpectedEof` or
///   `Interrupted`;
/// * an [`Elapsed`](crate::Elapsed) of a timer *below* the layer (one poll
///   took too long), except an inherited deadline.
///
/// Not transient, and failing the call at once: `-32602` (the server does
/// not know the task — expired, purged: the call fails with a `-32602`
/// that names the task, and nothing is cancelled), `-32021`, any other
/// JSON-RPC error, an [`InvalidTaskAnswer`], a TLS failure, an answer too
/// large or of the wrong content type, a closed stdio connection
/// (`BrokenPipe`: it never reopens), any error this crate does not know.
/// The `tools/call` itself is never sent again.
///
/// # What cancels the task
///
/// **Dropping the call's future sends `tasks/cancel`** — once, in the
/// background, bounded by [`cancel_timeout`](TaskCallLayer::cancel_timeout)
/// ([`cancels_sent`](TaskCallLayer::cancels_sent) waits for them) — so the
/// timer layers above this one bound the whole task, retries included, as
/// they bound any call. The call failing does the same when the task may
/// still run: its retries ran out, an error that is not transient, an
/// invalid answer, input asked of a client without a handler. Nothing is
/// sent when the task ended (`completed`, `failed`, `cancelled`) or the
/// server said it does not know it. A drop while a `tasks/get` is in
/// flight drops that request too (the transport cancels it) and sends the
/// `tasks/cancel`: the task may have ended in the meantime, and the
/// server then acknowledges or refuses a cancel of an ended task, which
/// changes nothing.
///
/// A request carrying [`KeepTaskHandle`] in its extensions gets the
/// `CreateTaskResult` itself (unchecked), for a caller that follows the
/// task on its own — with [`TaskClient`](super::TaskClient) over the same client: the task is
/// then the caller's, and dropping anything cancels nothing.
///
/// A call dropped before its `CreateTaskResult` arrived has no task id to
/// cancel here. Over stdio, `StdioClient` sends `tasks/cancel` when that
/// late answer comes; over Streamable HTTP the drop closes the response
/// stream, and the server's [`TasksLayer`](crate::tasks::TasksLayer) drops the
/// work of a task it has not announced yet (also while its record is being
/// written, with or without the server's grace) — only one whose
/// `CreateTaskResult` was already on its way in the very instant the
/// stream closed runs to its TTL.
///
/// # Task notifications
///
/// `notifications/tasks` reach no client service: a client transport's
/// service answers one request with one value, the Streamable HTTP
/// client leaves a response stream's other notifications out (logged at
/// debug level), and the stdio client hands them to its connection-wide
/// [`on_notification`] callback, not to a request. So neither the layer
/// nor [`TaskClient`](super::TaskClient) listens; they poll.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder};
/// use tower_mcp_cancel::tasks::TaskCallLayer;
/// use tower_mcp_cancel::{McpRequest, TimeoutLayer};
///
/// let transport = service_fn(|_req: McpRequest| async { Ok::<_, tower::BoxError>(serde_json::json!({})) });
/// let client = ServiceBuilder::new()
///     .layer(TimeoutLayer::new(Duration::from_secs(600))) // bounds the whole task
///     .layer(TaskCallLayer::new().poll_retries(8))
///     .service(transport);
/// # let _ = client;
/// ```
#[cfg_attr(
    feature = "stdio",
    doc = "[`on_notification`]: crate::transport::stdio::StdioClientBuilder::on_notification"
)]
#[cfg_attr(not(feature = "stdio"), doc = "[`on_notification`]: crate::transport")]
#[derive(Clone)]
pub struct TaskCallLayer {
    config: Arc<Config>,
}

impl fmt::Debug for TaskCallLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCallLayer")
            .field("min_poll", &self.config.min_poll)
            .field("max_poll", &self.config.max_poll)
            .field("cancel_timeout", &self.config.cancel_timeout)
            .field("poll_retries", &self.config.retries)
            .field("input", &self.config.input.is_some())
            .finish()
    }
}

impl Default for TaskCallLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl TaskCallLayer {
    /// The default of [`poll_retries`](Self::poll_retries).
    const DEFAULT_RETRIES: u32 = 5;

    /// Polling within 50 ms – 5 s, 5 retries of a transient failure,
    /// `tasks/cancel` bounded by 5 s, no input handler.
    pub fn new() -> Self {
        Self {
            config: Arc::new(Config {
                min_poll: Duration::from_millis(50),
                max_poll: Duration::from_secs(5),
                cancel_timeout: Duration::from_secs(5),
                retries: Self::DEFAULT_RETRIES,
                input: None,
                cancels: TaskTracker::new(),
            }),
        }
    }

    /// Keeps the polling interval within `min..=max` whatever the server
    /// suggests (a task without a suggestion is polled every `max`); `max`
    /// also caps the backoff of [`poll_retries`](Self::poll_retries).
    /// Bounds given the wrong way round are swapped. A zero `max` polls as
    /// fast as the server answers; `Duration::MAX` waits for ever.
    #[must_use]
    pub fn poll_bounds(mut self, min: Duration, max: Duration) -> Self {
        let c = Arc::make_mut(&mut self.config);
        c.min_poll = min.min(max);
        c.max_poll = max.max(min);
        self
    }

    /// How many transient failures in a row a task's `tasks/get` or
    /// `tasks/update` may meet before the call gives up (default 5; `0`:
    /// the first failure fails the call). Each is sent again after a
    /// backoff: the polling interval doubled per failure, capped at the
    /// upper [poll bound](Self::poll_bounds) — with the defaults and a 1 s
    /// interval, 2 + 4 + 5 + 5 + 5 s, a 21 s outage survived. An answer
    /// resets the count. What is transient is listed in the
    /// [type docs](Self#what-the-layer-sends-again).
    #[must_use]
    pub fn poll_retries(mut self, retries: u32) -> Self {
        Arc::make_mut(&mut self.config).retries = retries;
        self
    }

    /// How long the background `tasks/cancel` of a dropped call may take
    /// before it is given up (default 5 s; `Duration::MAX`: never given
    /// up; zero: given up unless the transport answers at once).
    #[must_use]
    pub fn cancel_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.config).cancel_timeout = timeout;
        self
    }

    #[cfg(test)]
    pub(crate) fn cancel_timeout_value(&self) -> Duration {
        self.config.cancel_timeout
    }

    #[cfg(test)]
    pub(crate) fn poll_retries_value(&self) -> u32 {
        self.config.retries
    }

    /// Resolves once every `tasks/cancel` that this layer's services sent
    /// in the background so far was answered or gave up (each is bounded by
    /// the [`cancel_timeout`](Self::cancel_timeout)): for a program that
    /// exits right after it dropped a call, so that its task is cancelled
    /// rather than left to run to its TTL.
    pub async fn cancels_sent(&self) {
        let cancels = &self.config.cancels;
        cancels.close();
        cancels.wait().await;
        cancels.reopen();
    }

    /// Answers the task's input requests: `handler` gets each new
    /// outstanding request once (by key) and returns the answers, sent with
    /// `tasks/update` (an empty map sends nothing). Without one, a task
    /// that asks for input fails the call (and is cancelled).
    #[must_use]
    pub fn on_input<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Map<String, Value>> + Send + 'static,
    {
        Arc::make_mut(&mut self.config).input = Some(Arc::new(move |r| Box::pin(handler(r))));
        self
    }
}

impl<S> Layer<S> for TaskCallLayer {
    type Service = TaskCall<S>;

    fn layer(&self, inner: S) -> TaskCall<S> {
        TaskCall {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service of a [`TaskCallLayer`].
#[derive(Clone)]
pub struct TaskCall<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: fmt::Debug> fmt::Debug for TaskCall<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCall")
            .field("inner", &self.inner)
            .finish()
    }
}

/// Whether `req` is a `subscriptions/listen` that asks for `taskIds`.
fn listens_for_tasks(req: &McpRequest) -> bool {
    req.method() == "subscriptions/listen"
        && req
            .params_as::<Value>()
            .is_ok_and(|p| p["notifications"].get("taskIds").is_some())
}

impl<S> Service<McpRequest> for TaskCall<S>
where
    S: Service<McpRequest, Response = Value> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Value;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Value, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: McpRequest) -> Self::Future {
        // The readied service takes this call; its clone polls.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let method = req.method().to_owned();
        let tool_call = method == "tools/call";
        let declares = tool_call
            || matches!(
                method.as_str(),
                "tasks/get" | "tasks/update" | "tasks/cancel"
            )
            || listens_for_tasks(&req);
        if declares {
            if let Err(e) = declare_extension(&mut req) {
                return Box::pin(async move { Err(e.into()) });
            }
        }
        if !tool_call {
            let call = inner.call(req);
            return Box::pin(async move {
                let answer = call.await.map_err(Into::into)?;
                if is_task(&answer) {
                    return Err(InvalidTaskAnswer::new(
                        "CreateTaskResult",
                        None,
                        format!("it answered a {method}, which cannot be a task"),
                    )
                    .into());
                }
                Ok(answer)
            });
        }
        let keep = req.extensions().get::<KeepTaskHandle>().is_some();
        // A tap of the layer above, or one of our own for the caller's
        // observer (a transport makes its own, below, which we cannot see).
        let tap = req.progress_tap().cloned().or_else(|| {
            let observer = req.extensions().get::<ProgressObserver>()?.clone();
            Some(ProgressTap::new(
                ProgressToken::from("task"),
                Some(observer),
            ))
        });
        let config = self.config.clone();
        let call = inner.call(req);
        Box::pin(async move {
            let answer = call.await.map_err(Into::into)?;
            if keep || !is_task(&answer) {
                return Ok(answer);
            }
            // A task with an id is cancelled if given up, its
            // `CreateTaskResult` found invalid included.
            let mut guard = answer.get("taskId").and_then(Value::as_str).map(|id| {
                CancelOnDrop::new(
                    inner.clone(),
                    id.to_owned(),
                    config.cancel_timeout,
                    config.cancels.clone(),
                )
            });
            let seed = DetailedTask::check(&answer, Shape::Created)?;
            match follow(&mut inner, &config, seed, tap.as_ref()).await {
                Ok(result) => {
                    if let Some(guard) = guard.as_mut() {
                        guard.disarm();
                    }
                    Ok(result)
                }
                Err(stop) => {
                    if let Some(guard) = guard.as_mut().filter(|_| !stop.open) {
                        guard.disarm();
                    }
                    Err(stop.error)
                }
            }
        })
    }
}

fn is_task(answer: &Value) -> bool {
    answer.get("resultType").and_then(Value::as_str) == Some("task")
}
