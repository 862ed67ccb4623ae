//! [`TaskClient`]: `tasks/get`, `tasks/update` and `tasks/cancel` by task
//! id, typed.

use serde_json::{json, Map, Value};
use tower::{Service, ServiceExt};

use super::answer::{DetailedTask, InvalidTaskAnswer, Shape};
use super::task_request;
use crate::error::BoxError;
use crate::McpRequest;

/// `tasks/get`, `tasks/update` and `tasks/cancel` by task id over any
/// client service (`Service<McpRequest, Response = serde_json::Value>`: a
/// transport, or a stack over one), for a caller that keeps the task's
/// handle ([`KeepTaskHandle`](super::KeepTaskHandle)) and follows it on
/// its own.
///
/// Each request declares the extension, is sent once (no retry: the
/// caller decides what to do with a failure, see
/// [what the layer sends again](super::TaskCallLayer#what-the-layer-sends-again)),
/// and its answer is checked: the transport's error as it is (a `-32602`
/// when the server does not know the task), or [`InvalidTaskAnswer`].
///
/// Dropping a method's future drops its request as any call is dropped
/// (the transport cancels it) and nothing else: in particular a
/// `tasks/cancel` dropped before its answer may or may not have reached
/// the server — the task may still be running.
///
/// ```
/// use serde_json::{json, Value};
/// use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
/// use tower_mcp_cancel::tasks::{KeepTaskHandle, TaskCallLayer, TaskClient, TaskStatus};
/// use tower_mcp_cancel::McpRequest;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// // A stand-in for a transport, whose server makes every call a task.
/// let transport = service_fn(|req: McpRequest| async move {
///     let task = json!({
///         "taskId": "786512e2", "status": "working", "ttlMs": 60000, "pollIntervalMs": 500,
///         "createdAt": "2026-07-28T10:30:00Z", "lastUpdatedAt": "2026-07-28T10:30:00Z",
///     });
///     let mut answer = task.as_object().cloned().unwrap_or_default();
///     match req.method() {
///         "tools/call" => { answer.insert("resultType".into(), json!("task")); }
///         "tasks/get" => { answer.insert("resultType".into(), json!("complete")); }
///         _ => return Ok::<Value, BoxError>(json!({"resultType": "complete"})),
///     }
///     Ok(Value::Object(answer))
/// });
/// let mut client = ServiceBuilder::new().layer(TaskCallLayer::new()).service(transport);
///
/// // The handle, not the result: the task is the caller's to follow.
/// let call = McpRequest::without_id("tools/call")
///     .with_params(json!({"name": "export", "arguments": {}}))
///     .with_extension(KeepTaskHandle);
/// let handle = client.ready().await?.call(call).await?;
/// let id = handle["taskId"].as_str().ok_or("no taskId")?;
///
/// let mut tasks = TaskClient::new(client);
/// let task = tasks.get(id).await?;
/// assert_eq!(task.status, TaskStatus::Working);
/// assert_eq!(task.poll_interval_ms, Some(500));
/// tasks.cancel(id).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct TaskClient<S> {
    inner: S,
}

impl<S> TaskClient<S>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: Into<BoxError>,
{
    /// A client sending through `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The task as `tasks/get` answers it, checked: about task `task_id`,
    /// with a status of the spec's, the fields that status requires, and
    /// numbers where the schema has integers (see [`DetailedTask`]).
    pub async fn get(&mut self, task_id: &str) -> Result<DetailedTask, BoxError> {
        let answer = self.send(task_request("tasks/get", task_id, None)).await?;
        Ok(DetailedTask::check(&answer, Shape::Get(task_id))?)
    }

    /// Sends the answers to the task's input requests, by key (the
    /// `inputResponses` of `tasks/update`). The acknowledgement says only
    /// that the server took them: [`get`](Self::get) shows when the task
    /// moved on.
    pub async fn update(
        &mut self,
        task_id: &str,
        input_responses: Map<String, Value>,
    ) -> Result<(), BoxError> {
        let req = task_request(
            "tasks/update",
            task_id,
            Some(("inputResponses", Value::Object(input_responses))),
        );
        let answer = self.send(req).await?;
        acknowledged(&answer, "tasks/update answer", task_id)
    }

    /// Asks the server to cancel the task. The acknowledgement is not the
    /// end: the task may still end otherwise, and reads `cancelled` (if
    /// ever) once the server stopped it.
    pub async fn cancel(&mut self, task_id: &str) -> Result<(), BoxError> {
        let answer = self
            .send(task_request("tasks/cancel", task_id, None))
            .await?;
        acknowledged(&answer, "tasks/cancel answer", task_id)
    }

    async fn send(&mut self, req: McpRequest) -> Result<Value, BoxError> {
        self.inner
            .ready()
            .await
            .map_err(Into::into)?
            .call(req)
            .await
            .map_err(Into::into)
    }
}

/// An acknowledgement is a JSON object (its `resultType` is not checked:
/// the spec's own examples differ on it), and not a `CreateTaskResult`.
fn acknowledged(answer: &Value, what: &'static str, task_id: &str) -> Result<(), BoxError> {
    let reason = match answer {
        Value::Object(m) if m.get("resultType") == Some(&json!("task")) => {
            "a CreateTaskResult, which it cannot be"
        }
        Value::Object(_) => return Ok(()),
        _ => "not a JSON object",
    };
    Err(InvalidTaskAnswer::new(what, Some(task_id), reason).into())
}
