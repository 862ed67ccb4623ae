//! `--tasks`: the official conformance suite's task fixture tools, as the
//! root package's example servers list them (`examples/common/tasks.rs`:
//! the same names, schemas and task policies), written as rmcp handler code.
//!
//! Through `Cancellable::tasks` (the default) they are plain async code: the
//! tasks layer makes their calls tasks and drops their futures at
//! `tasks/cancel` and at the TTL; an input request or a status message goes
//! through the `TaskContext` rmcp's `context.extensions` carries. With
//! `--plain` they run on rmcp's own `TaskManager` instead, written as
//! rmcp's docs have it (the tool spawns its task, and `slow_compute` stops
//! at `tasks/cancel` only because it watches for it).

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// What the root's fixture module takes from its parent.
#[allow(dead_code)]
pub(crate) enum Reply {
    Json(Value),
}

/// The root package's fixture tools: their names, `tools/list` entries and
/// the tasks layer's policies for them.
#[allow(dead_code, unused_imports, unreachable_pub)]
#[path = "../../../../examples/common/tasks.rs"]
pub(crate) mod fixture;

/// How a fixture tool's task asks for input and reports its status: the
/// integration's `TaskContext`, or rmcp's own.
trait Work: Send + Sync {
    fn input(
        &self,
        key: &str,
        request: Value,
    ) -> impl Future<Output = Result<Value, ErrorData>> + Send;
    fn status(&self, message: String) -> impl Future<Output = ()> + Send;
}

impl Work for tower_mcp_cancel::tasks::TaskContext {
    async fn input(&self, key: &str, request: Value) -> Result<Value, ErrorData> {
        tower_mcp_cancel::tasks::TaskContext::input(self, key, request)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
    async fn status(&self, message: String) {
        tower_mcp_cancel::tasks::TaskContext::status(self, message).await;
    }
}

impl Work for rmcp::task_manager::TaskContext {
    async fn input(&self, key: &str, request: Value) -> Result<Value, ErrorData> {
        let request = serde_json::from_value(request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.request_input(key, request).await.map_err(|e| match e {
            TaskExit::Error(e) => e,
            _ => ErrorData::internal_error("the task was cancelled", None),
        })
    }
    async fn status(&self, message: String) {
        self.set_status_message(message);
    }
}

/// No task: a status goes nowhere, an input request fails.
struct NoTask;

impl Work for NoTask {
    async fn input(&self, _key: &str, _request: Value) -> Result<Value, ErrorData> {
        Err(ErrorData::internal_error(
            "this tool runs only as a task",
            None,
        ))
    }
    async fn status(&self, _message: String) {}
}

fn text(text: String, is_error: bool) -> CallToolResult {
    let content = vec![ContentBlock::text(text)];
    if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

fn elicit(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    }})
}

/// The work of a fixture tool that may run as a task (never looks at a
/// cancellation token: only a drop stops it, or rmcp's `TaskManager` at the
/// TTL).
async fn work(name: &str, args: &Value, task: &impl Work) -> Result<CallToolResult, ErrorData> {
    match name {
        "slow_compute" => {
            let seconds = args["seconds"]
                .as_f64()
                .filter(|s| s.is_finite() && (0.0..=86_400.0).contains(s))
                .unwrap_or(1.0);
            let label = args["label"].as_str().unwrap_or("compute");
            let whole = seconds.floor() as u64;
            for s in 1..=whole {
                tokio::time::sleep(Duration::from_secs(1)).await;
                task.status(format!("{label}: {s}/{whole} s")).await;
            }
            tokio::time::sleep(Duration::from_secs_f64(seconds - whole as f64)).await;
            Ok(text(format!("computed {label} after {seconds}s"), false))
        }
        "failing_job" => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(text("the job failed: the input was rejected".into(), true))
        }
        "protocol_error_job" => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Err(ErrorData::internal_error(
                "the job hit a protocol error",
                None,
            ))
        }
        "confirm_delete" => {
            let file = args["filename"].as_str().unwrap_or("the file");
            let ask = elicit(
                &format!("Delete {file}?"),
                json!({"confirm": {"type": "boolean"}}),
                &["confirm"],
            );
            let answer = task.input("confirm", ask).await?;
            let yes = answer["action"] == "accept" && answer["content"]["confirm"] == true;
            let done = if yes { "deleted" } else { "kept" };
            Ok(text(format!("{done} {file}"), false))
        }
        "multi_input" => {
            let name = elicit("Your name?", json!({"name": {"type": "string"}}), &["name"]);
            let go = elicit(
                "Go ahead?",
                json!({"confirm": {"type": "boolean"}}),
                &["confirm"],
            );
            let (first, second) = tokio::join!(task.input("first", name), task.input("second", go));
            let (first, second) = (first?, second?);
            Ok(text(
                format!(
                    "got {} and {}",
                    first["content"]["name"].as_str().unwrap_or("?"),
                    second["content"]["confirm"]
                ),
                false,
            ))
        }
        "test_tool_with_task" => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let name = args["name"].as_str().unwrap_or("stranger");
            Ok(text(format!("Hello, {name}!"), false))
        }
        _ => Err(ErrorData::invalid_params(
            format!("unknown tool {name}"),
            None,
        )),
    }
}

/// `test_tool_with_task`'s first round (a multi round-trip exchange,
/// before any task): ask for a name. `None` once the answer came; then the
/// work's `name` argument is that answer.
fn first_round(params: &CallToolRequestParams, args: &mut Value) -> Option<InputRequiredResult> {
    let answer = params
        .input_responses
        .as_ref()
        .and_then(|r| r.get("user_name"))
        .cloned();
    match answer {
        Some(answer) => {
            args["name"] = answer["content"]["name"].clone();
            None
        }
        None => {
            let ask = elicit(
                "What is your name?",
                json!({"name": {"type": "string"}}),
                &["name"],
            );
            let requests = serde_json::from_value(json!({ "user_name": ask })).ok()?;
            Some(InputRequiredResult::new(
                Some(requests),
                Some("round-1".into()),
            ))
        }
    }
}

/// The fixture tools around the example's own (`inner`): through
/// `Cancellable::tasks` (`manager: None`) or on rmcp's `TaskManager`.
#[derive(Clone)]
pub(crate) struct WithFixtures<H> {
    pub(crate) inner: H,
    pub(crate) manager: Option<(TaskManager, Option<Duration>)>,
}

impl<H: ServerHandler> WithFixtures<H> {
    async fn call_fixture(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = params.name.to_string();
        let mut args = Value::Object(params.arguments.clone().unwrap_or_default());
        if name == "greet" {
            let who = args["name"].as_str().unwrap_or("World");
            return Ok(text(format!("Hello, {who}!"), false).into());
        }
        if name == "test_tool_with_task" {
            if let Some(ask) = first_round(&params, &mut args) {
                return Ok(ask.into());
            }
        }
        let Some((manager, ttl)) = &self.manager else {
            // Through the integration: the tasks layer decides.
            let task = context
                .extensions
                .get::<tower_mcp_cancel::tasks::TaskContext>()
                .cloned();
            return match task {
                Some(task) => work(&name, &args, &task).await.map(Into::into),
                None => work(&name, &args, &NoTask).await.map(Into::into),
            };
        };
        // rmcp alone: the tool spawns its own task, when the client can take one.
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !declared {
            if name == "slow_compute" {
                return work(&name, &args, &NoTask).await.map(Into::into);
            }
            return Err(ErrorData::missing_required_client_capability(
                rmcp::model::ClientCapabilities::builder()
                    .enable_tasks()
                    .build(),
            ));
        }
        let mut options = TaskOptions::new().with_poll_interval_ms(200);
        if let Some(ttl) = ttl {
            options = options.with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        }
        let task = manager.spawn(options, move |task| {
            Box::pin(async move {
                // As rmcp's docs have it: the work stops at `tasks/cancel`
                // only if it watches for it.
                tokio::select! {
                    out = work(&name, &args, &task) => out.map_err(TaskExit::Error),
                    () = task.cancelled() => Err(TaskExit::Cancelled),
                }
            })
        });
        Ok(CreateTaskResult::new(task).into())
    }
}

impl<H: ServerHandler> ServerHandler for WithFixtures<H> {
    fn get_info(&self) -> ServerConfig {
        let mut info = self.inner.get_info();
        if self.manager.is_some() {
            info.capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .entry(rmcp::model::TASKS_EXTENSION_ID.to_owned())
                .or_default();
        }
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut list = self.inner.list_tools(request, context).await?;
        for tool in fixture::tools_list() {
            let tool: Tool = serde_json::from_value(tool)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            list.tools.push(tool);
        }
        Ok(list)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if fixture::TOOLS.contains(&request.name.as_ref()) {
            self.call_fixture(request, context).await
        } else {
            self.inner.call_tool(request, context).await
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (manager, _) = self.manager.as_ref().ok_or_else(no_tasks)?;
        manager.get_task(&request.task_id).map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (manager, _) = self.manager.as_ref().ok_or_else(no_tasks)?;
        manager.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (manager, _) = self.manager.as_ref().ok_or_else(no_tasks)?;
        manager.cancel_task(&request.task_id)
    }
}

fn no_tasks() -> ErrorData {
    ErrorData::internal_error("tasks are served by the tasks layer", None)
}
