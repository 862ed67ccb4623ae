//! What a task is on the wire and in a store: [`TaskStatus`], [`TaskRecord`]
//! and the changes a store applies to one ([`TaskChange`], [`TaskEnd`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::jsonrpc::ErrorObject;

/// The tasks extension's identifier (`io.modelcontextprotocol/tasks`): the
/// key a client declares in its per-request capabilities and a server in
/// its `server/discover` answer.
pub const EXTENSION: &str = crate::protocol::TASKS_EXTENSION;

/// A task's status. `completed`, `failed` and `cancelled` are terminal:
/// once there, a task never changes again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The work is running.
    Working,
    /// The work waits for the client's answers to its `inputRequests`.
    InputRequired,
    /// The work ended with a result (a tool result with `isError: true`
    /// included).
    Completed,
    /// The work ended with a JSON-RPC error, or was stopped by the server
    /// (its TTL elapsed, the server shut down).
    Failed,
    /// The client cancelled the task.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status is final.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The status as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One task as a [`TaskStore`](super::TaskStore) keeps it: what `tasks/get`
/// answers, and who may ask.
///
/// Made by the tasks layer; a store keeps it as it is (it is
/// `Serialize` / `Deserialize` for stores that keep bytes) and applies
/// [`TaskChange`]s and one [`TaskEnd`] to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskRecord {
    /// The task id: 128 bits from the operating system's random source.
    pub id: String,
    /// The current status.
    pub status: TaskStatus,
    /// The handler's latest status message (its progress messages), or why
    /// the task ended.
    pub status_message: Option<String>,
    /// When the task was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When the task last changed, in milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// The time to live from creation, in milliseconds (`None`: unlimited).
    pub ttl_ms: Option<u64>,
    /// The polling interval suggested to the client, in milliseconds.
    pub poll_interval_ms: Option<u64>,
    /// The outstanding input requests, by key.
    pub input_requests: Map<String, Value>,
    /// The result, once `completed`.
    pub result: Option<Value>,
    /// The JSON-RPC error, once `failed`.
    pub error: Option<ErrorObject>,
    /// Whom the task belongs to (see
    /// [`TasksLayer::bind`](super::TasksLayer::bind)): a request that binds
    /// to another principal sees no such task.
    pub principal: Option<String>,
    /// The replica whose [`TasksLayer`](super::TasksLayer) runs the task's
    /// work (its random owner id): where a `tasks/cancel` or `tasks/update`
    /// served by another replica is signalled, and whose lease says whether
    /// the work still runs (see [`TaskStore`](super::TaskStore)). Absent in
    /// records written before owners existed.
    #[serde(default)]
    pub owner: Option<String>,
}

impl TaskRecord {
    pub(crate) fn new(
        id: String,
        ttl: Option<Duration>,
        poll_interval: Duration,
        principal: Option<String>,
    ) -> Self {
        let now = now_ms();
        Self {
            id,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms: ttl.map(millis),
            poll_interval_ms: Some(millis(poll_interval)),
            input_requests: Map::new(),
            result: None,
            error: None,
            principal,
            owner: None,
        }
    }

    /// Applies a change to a task that is not terminal; a terminal one is
    /// left as it is (returns `false`).
    pub fn apply(&mut self, change: &TaskChange) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        match change {
            TaskChange::Message(m) => self.status_message = Some(m.clone()),
            TaskChange::Ttl(ttl) => self.ttl_ms = *ttl,
            TaskChange::AddInput { key, request } => {
                self.input_requests.insert(key.clone(), request.clone());
            }
            TaskChange::AnswerInputs(keys) => {
                for k in keys {
                    self.input_requests.remove(k);
                }
            }
        }
        self.status = if self.input_requests.is_empty() {
            TaskStatus::Working
        } else {
            TaskStatus::InputRequired
        };
        self.updated_at_ms = now_ms();
        true
    }

    /// Ends the task, unless it has ended already (returns `false`: the first
    /// end wins).
    pub fn end(&mut self, end: &TaskEnd) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.input_requests.clear();
        match end {
            TaskEnd::Completed(result) => {
                self.status = TaskStatus::Completed;
                self.result = Some(result.clone());
            }
            TaskEnd::Failed(error) => {
                self.status = TaskStatus::Failed;
                self.status_message = Some(error.message.clone());
                self.error = Some(error.clone());
            }
            TaskEnd::Cancelled(message) => {
                self.status = TaskStatus::Cancelled;
                if let Some(m) = message {
                    self.status_message = Some(m.clone());
                }
            }
        }
        self.updated_at_ms = now_ms();
        true
    }

    /// The task as `tasks/get`, `notifications/tasks` and `CreateTaskResult`
    /// carry it (a `DetailedTask`), with `resultType` when given.
    pub fn to_json(&self, result_type: Option<&str>) -> Value {
        let mut m = Map::new();
        if let Some(rt) = result_type {
            m.insert("resultType".into(), rt.into());
        }
        m.insert("taskId".into(), self.id.clone().into());
        m.insert("status".into(), self.status.as_str().into());
        if let Some(msg) = &self.status_message {
            m.insert("statusMessage".into(), msg.clone().into());
        }
        m.insert("createdAt".into(), iso8601(self.created_at_ms).into());
        m.insert("lastUpdatedAt".into(), iso8601(self.updated_at_ms).into());
        m.insert("ttlMs".into(), self.ttl_ms.map_or(Value::Null, Value::from));
        if let Some(p) = self.poll_interval_ms {
            m.insert("pollIntervalMs".into(), p.into());
        }
        match self.status {
            TaskStatus::InputRequired => {
                m.insert(
                    "inputRequests".into(),
                    Value::Object(self.input_requests.clone()),
                );
            }
            TaskStatus::Completed => {
                m.insert("result".into(), self.result.clone().unwrap_or_default());
            }
            TaskStatus::Failed => {
                let error = self
                    .error
                    .as_ref()
                    .and_then(|e| serde_json::to_value(e).ok())
                    .unwrap_or_default();
                m.insert("error".into(), error);
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        Value::Object(m)
    }
}

/// A change to a task that has not ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TaskChange {
    /// A new status message.
    Message(String),
    /// A new time to live from creation, in milliseconds.
    Ttl(Option<u64>),
    /// A new outstanding input request (the task is `input_required`).
    AddInput {
        /// Its key, unique over the task's life.
        key: String,
        /// The request (`{"method", "params"}`).
        request: Value,
    },
    /// These input requests were answered: they are no longer outstanding
    /// (the task is `working` again once none is).
    AnswerInputs(Vec<String>),
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TaskEnd {
    /// With a result.
    Completed(Value),
    /// With a JSON-RPC error.
    Failed(ErrorObject),
    /// Cancelled by the client, with a status message.
    Cancelled(Option<String>),
}

/// A task id: 128 bits from the operating system's random source, as 32
/// lowercase hex digits.
pub(crate) fn mint_id() -> Result<String, getrandom::Error> {
    crate::random::hex_id::<16>()
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// `ms` since the Unix epoch as an ISO 8601 / RFC 3339 UTC timestamp
/// (a time past what the formatter can show is shown as its last second).
fn iso8601(ms: u64) -> String {
    let t = UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> TaskRecord {
        TaskRecord::new(
            "t1".into(),
            Some(Duration::from_secs(60)),
            Duration::from_millis(500),
            None,
        )
    }

    #[test]
    fn the_first_end_wins_and_a_terminal_task_takes_no_change() {
        let mut r = record();
        assert!(r.end(&TaskEnd::Cancelled(Some("by the client".into()))));
        assert!(!r.end(&TaskEnd::Completed(serde_json::json!({"content": []}))));
        assert!(!r.apply(&TaskChange::Message("late".into())));
        assert_eq!(r.status, TaskStatus::Cancelled);
        assert_eq!(r.result, None);
        assert_eq!(r.status_message.as_deref(), Some("by the client"));
    }

    #[test]
    fn inputs_make_the_task_input_required_until_every_one_is_answered() {
        let mut r = record();
        for key in ["a", "b"] {
            r.apply(&TaskChange::AddInput {
                key: key.into(),
                request: serde_json::json!({"method": "elicitation/create"}),
            });
        }
        assert_eq!(r.status, TaskStatus::InputRequired);
        assert_eq!(
            r.to_json(None)["inputRequests"].as_object().unwrap().len(),
            2
        );
        r.apply(&TaskChange::AnswerInputs(vec![
            "a".into(),
            "never-issued".into(),
        ]));
        assert_eq!(r.status, TaskStatus::InputRequired);
        assert!(r.to_json(None)["inputRequests"].get("a").is_none());
        r.apply(&TaskChange::AnswerInputs(vec!["b".into()]));
        assert_eq!(r.status, TaskStatus::Working);
        assert!(r.to_json(None).get("inputRequests").is_none());
    }

    #[test]
    fn a_record_without_an_owner_reads_as_one_without() {
        let mut r = record();
        r.owner = Some("replica-a".into());
        let mut v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["owner"], "replica-a");
        v.as_object_mut().unwrap().remove("owner");
        let back: TaskRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back.owner, None);
    }

    #[test]
    fn the_wire_shape_follows_the_status() {
        let mut r = record();
        let created = r.to_json(Some("task"));
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["status"], "working");
        assert_eq!(created["ttlMs"], 60_000);
        assert_eq!(created["pollIntervalMs"], 500);
        assert!(created["createdAt"].as_str().unwrap().ends_with('Z'));
        r.end(&TaskEnd::Failed(ErrorObject::new(-32603, "boom")));
        let failed = r.to_json(Some("complete"));
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], -32603);
        assert_eq!(failed["statusMessage"], "boom");
        assert!(failed.get("result").is_none());
    }
}
