//! The client side: [`TaskCallLayer`] turns a task back into one call;
//! [`TaskClient`] sends `tasks/get`, `tasks/update` and `tasks/cancel` by
//! task id for a caller that keeps the handle ([`KeepTaskHandle`]). What
//! they do is told on [`TaskCallLayer`].

mod answer;
mod config;
mod guard;
mod layer;
mod poll;
mod retry;
mod typed;

use serde_json::{json, Map, Value};

use super::record::EXTENSION;
use crate::jsonrpc::{ErrorObject, CLIENT_CAPABILITIES_META};
use crate::McpRequest;

pub use answer::{DetailedTask, InvalidTaskAnswer};
pub use layer::{TaskCall, TaskCallLayer};
pub use typed::TaskClient;

/// Marks a request whose caller wants the `CreateTaskResult` itself rather
/// than the task's result (see [`TaskCallLayer`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepTaskHandle;

/// Declares the tasks extension in `req`'s `params._meta` client
/// capabilities (see [Declaring the extension](TaskCallLayer#declaring-the-extension)),
/// keeping whatever else they hold; params that are absent become `{}`.
///
/// Fails, leaving `req` as it was, when its params are not a JSON object
/// (an `-32602` error object).
///
/// ```
/// use serde_json::json;
/// use tower_mcp_cancel::tasks::{declare_extension, EXTENSION};
/// use tower_mcp_cancel::McpRequest;
///
/// let mut req = McpRequest::new(1, "tasks/get").with_params(json!({"taskId": "786512e2"}));
/// declare_extension(&mut req)?;
/// let params: serde_json::Value = req.params_as()?;
/// assert_eq!(
///     params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"][EXTENSION],
///     json!({})
/// );
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn declare_extension(req: &mut McpRequest) -> Result<(), ErrorObject> {
    let not_object = || {
        ErrorObject::new(
            ErrorObject::INVALID_PARAMS,
            format!(
                "{} params must be a JSON object to declare the tasks extension",
                crate::sanitize::for_log(req.method())
            ),
        )
    };
    let mut params: Map<String, Value> = match req.params() {
        None => Map::new(),
        Some(p) => serde_json::from_str(p.get()).map_err(|_| not_object())?,
    };
    let mut meta = object(params.remove("_meta"));
    let mut caps = object(meta.remove(CLIENT_CAPABILITIES_META));
    let mut extensions = object(caps.remove("extensions"));
    extensions.entry(EXTENSION).or_insert_with(|| json!({}));
    caps.insert("extensions".into(), Value::Object(extensions));
    meta.insert(CLIENT_CAPABILITIES_META.into(), Value::Object(caps));
    params.insert("_meta".into(), Value::Object(meta));
    let raw = serde_json::value::to_raw_value(&params).map_err(|_| not_object())?;
    req.set_raw_params(Some(raw));
    Ok(())
}

/// `v` if it is an object; a new one if absent or anything else.
fn object(v: Option<Value>) -> Map<String, Value> {
    match v {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// A `tasks/*` request for task `id`, declaring the extension.
fn task_request(method: &str, id: &str, extra: Option<(&str, Value)>) -> McpRequest {
    let mut params = json!({
        "taskId": id,
        "_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}}}}
    });
    if let Some((k, v)) = extra {
        params[k] = v;
    }
    McpRequest::without_id(method).with_params(params)
}
