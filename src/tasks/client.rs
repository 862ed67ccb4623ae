//! The client side: [`TaskCallLayer`] turns a task back into one call.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Map, Value};
use tokio_util::task::TaskTracker;
use tower::{Service, ServiceExt};
use tower_layer::Layer;

use super::record::EXTENSION;
use crate::error::BoxError;
use crate::jsonrpc::{ErrorObject, ProgressToken, CLIENT_CAPABILITIES_META};
use crate::{McpRequest, ProgressObserver, ProgressTap};

/// Answers a task's input requests: given the new outstanding requests (by
/// key), resolves to the answers to send with `tasks/update`.
type InputHandler =
    Arc<dyn Fn(Map<String, Value>) -> BoxFuture<'static, Map<String, Value>> + Send + Sync>;

/// Turns a task back into one call, over a client transport (any
/// `Service<McpRequest, Response = serde_json::Value>`).
///
/// It declares the tasks extension on every `tools/call`; when the answer
/// is a `CreateTaskResult`, it polls `tasks/get` (at the task's
/// `pollIntervalMs`, kept within [`poll_bounds`](Self::poll_bounds)) until
/// the task ends, and resolves the call with the task's result — or its
/// error. **Dropping the call's future sends `tasks/cancel`** (once, in the
/// background, bounded by [`cancel_timeout`](Self::cancel_timeout)), so the
/// timer layers above this one bound the whole task as they bound any call.
/// Each change the task shows (its `statusMessage`, its `lastUpdatedAt`) is
/// recorded as progress in the call's [`ProgressTap`]: a
/// [`ProgressResetLayer`](crate::ProgressResetLayer) above restarts its idle
/// limit, and a [`ProgressObserver`](crate::ProgressObserver) sees the
/// status message.
///
/// A request carrying [`KeepTaskHandle`] in its extensions gets the
/// `CreateTaskResult` itself, for a caller that polls on its own.
///
/// A call dropped before its `CreateTaskResult` arrived has no task id to
/// cancel here. Over stdio, `StdioClient` sends `tasks/cancel` when that
/// late answer comes; over Streamable HTTP the drop closes the response
/// stream, and the server's [`TasksLayer`](super::TasksLayer) drops the
/// work of a task it has not announced yet — one announced in the very
/// instant the stream closed runs to its TTL.
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
///     .layer(TaskCallLayer::new())
///     .service(transport);
/// # let _ = client;
/// ```
#[derive(Clone)]
pub struct TaskCallLayer {
    config: Arc<Config>,
}

#[derive(Clone)]
struct Config {
    min_poll: Duration,
    max_poll: Duration,
    cancel_timeout: Duration,
    input: Option<InputHandler>,
    /// The background `tasks/cancel`s, for [`TaskCallLayer::cancels_sent`].
    cancels: TaskTracker,
}

/// Marks a request whose caller wants the `CreateTaskResult` itself rather
/// than the task's result (see [`TaskCallLayer`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepTaskHandle;

impl fmt::Debug for TaskCallLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCallLayer")
            .field("min_poll", &self.config.min_poll)
            .field("max_poll", &self.config.max_poll)
            .field("cancel_timeout", &self.config.cancel_timeout)
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
    /// Polling within 50 ms – 5 s, `tasks/cancel` bounded by 5 s, no input
    /// handler.
    pub fn new() -> Self {
        Self {
            config: Arc::new(Config {
                min_poll: Duration::from_millis(50),
                max_poll: Duration::from_secs(5),
                cancel_timeout: Duration::from_secs(5),
                input: None,
                cancels: TaskTracker::new(),
            }),
        }
    }

    /// Keeps the polling interval within `min..=max` whatever the server
    /// suggests (a task without a suggestion is polled every `max`).
    #[must_use]
    pub fn poll_bounds(mut self, min: Duration, max: Duration) -> Self {
        let c = Arc::make_mut(&mut self.config);
        c.min_poll = min.min(max);
        c.max_poll = max.max(min);
        self
    }

    /// How long the background `tasks/cancel` of a dropped call may take
    /// before it is given up (default 5 s).
    #[must_use]
    pub fn cancel_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.config).cancel_timeout = timeout;
        self
    }

    #[cfg(test)]
    pub(crate) fn cancel_timeout_value(&self) -> Duration {
        self.config.cancel_timeout
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
    /// `tasks/update`. Without one, a task that asks for input fails the
    /// call (and is cancelled).
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
        if req.method() != "tools/call" {
            let call = inner.call(req);
            return Box::pin(async move {
                let answer = call.await.map_err(Into::into)?;
                if is_task(&answer) {
                    return Err(invalid(
                        "a CreateTaskResult answered a request that cannot be a task",
                    )
                    .into());
                }
                Ok(answer)
            });
        }
        if let Err(e) = declare(&mut req) {
            return Box::pin(async move { Err(e) });
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
            let Some(id) = answer
                .get("taskId")
                .and_then(Value::as_str)
                .map(str::to_owned)
            else {
                return Err(invalid("a CreateTaskResult without a taskId").into());
            };
            let mut guard = CancelOnDrop {
                inner: Some(inner.clone()),
                id: id.clone(),
                timeout: config.cancel_timeout,
                tracker: config.cancels.clone(),
            };
            let out = follow(&mut inner, &config, &id, answer, tap.as_ref()).await;
            if out.is_ok() {
                // The task ended: nothing to cancel.
                guard.inner = None;
            }
            out
        })
    }
}

fn is_task(answer: &Value) -> bool {
    answer.get("resultType").and_then(Value::as_str) == Some("task")
}

fn invalid(message: &str) -> ErrorObject {
    ErrorObject::new(
        ErrorObject::INTERNAL_ERROR,
        format!("invalid response: {message}"),
    )
}

/// The `_meta` of a task request: the extension declared.
fn task_meta() -> Value {
    json!({CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}}}})
}

/// Declares the extension in the request's `_meta` client capabilities,
/// keeping whatever else they say.
fn declare(req: &mut McpRequest) -> Result<(), BoxError> {
    let mut params: Map<String, Value> = match req.params() {
        None => Map::new(),
        Some(p) => serde_json::from_str(p.get()).map_err(|_| {
            ErrorObject::new(
                ErrorObject::INVALID_PARAMS,
                "tools/call params must be an object",
            )
        })?,
    };
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let caps = meta.as_object_mut().map(|m| {
        m.entry(CLIENT_CAPABILITIES_META)
            .or_insert_with(|| json!({}))
    });
    if let Some(caps) = caps {
        if !caps.is_object() {
            *caps = json!({});
        }
        if let Some(ext) = caps
            .as_object_mut()
            .map(|c| c.entry("extensions").or_insert_with(|| json!({})))
        {
            if !ext.is_object() {
                *ext = json!({});
            }
            if let Some(ext) = ext.as_object_mut() {
                ext.entry(EXTENSION).or_insert_with(|| json!({}));
            }
        }
    }
    let raw = serde_json::value::to_raw_value(&params)?;
    req.set_raw_params(Some(raw));
    Ok(())
}

fn task_request(method: &str, id: &str, extra: Option<(&str, Value)>) -> McpRequest {
    let mut params = json!({"taskId": id, "_meta": task_meta()});
    if let Some((k, v)) = extra {
        params[k] = v;
    }
    McpRequest::without_id(method).with_params(params)
}

/// Polls task `id` until it ends; its result, or its error.
async fn follow<S>(
    inner: &mut S,
    config: &Config,
    id: &str,
    mut task: Value,
    tap: Option<&ProgressTap>,
) -> Result<Value, BoxError>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    let mut seen = Map::new();
    let mut last_change: Option<(Value, Value)> = None;
    loop {
        let change = (task["statusMessage"].clone(), task["lastUpdatedAt"].clone());
        if last_change.as_ref() != Some(&change) {
            if let Some(tap) = tap {
                let next = tap.last().map_or(1.0, |p| p.floor() + 1.0);
                let message = match task["statusMessage"].as_str() {
                    Some(m) => m.to_owned(),
                    None => format!(
                        "task {}: {}",
                        crate::sanitize::for_log(id),
                        task["status"].as_str().unwrap_or("?")
                    ),
                };
                tap.record(next, None, Some(message));
            }
            last_change = Some(change);
        }
        match task.get("status").and_then(Value::as_str) {
            Some("completed") => return Ok(task.get("result").cloned().unwrap_or_default()),
            Some("failed") => {
                let error = task
                    .get("error")
                    .cloned()
                    .and_then(|e| serde_json::from_value::<ErrorObject>(e).ok())
                    .unwrap_or_else(|| invalid("a failed task without its error"));
                return Err(error.into());
            }
            Some("cancelled") => {
                let why = task["statusMessage"].as_str().unwrap_or("no reason given");
                return Err(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    format!("the task was cancelled: {}", crate::sanitize::for_log(why)),
                )
                .with_data(json!({"taskId": id}))
                .into());
            }
            Some("input_required") => answer_inputs(inner, config, id, &task, &mut seen).await?,
            Some("working") => {}
            _ => return Err(invalid("a task without a known status").into()),
        }
        let interval = task
            .get("pollIntervalMs")
            .and_then(Value::as_u64)
            .map_or(config.max_poll, Duration::from_millis)
            .clamp(config.min_poll, config.max_poll);
        tokio::time::sleep(interval).await;
        let get = task_request("tasks/get", id, None);
        task = inner
            .ready()
            .await
            .map_err(Into::into)?
            .call(get)
            .await
            .map_err(Into::into)?;
    }
}

/// Sends the answers to the task's new input requests (each key once).
async fn answer_inputs<S>(
    inner: &mut S,
    config: &Config,
    id: &str,
    task: &Value,
    seen: &mut Map<String, Value>,
) -> Result<(), BoxError>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    let mut new = Map::new();
    if let Some(requests) = task.get("inputRequests").and_then(Value::as_object) {
        for (k, v) in requests {
            if !seen.contains_key(k) {
                seen.insert(k.clone(), Value::Null);
                new.insert(k.clone(), v.clone());
            }
        }
    }
    if new.is_empty() {
        return Ok(());
    }
    let Some(handler) = &config.input else {
        return Err(ErrorObject::new(
            ErrorObject::INTERNAL_ERROR,
            "the task asks for input and this client has no input handler (TaskCallLayer::on_input)",
        )
        .into());
    };
    let answers = handler(new).await;
    if answers.is_empty() {
        return Ok(());
    }
    let update = task_request(
        "tasks/update",
        id,
        Some(("inputResponses", Value::Object(answers))),
    );
    inner
        .ready()
        .await
        .map_err(Into::into)?
        .call(update)
        .await
        .map_err(Into::into)?;
    Ok(())
}

/// Sends `tasks/cancel` for a task whose call is dropped (or failed) before
/// it ended: once, in the background, bounded in time.
struct CancelOnDrop<S>
where
    S: Service<McpRequest, Response = Value> + Send + 'static,
    S::Future: Send + 'static,
{
    inner: Option<S>,
    id: String,
    timeout: Duration,
    tracker: TaskTracker,
}

impl<S> Drop for CancelOnDrop<S>
where
    S: Service<McpRequest, Response = Value> + Send + 'static,
    S::Future: Send + 'static,
{
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(task_id = %self.id, "no runtime to send tasks/cancel on: the task runs on until its TTL");
            return;
        };
        let req = task_request("tasks/cancel", &self.id, None);
        let (id, timeout) = (std::mem::take(&mut self.id), self.timeout);
        self.tracker.spawn_on(
            async move {
                match tokio::time::timeout(timeout, inner.oneshot(req)).await {
                    Ok(Ok(_)) => {
                        tracing::debug!(task_id = %id, "task cancelled (tasks/cancel acknowledged)")
                    }
                    Ok(Err(_)) => tracing::debug!(task_id = %id, "tasks/cancel failed"),
                    Err(_) => {
                        tracing::debug!(task_id = %id, "tasks/cancel unanswered within its timeout")
                    }
                }
            },
            &runtime,
        );
    }
}
