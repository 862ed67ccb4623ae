//! `--tasks`: the official conformance suite's task fixture tools, and the
//! tasks layer that turns their calls into tasks (the
//! `io.modelcontextprotocol/tasks` extension).
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

use std::time::Duration;

use serde_json::{json, Value};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::{TaskContext, TaskPolicy, TasksLayer};
use tower_mcp_cancel::{McpRequest, RequestContext};

use super::Reply;

/// The tools' names.
pub const TOOLS: &[&str] = &[
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
];

/// The tasks layer of the example servers: `slow_compute` a task when the
/// client declares the extension, the others that run long a task only.
pub fn layer(ttl: Option<Duration>, grace: Duration) -> TasksLayer {
    let mut layer = TasksLayer::new()
        .tool("slow_compute", TaskPolicy::optional())
        .poll_interval(Duration::from_millis(200))
        .grace(grace);
    for tool in &TOOLS[2..] {
        layer = layer.tool(*tool, TaskPolicy::required());
    }
    match ttl {
        Some(ttl) => layer.ttl(Some(ttl)),
        None => layer,
    }
}

/// Their `tools/list` entries.
pub fn tools_list() -> Vec<Value> {
    let object = |props: Value, required: &[&str]| json!({"type": "object", "properties": props, "required": required});
    vec![
        json!({"name": "greet", "description": "Greets `name`.",
            "inputSchema": object(json!({"name": {"type": "string"}}), &["name"])}),
        json!({"name": "slow_compute", "description": "Computes for `seconds` (a task when the client supports tasks).",
            "inputSchema": object(json!({"seconds": {"type": "number"}, "label": {"type": "string"}}), &["seconds"])}),
        json!({"name": "failing_job", "description": "A task that ends with a tool error after about 1 s.",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "protocol_error_job", "description": "A task that fails with a JSON-RPC error.",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "confirm_delete", "description": "A task that asks the client to confirm before it deletes `filename`.",
            "inputSchema": object(json!({"filename": {"type": "string"}}), &["filename"])}),
        json!({"name": "multi_input", "description": "A task that asks two questions at once.",
            "inputSchema": object(json!({}), &[])}),
        json!({"name": "test_tool_with_task", "description": "Asks a name (multi round-trip), then greets it from a task.",
            "inputSchema": object(json!({}), &[])}),
    ]
}

fn text(text: String, is_error: bool) -> Reply {
    Reply::Json(json!({
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
    }))
}

fn elicit(message: String, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    }})
}

fn task_of(req: &McpRequest) -> Result<TaskContext, ErrorObject> {
    TaskContext::of(req).ok_or_else(|| {
        ErrorObject::new(ErrorObject::INTERNAL_ERROR, "this tool runs only as a task")
    })
}

fn input_failed(e: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::new(ErrorObject::INTERNAL_ERROR, e.to_string())
}

/// Runs fixture tool `name`; `None` for another tool.
pub async fn call(
    name: &str,
    req: &McpRequest,
    params: &Value,
) -> Option<Result<Reply, ErrorObject>> {
    let args = &params["arguments"];
    Some(match name {
        "greet" => Ok(text(
            format!("Hello, {}!", args["name"].as_str().unwrap_or("World")),
            false,
        )),
        "slow_compute" => {
            let seconds = args["seconds"]
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .unwrap_or(1.0);
            let label = args["label"].as_str().unwrap_or("compute").to_owned();
            let ctx = RequestContext::of(req);
            let whole = seconds.floor() as u64;
            for s in 1..=whole {
                tokio::time::sleep(Duration::from_secs(1)).await;
                ctx.progress(
                    s as f64,
                    Some(seconds),
                    Some(format!("{label}: {s}/{whole} s")),
                )
                .await;
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
            Err(ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                "the job hit a protocol error",
            ))
        }
        "confirm_delete" => confirm_delete(req, args).await,
        "multi_input" => multi_input(req).await,
        "test_tool_with_task" => with_task(req, params).await,
        _ => return None,
    })
}

async fn confirm_delete(req: &McpRequest, args: &Value) -> Result<Reply, ErrorObject> {
    let task = task_of(req)?;
    let file = args["filename"].as_str().unwrap_or("the file").to_owned();
    let ask = elicit(
        format!("Delete {file}?"),
        json!({"confirm": {"type": "boolean"}}),
        &["confirm"],
    );
    let answer = task.input("confirm", ask).await.map_err(input_failed)?;
    let yes = answer["action"] == "accept" && answer["content"]["confirm"] == true;
    Ok(text(
        if yes {
            format!("deleted {file}")
        } else {
            format!("kept {file}")
        },
        false,
    ))
}

async fn multi_input(req: &McpRequest) -> Result<Reply, ErrorObject> {
    let task = task_of(req)?;
    let name = elicit(
        "Your name?".into(),
        json!({"name": {"type": "string"}}),
        &["name"],
    );
    let confirm = elicit(
        "Go ahead?".into(),
        json!({"confirm": {"type": "boolean"}}),
        &["confirm"],
    );
    let (first, second) = tokio::join!(task.input("first", name), task.input("second", confirm));
    let (first, second) = (first.map_err(input_failed)?, second.map_err(input_failed)?);
    Ok(text(
        format!(
            "got {} and {}",
            first["content"]["name"].as_str().unwrap_or("?"),
            second["content"]["confirm"]
        ),
        false,
    ))
}

/// A multi round-trip exchange resolved before any task exists: round 1
/// answers `input_required` at once (no task); round 2 carries the answer
/// and runs long enough to become one.
async fn with_task(req: &McpRequest, params: &Value) -> Result<Reply, ErrorObject> {
    let Some(answer) = params["inputResponses"]["user_name"].as_object() else {
        return Ok(Reply::Json(json!({
            "resultType": "input_required",
            "inputRequests": {"user_name": elicit(
                "What is your name?".into(),
                json!({"name": {"type": "string"}}),
                &["name"],
            )},
            "requestState": "round-1",
        })));
    };
    let name = answer
        .get("content")
        .and_then(|c| c["name"].as_str())
        .unwrap_or("stranger")
        .to_owned();
    let _ = req;
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(text(format!("Hello, {name}!"), false))
}
