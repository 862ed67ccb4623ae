//! `--tasks`: the official conformance suite's task fixture tools written
//! with tower-mcp (`ToolBuilder`), and the tasks layer that turns their
//! calls into tasks, as the root package's example servers have them
//! (`examples/common/tasks.rs`):
//!
//! | tool | as a task | what it does |
//! | --- | --- | --- |
//! | `greet {name}` | never | `Hello, {name}!` |
//! | `slow_compute {seconds, label?}` | when the request declares the extension | sleeps, a status each second, then its label |
//! | `failing_job {}` | required | after about 1 s: a tool error (`isError: true`) |
//! | `protocol_error_job {}` | required | after about 0.5 s: a JSON-RPC error (the task is `failed`) |
//! | `confirm_delete {filename}` | required | asks the client to confirm (one input request) |
//! | `multi_input {}` | required | asks two questions at once |
//! | `test_tool_with_task {}` | required | asks a name first (a multi round-trip exchange, before any task), then greets it from a task |
//!
//! A tool reads the request's task context (its input requests) and
//! this crate's request context (a task's status) from its tower-mcp
//! context: `ctx.extension::<TaskContext>()`,
//! `ctx.extension::<RequestContext>()`.

use std::time::Duration;

use serde_json::{json, Value};
use tower_mcp::extract::{Context, Json};
use tower_mcp::protocol::{InputRequiredResult, RequestOutcome};
use tower_mcp::schemars::JsonSchema;
use tower_mcp::{CallToolResult, McpRouter, ToolBuilder};
use tower_mcp_cancel::tasks::{TaskContext, TaskPolicy, TasksLayer};
use tower_mcp_cancel::RequestContext;

/// The tasks layer: `slow_compute` a task when the client declares the
/// extension, the others that run long a task only.
pub(crate) fn layer(ttl: Option<Duration>) -> TasksLayer {
    let mut layer = TasksLayer::new()
        .tool("slow_compute", TaskPolicy::optional())
        .poll_interval(Duration::from_millis(200));
    for tool in [
        "failing_job",
        "protocol_error_job",
        "confirm_delete",
        "multi_input",
        "test_tool_with_task",
    ] {
        layer = layer.tool(tool, TaskPolicy::required());
    }
    match ttl {
        Some(ttl) => layer.ttl(Some(ttl)),
        None => layer,
    }
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct GreetArgs {
    /// Whom to greet.
    name: Option<String>,
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct ComputeArgs {
    /// How long to compute, in seconds.
    seconds: f64,
    /// What the result is called.
    label: Option<String>,
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct DeleteArgs {
    /// The file to delete.
    filename: Option<String>,
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct NoArgs {}

fn elicit(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    }})
}

fn task_of(ctx: &Context) -> Result<TaskContext, tower_mcp::Error> {
    ctx.extension::<TaskContext>().cloned().ok_or_else(|| {
        tower_mcp::Error::JsonRpc(tower_mcp::JsonRpcError::internal_error(
            "this tool runs only as a task",
        ))
    })
}

fn input_failed(e: impl std::fmt::Display) -> tower_mcp::Error {
    tower_mcp::Error::JsonRpc(tower_mcp::JsonRpcError::internal_error(e.to_string()))
}

/// `router` with the fixture tools.
pub(crate) fn tools(router: McpRouter) -> McpRouter {
    let greet = ToolBuilder::new("greet")
        .description("Greets `name`.")
        .extractor_handler((), |Json(args): Json<GreetArgs>| async move {
            let name = args.name.unwrap_or_else(|| "World".into());
            Ok(CallToolResult::text(format!("Hello, {name}!")))
        })
        .build();
    let slow_compute = ToolBuilder::new("slow_compute")
        .description("Computes for `seconds` (a task when the client supports tasks).")
        .extractor_handler(
            (),
            |ctx: Context, Json(args): Json<ComputeArgs>| async move {
                let seconds = Some(args.seconds)
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .unwrap_or(1.0)
                    .min(86_400.0);
                let label = args.label.unwrap_or_else(|| "compute".into());
                let status = ctx
                    .extension::<RequestContext>()
                    .cloned()
                    .unwrap_or_default();
                let whole = seconds.floor() as u64;
                for s in 1..=whole {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let message = format!("{label}: {s}/{whole} s");
                    status
                        .progress(s as f64, Some(seconds), Some(message))
                        .await;
                }
                tokio::time::sleep(Duration::from_secs_f64(seconds - whole as f64)).await;
                Ok(CallToolResult::text(format!(
                    "computed {label} after {seconds}s"
                )))
            },
        )
        .build();
    let failing_job = ToolBuilder::new("failing_job")
        .description("A task that ends with a tool error after about 1 s.")
        .extractor_handler((), |Json(_): Json<NoArgs>| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(CallToolResult::error(
                "the job failed: the input was rejected",
            ))
        })
        .build();
    // tower-mcp makes an ordinary handler's error a tool error
    // (`isError: true`); an MRTR handler's error stays a JSON-RPC error.
    let protocol_error_job = ToolBuilder::new("protocol_error_job")
        .description("A task that fails with a JSON-RPC error.")
        .mrtr_handler(|_: tower_mcp::RequestContext, _: NoArgs| async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Err::<RequestOutcome<CallToolResult>, _>(tower_mcp::Error::JsonRpc(
                tower_mcp::JsonRpcError::internal_error("the job hit a protocol error"),
            ))
        })
        .build();
    let confirm_delete = ToolBuilder::new("confirm_delete")
        .description("A task that asks the client to confirm before it deletes `filename`.")
        .extractor_handler(
            (),
            |ctx: Context, Json(args): Json<DeleteArgs>| async move {
                let task = task_of(&ctx)?;
                let file = args.filename.unwrap_or_else(|| "the file".into());
                let ask = elicit(
                    &format!("Delete {file}?"),
                    json!({"confirm": {"type": "boolean"}}),
                    &["confirm"],
                );
                let answer = task.input("confirm", ask).await.map_err(input_failed)?;
                let yes = answer["action"] == "accept" && answer["content"]["confirm"] == true;
                Ok(CallToolResult::text(if yes {
                    format!("deleted {file}")
                } else {
                    format!("kept {file}")
                }))
            },
        )
        .build();
    let multi_input = ToolBuilder::new("multi_input")
        .description("A task that asks two questions at once.")
        .extractor_handler((), |ctx: Context, Json(_): Json<NoArgs>| async move {
            let task = task_of(&ctx)?;
            let name = elicit("Your name?", json!({"name": {"type": "string"}}), &["name"]);
            let confirm = elicit(
                "Go ahead?",
                json!({"confirm": {"type": "boolean"}}),
                &["confirm"],
            );
            let (first, second) =
                tokio::join!(task.input("first", name), task.input("second", confirm));
            let (first, second) = (first.map_err(input_failed)?, second.map_err(input_failed)?);
            Ok(CallToolResult::text(format!(
                "got {} and {}",
                first["content"]["name"].as_str().unwrap_or("?"),
                second["content"]["confirm"]
            )))
        })
        .build();
    // A multi round-trip exchange resolved before any task exists: round 1
    // answers `input_required` at once (no task); round 2 carries the
    // answer and runs long enough to become one.
    let with_task = ToolBuilder::new("test_tool_with_task")
        .description("Asks a name (multi round-trip), then greets it from a task.")
        .mrtr_handler(|ctx: tower_mcp::RequestContext, _: NoArgs| async move {
            let answer = ctx
                .input_responses()
                .and_then(|r| serde_json::to_value(r).ok())
                .and_then(|r| r.get("user_name").cloned());
            let Some(answer) = answer else {
                let mut round1 = InputRequiredResult::new();
                round1.input_requests = serde_json::from_value(json!({"user_name": elicit(
                    "What is your name?",
                    json!({"name": {"type": "string"}}),
                    &["name"],
                )}))
                .ok();
                round1.request_state = Some("round-1".into());
                return Ok(RequestOutcome::input_required(round1));
            };
            let name = answer["content"]["name"]
                .as_str()
                .unwrap_or("stranger")
                .to_owned();
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(RequestOutcome::Complete(CallToolResult::text(format!(
                "Hello, {name}!"
            ))))
        })
        .build();
    router
        .tool(greet)
        .tool(slow_compute)
        .tool(failing_job)
        .tool(protocol_error_job)
        .tool(confirm_delete)
        .tool(multi_input)
        .tool(with_task)
}
