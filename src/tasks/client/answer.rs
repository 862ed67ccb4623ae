//! What a client accepts from a server: the checks of a `CreateTaskResult`
//! and of a `tasks/get` answer, in one place, and their typed result,
//! [`DetailedTask`].

use std::fmt;

use serde_json::{Map, Value};

use super::super::record::TaskStatus;
use crate::jsonrpc::ErrorObject;
use crate::sanitize;

/// A task as a `tasks/get` answer describes it (the spec's
/// `DetailedTask`), checked: see [`TaskClient::get`](super::TaskClient::get).
///
/// The status-specific fields are there exactly when the status needs
/// them: `result` when [`Completed`](TaskStatus::Completed), `error` when
/// [`Failed`](TaskStatus::Failed), `input_requests` (possibly empty) when
/// [`InputRequired`](TaskStatus::InputRequired); otherwise `None` and
/// empty.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DetailedTask {
    /// The task id (`taskId`).
    pub id: String,
    /// The status.
    pub status: TaskStatus,
    /// The server's message about the current state (`statusMessage`).
    pub status_message: Option<String>,
    /// When the task was created (`createdAt`, ISO 8601 as the server
    /// wrote it).
    pub created_at: String,
    /// When the task last changed (`lastUpdatedAt`, ISO 8601 as the server
    /// wrote it).
    pub last_updated_at: String,
    /// The time to live from creation, in milliseconds (`ttlMs`; `None`:
    /// unlimited).
    pub ttl_ms: Option<u64>,
    /// The polling interval the server suggests, in milliseconds
    /// (`pollIntervalMs`).
    pub poll_interval_ms: Option<u64>,
    /// The outstanding input requests, by key (`inputRequests`).
    pub input_requests: Map<String, Value>,
    /// The task's result (`result`, a JSON object).
    pub result: Option<Value>,
    /// The JSON-RPC error the task failed with (`error`).
    pub error: Option<ErrorObject>,
}

/// A server's answer about a task that does not say what the extension
/// says it must: a `tasks/get` answer about another task, or with a
/// status the spec does not have, without a field its status requires, or
/// with a field of the wrong type; a `CreateTaskResult` likewise, or one
/// answering a request that cannot be a task.
///
/// Not transient: the task client fails the call with it at once (and
/// cancels the task it gives up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidTaskAnswer {
    what: &'static str,
    task_id: Option<String>,
    reason: String,
}

impl InvalidTaskAnswer {
    pub(super) fn new(
        what: &'static str,
        task_id: Option<&str>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            what,
            task_id: task_id.map(sanitize::for_log),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for InvalidTaskAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} from the server", self.what)?;
        if let Some(id) = &self.task_id {
            write!(f, " (task {id})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for InvalidTaskAnswer {}

/// Which answer is checked.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape<'a> {
    /// A `CreateTaskResult` (`Result & Task`): no status-specific fields.
    Created,
    /// The answer to a `tasks/get` for this task id (`DetailedTask`).
    Get(&'a str),
}

impl DetailedTask {
    /// Checks `answer` as `shape` says; the task it describes.
    pub(super) fn check(answer: &Value, shape: Shape<'_>) -> Result<Self, InvalidTaskAnswer> {
        let (what, expected) = match shape {
            Shape::Created => ("CreateTaskResult", None),
            Shape::Get(id) => ("tasks/get answer", Some(id)),
        };
        let bad = |id: Option<&str>, reason: String| InvalidTaskAnswer::new(what, id, reason);
        let Some(obj) = answer.as_object() else {
            return Err(bad(expected, "not a JSON object".into()));
        };
        let id = match obj.get("taskId") {
            Some(Value::String(id)) if !id.is_empty() => id.as_str(),
            Some(Value::String(_)) => return Err(bad(expected, "an empty taskId".into())),
            Some(_) => return Err(bad(expected, "taskId is not a string".into())),
            None => return Err(bad(expected, "no taskId".into())),
        };
        if let Some(expected) = expected {
            if id != expected {
                return Err(bad(
                    Some(expected),
                    format!(
                        "it is about task {}, not the one asked for",
                        sanitize::for_log(id)
                    ),
                ));
            }
        }
        let bad = |reason: String| InvalidTaskAnswer::new(what, Some(id), reason);
        let status = match obj.get("status").and_then(Value::as_str) {
            Some(s) => status_of(s).ok_or_else(|| {
                bad(format!(
                    "status {:?} is none of the spec's",
                    sanitize::for_log(s)
                ))
            })?,
            None => return Err(bad("no status (a string)".into())),
        };
        let string = |key: &str| match obj.get(key) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            None => Ok(None),
            Some(_) => Err(bad(format!("{key} is not a string"))),
        };
        let required = |key: &str| string(key)?.ok_or_else(|| bad(format!("no {key}")));
        let mut task =
            DetailedTask {
                id: id.to_owned(),
                status,
                status_message: string("statusMessage")?,
                created_at: required("createdAt")?,
                last_updated_at: required("lastUpdatedAt")?,
                ttl_ms: match obj.get("ttlMs") {
                    None => return Err(bad("no ttlMs (an integer, or null)".into())),
                    Some(Value::Null) => None,
                    Some(v) => Some(integer(v).ok_or_else(|| {
                        bad(format!("ttlMs {v} is not an integer of milliseconds"))
                    })?),
                },
                poll_interval_ms: match obj.get("pollIntervalMs") {
                    None => None,
                    Some(v) => Some(integer(v).ok_or_else(|| {
                        bad(format!(
                            "pollIntervalMs {v} is not an integer of milliseconds"
                        ))
                    })?),
                },
                input_requests: Map::new(),
                result: None,
                error: None,
            };
        if let Shape::Created = shape {
            // `Result & Task`: whatever the status, the details are read
            // with `tasks/get`.
            return Ok(task);
        }
        match status {
            TaskStatus::Completed => match obj.get("result") {
                Some(r @ Value::Object(_)) => task.result = Some(r.clone()),
                Some(_) => {
                    return Err(bad("a completed task whose result is not an object".into()))
                }
                None => return Err(bad("a completed task without its result".into())),
            },
            TaskStatus::Failed => match obj.get("error") {
                Some(e) => {
                    task.error = Some(error_object(e).ok_or_else(|| {
                        bad("a failed task whose error is not a JSON-RPC error object".into())
                    })?)
                }
                None => return Err(bad("a failed task without its error".into())),
            },
            TaskStatus::InputRequired => match obj.get("inputRequests") {
                Some(Value::Object(r)) => task.input_requests = r.clone(),
                Some(_) => return Err(bad("inputRequests is not an object".into())),
                None => return Err(bad("an input_required task without inputRequests".into())),
            },
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        Ok(task)
    }
}

fn status_of(s: &str) -> Option<TaskStatus> {
    Some(match s {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "failed" => TaskStatus::Failed,
        "cancelled" => TaskStatus::Cancelled,
        _ => return None,
    })
}

/// `v` as an integer, as the schema types one: any JSON number whose value
/// is integral (`500`, `500.0`, `5e2`); one past `i128`'s range saturates.
fn integral(v: &Value) -> Option<i128> {
    if let Some(n) = v.as_i64() {
        return Some(n.into());
    }
    if let Some(n) = v.as_u64() {
        return Some(n.into());
    }
    let f = v.as_f64().filter(|f| f.fract() == 0.0)?;
    // `as` saturates: 1e300 is i128::MAX.
    Some(f as i128)
}

/// A non-negative integer, as the schema's `@format int` milliseconds:
/// one past `u64::MAX` is `u64::MAX`.
fn integer(v: &Value) -> Option<u64> {
    let n = integral(v)?;
    (n >= 0).then(|| u64::try_from(n).unwrap_or(u64::MAX))
}

/// A JSON-RPC error object: an integer `code` (an integral float is one),
/// a string `message`, any `data`.
fn error_object(v: &Value) -> Option<ErrorObject> {
    let obj = v.as_object()?;
    let code = i64::try_from(integral(obj.get("code")?)?).ok()?;
    let message = obj.get("message")?.as_str()?;
    let mut error = ErrorObject::new(code, message);
    error.data = obj.get("data").cloned();
    Some(error)
}
