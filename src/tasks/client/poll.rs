//! Following a task to its end: [`follow`] polls `tasks/get`, answers
//! input requests with `tasks/update`, and sends each again through
//! transient failures ([`send`]).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tower::{Service, ServiceExt};

use super::super::record::TaskStatus;
use super::answer::{DetailedTask, Shape};
use super::config::Config;
use super::retry::{backoff, is_transient};
use super::task_request;
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;
use crate::sanitize::for_log;
use crate::{McpRequest, ProgressTap};

/// Why following a task stopped short of its result.
pub(super) struct Stop {
    pub(super) error: BoxError,
    /// Whether the task may still be running (it is cancelled then): not
    /// when it ended, nor when the server no longer knows it.
    pub(super) open: bool,
}

impl Stop {
    fn open(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            open: true,
        }
    }

    fn closed(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
            open: false,
        }
    }
}

/// Follows task `seed` (its `CreateTaskResult`, checked) until it ends: its
/// result, or why not.
pub(super) async fn follow<S>(
    inner: &mut S,
    config: &Config,
    seed: DetailedTask,
    tap: Option<&ProgressTap>,
) -> Result<Value, Stop>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    let id = seed.id.clone();
    let mut shown = None;
    show(tap, &seed, &mut shown);
    let mut interval = config.interval(seed.poll_interval_ms);
    // A `CreateTaskResult` carries no result, error or input requests:
    // unless it says `working`, they are read at once.
    let mut wait = match seed.status {
        TaskStatus::Working => interval,
        _ => Duration::ZERO,
    };
    let mut answered = HashSet::new();
    loop {
        tokio::time::sleep(wait).await;
        let get = || task_request("tasks/get", &id, None);
        let answer = send(inner, config, interval, &id, get)
            .await
            .map_err(|e| match e.downcast_ref::<ErrorObject>() {
                Some(o) if o.code == ErrorObject::INVALID_PARAMS => Stop::closed(gone(&id, o)),
                _ => Stop::open(e),
            })?;
        let task = DetailedTask::check(&answer, Shape::Get(&id)).map_err(Stop::open)?;
        show(tap, &task, &mut shown);
        match task.status {
            TaskStatus::Completed => return Ok(task.result.unwrap_or_default()),
            TaskStatus::Failed => {
                let error = task.error.unwrap_or_else(|| {
                    ErrorObject::new(ErrorObject::INTERNAL_ERROR, "the task failed")
                });
                return Err(Stop::closed(error));
            }
            TaskStatus::Cancelled => {
                let why = task.status_message.as_deref().unwrap_or("no reason given");
                return Err(Stop::closed(
                    ErrorObject::new(
                        ErrorObject::INTERNAL_ERROR,
                        format!("the task was cancelled: {}", for_log(why)),
                    )
                    .with_data(json!({"taskId": id})),
                ));
            }
            TaskStatus::InputRequired => {
                let requests = task.input_requests.clone();
                answer_inputs(inner, config, interval, &id, requests, &mut answered)
                    .await
                    .map_err(Stop::open)?;
            }
            TaskStatus::Working => {}
        }
        interval = config.interval(task.poll_interval_ms);
        wait = interval;
    }
}

/// The error of a `tasks/get` the server answered `-32602`: the task is
/// unknown to it.
fn gone(id: &str, answer: &ErrorObject) -> ErrorObject {
    ErrorObject::new(
        ErrorObject::INVALID_PARAMS,
        format!(
            "task {} is unknown to the server (expired, purged, or never created): {}",
            for_log(id),
            for_log(&answer.message)
        ),
    )
    .with_data(json!({"taskId": id}))
}

/// Records a change of the task's (status message, last update) as
/// progress in the call's tap: a `ProgressResetLayer` above restarts its
/// idle limit, a `ProgressObserver` sees the message.
fn show(
    tap: Option<&ProgressTap>,
    task: &DetailedTask,
    shown: &mut Option<(Option<String>, String)>,
) {
    let change = (task.status_message.clone(), task.last_updated_at.clone());
    if shown.as_ref() == Some(&change) {
        return;
    }
    if let Some(tap) = tap {
        let next = tap.last().map_or(1.0, |p| p.floor() + 1.0);
        let message = match &task.status_message {
            Some(m) => m.clone(),
            None => format!("task {}: {}", for_log(&task.id), task.status.as_str()),
        };
        tap.record(next, None, Some(message));
    }
    *shown = Some(change);
}

/// Sends the answers to the task's new input requests (each key once).
async fn answer_inputs<S>(
    inner: &mut S,
    config: &Config,
    interval: Duration,
    id: &str,
    requests: Map<String, Value>,
    answered: &mut HashSet<String>,
) -> Result<(), BoxError>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    let new: Map<String, Value> = requests
        .into_iter()
        .filter(|(k, _)| answered.insert(k.clone()))
        .collect();
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
    let answers = Value::Object(handler(new).await);
    if answers.as_object().is_some_and(Map::is_empty) {
        return Ok(());
    }
    // Sent again as it is: a server ignores the answers to keys no longer
    // outstanding, so a copy of an update that did arrive changes nothing.
    let update = || {
        task_request(
            "tasks/update",
            id,
            Some(("inputResponses", answers.clone())),
        )
    };
    send(inner, config, interval, id, update).await?;
    Ok(())
}

/// Sends `make()` until it is answered, a failure that is not transient, or
/// the configured count of consecutive transient failures, waiting
/// [`backoff`] between attempts.
async fn send<S>(
    inner: &mut S,
    config: &Config,
    interval: Duration,
    id: &str,
    make: impl Fn() -> McpRequest,
) -> Result<Value, BoxError>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    let mut failures: u32 = 0;
    loop {
        let req = make();
        let method = req.method().to_owned();
        let out = match inner.ready().await.map_err(Into::into) {
            Ok(svc) => svc.call(req).await.map_err(Into::into),
            Err(e) => Err(e),
        };
        let error = match out {
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        if !is_transient(&*error) {
            return Err(error);
        }
        if failures >= config.retries {
            tracing::warn!(task_id = %for_log(id), %method, failures = failures + 1, error = %error, "giving the task up: its requests kept failing");
            return Err(error);
        }
        failures += 1;
        let delay = backoff(interval, failures, config.max_poll);
        tracing::debug!(task_id = %for_log(id), %method, failures, ?delay, error = %error, "transient failure; sending again");
        tokio::time::sleep(delay).await;
    }
}
