//! The client side: [`TaskCallLayer`] turns a task back into one call;
//! [`TaskClient`] sends `tasks/get`, `tasks/update` and `tasks/cancel` by
//! task id for a caller that keeps the handle ([`KeepTaskHandle`]).
//!
//! # Declaring the extension
//!
//! A server gives a task only to a request that declares the extension,
//! and answers `tasks/*` only to one that does (`-32021` otherwise). The
//! declaration is a key of the request's `params._meta`:
//!
//! ```json
//! {
//!   "name": "export",
//!   "arguments": {},
//!   "_meta": {
//!     "io.modelcontextprotocol/clientCapabilities": {
//!       "extensions": { "io.modelcontextprotocol/tasks": {} }
//!     }
//!   }
//! }
//! ```
//!
//! [`declare_extension`] adds it to an [`McpRequest`]. [`TaskCallLayer`]
//! adds it to every `tools/call`, `tasks/get`, `tasks/update` and
//! `tasks/cancel` it passes on, and to a `subscriptions/listen` that asks
//! for `taskIds`; [`TaskClient`] to each request it sends.
//!
//! # What the layer does with a task
//!
//! When a `tools/call` is answered with a `CreateTaskResult`,
//! [`TaskCallLayer`] checks it, then polls `tasks/get` (at the task's
//! `pollIntervalMs`, kept within [`poll_bounds`](TaskCallLayer::poll_bounds);
//! at once when the `CreateTaskResult` does not say `working`) until the
//! task ends, and resolves the call with the task's `result`, or fails it
//! with the task's `error` (a `failed` task) or an error that says it was
//! cancelled. Input requests go to the [`on_input`](TaskCallLayer::on_input)
//! handler, its answers to `tasks/update`. Each change the task shows (its
//! `statusMessage`, its `lastUpdatedAt`) is recorded as progress in the
//! call's [`ProgressTap`](crate::ProgressTap): a
//! [`ProgressResetLayer`](crate::ProgressResetLayer) above restarts its
//! idle limit, and a [`ProgressObserver`](crate::ProgressObserver) sees the
//! status message.
//!
//! Every answer is checked before it is used ([`InvalidTaskAnswer`]
//! otherwise): a `tasks/get` answer must be about the task polled, with
//! one of the spec's five statuses and the fields that status requires
//! (`completed`: a `result` object; `failed`: an `error` that is a
//! JSON-RPC error object; `input_required`: an `inputRequests` object),
//! `taskId`, `createdAt` and `lastUpdatedAt` strings, `ttlMs` an integer or
//! `null`, `pollIntervalMs` (if there) an integer — an integral float such
//! as `500.0` is one; a value past `u64::MAX` is read as `u64::MAX`, and
//! the interval is held to the bounds anyway. A `CreateTaskResult` is
//! checked for the same task fields.
//!
//! # What a task client sends again
//!
//! A `tasks/get` or `tasks/update` that fails *transiently* is sent again
//! after a backoff (the polling interval, doubled per failure, capped at
//! the upper poll bound), up to [`poll_retries`](TaskCallLayer::poll_retries)
//! failures in a row; an answer resets the count. A `tasks/update` sent
//! twice is harmless: a server ignores answers to keys no longer
//! outstanding. Transient:
//!
//! * a JSON-RPC `-32603` (internal error: a store that failed, a replica
//!   that went away);
//! * over Streamable HTTP, a `502`, `503`, `504` or `429` status, a
//!   response stream that ended before its answer, a connection refused,
//!   reset, failed or unresolved (DNS), a timeout;
//! * an I/O error of kind `ConnectionReset`, `ConnectionAborted`,
//!   `ConnectionRefused`, `NotConnected`, `TimedOut`, `UnexpectedEof` or
//!   `Interrupted`;
//! * an [`Elapsed`](crate::Elapsed) of a timer *below* the layer (one poll
//!   took too long), except an inherited deadline.
//!
//! Not transient, and failing the call at once: `-32602` (the server does
//! not know the task — expired, purged: the call fails with a `-32602`
//! that names the task, and nothing is cancelled), `-32021`, any other
//! JSON-RPC error, an [`InvalidTaskAnswer`], a TLS failure, an answer too
//! large or of the wrong content type, a closed stdio connection
//! (`BrokenPipe`: it never reopens), any error this crate does not know.
//! The `tools/call` itself is never sent again.
//!
//! # What cancels the task
//!
//! **Dropping the call's future sends `tasks/cancel`** — once, in the
//! background, bounded by [`cancel_timeout`](TaskCallLayer::cancel_timeout)
//! ([`cancels_sent`](TaskCallLayer::cancels_sent) waits for them) — so the
//! timer layers above this one bound the whole task, retries included, as
//! they bound any call. The call failing does the same when the task may
//! still run: its retries ran out, an error that is not transient, an
//! invalid answer, input asked of a client without a handler. Nothing is
//! sent when the task ended (`completed`, `failed`, `cancelled`) or the
//! server said it does not know it. A drop while a `tasks/get` is in
//! flight drops that request too (the transport cancels it) and sends the
//! `tasks/cancel`: the task may have ended in the meantime, and the
//! server then acknowledges or refuses a cancel of an ended task, which
//! changes nothing.
//!
//! A request carrying [`KeepTaskHandle`] in its extensions gets the
//! `CreateTaskResult` itself (unchecked), for a caller that follows the
//! task on its own — with [`TaskClient`] over the same client: the task is
//! then the caller's, and dropping anything cancels nothing.
//!
//! A call dropped before its `CreateTaskResult` arrived has no task id to
//! cancel here. Over stdio, `StdioClient` sends `tasks/cancel` when that
//! late answer comes; over Streamable HTTP the drop closes the response
//! stream, and the server's [`TasksLayer`](super::TasksLayer) drops the
//! work of a task it has not announced yet — one announced in the very
//! instant the stream closed runs to its TTL.
//!
//! # Task notifications
//!
//! `notifications/tasks` reach no client service: a client transport's
//! service answers one request with one value, the Streamable HTTP
//! client leaves a response stream's other notifications out (logged at
//! debug level), and the stdio client hands them to its connection-wide
//! [`on_notification`] callback, not to a request. So neither the layer
//! nor [`TaskClient`] listens; they poll.
//!
#![cfg_attr(
    feature = "stdio",
    doc = "[`on_notification`]: crate::transport::stdio::StdioClientBuilder::on_notification"
)]
#![cfg_attr(not(feature = "stdio"), doc = "[`on_notification`]: crate::transport")]

mod answer;
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
/// capabilities (see [Declaring the extension](self#declaring-the-extension)),
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
