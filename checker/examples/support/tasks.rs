//! The fixture server's tasks (`--tasks`): a table of `job` tasks whose
//! status follows from the clock (working until their time is up, then
//! `completed`; `failed` at their TTL; `cancelled` at a `tasks/cancel`),
//! so no work runs anywhere. The breaks: `RunsOn` (`--break
//! task-runs-on`) acknowledges a `tasks/cancel` and ignores it;
//! `TerminalChanges` (`--break terminal-changes`) shows the task
//! `cancelled`, then `completed` when its work would have ended;
//! `FractionalTtl` (`--break fractional-ttl`) writes `ttlMs` with half a
//! millisecond more, no integer. `TerminalTouch` (`--break terminal-touch`,
//! no break of the spec's) keeps a cancelled task `cancelled` but moves its
//! `lastUpdatedAt` when its work would have ended; `ResultChanges`
//! (`--break result-changes`) shows a cancelled task `completed` at once,
//! and changes its result when its work would have ended.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// The extension's identifier.
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// One task: when it was made, how long its work takes, its cancel.
struct Task {
    created: (Instant, SystemTime),
    length: Duration,
    cancelled: Option<(Instant, SystemTime)>,
}

/// The rule the table breaks, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskBreak {
    None,
    RunsOn,
    TerminalChanges,
    TerminalTouch,
    ResultChanges,
    FractionalTtl,
}

/// How the server writes the numbers the schema types.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Numbers {
    /// Integers as floats (`2000.0`), as Python's `json` writes a float.
    pub(crate) floats: bool,
}

impl Numbers {
    /// The integer `n` as this server writes it.
    pub(crate) fn int(self, n: u64) -> Value {
        if self.floats {
            json!(n as f64)
        } else {
            json!(n)
        }
    }
}

/// The tasks, by id.
pub(crate) struct Table {
    tasks: HashMap<String, Task>,
    ttl: Duration,
    broken: TaskBreak,
    numbers: Numbers,
    next: u64,
}

impl Table {
    pub(crate) fn new(ttl: Duration, broken: TaskBreak, numbers: Numbers) -> Self {
        Self {
            tasks: HashMap::new(),
            ttl,
            broken,
            numbers,
            next: 1,
        }
    }

    /// Answers a `tasks/*` request or a `tools/call` of `job`.
    pub(crate) fn handle(&mut self, method: &str, params: &Value) -> Result<Value, (i64, String)> {
        let declared = params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            .get(EXTENSION)
            .is_some();
        if !declared {
            return Err((
                -32021,
                format!("Missing required client capability: {EXTENSION}"),
            ));
        }
        if method == "tools/call" {
            let seconds = params["arguments"]["seconds"]
                .as_f64()
                .unwrap_or(1.0)
                .clamp(0.0, 600.0);
            let id = format!("fixture-task-{}", self.next);
            self.next += 1;
            let task = Task {
                created: (Instant::now(), SystemTime::now()),
                length: Duration::from_secs_f64(seconds),
                cancelled: None,
            };
            let mut v = self.show(&id, &task);
            v["resultType"] = "task".into();
            self.tasks.insert(id, task);
            return Ok(v);
        }
        let id = params["taskId"].as_str().unwrap_or_default();
        let not_found = || (-32602, "Failed to retrieve task: Task not found".to_owned());
        let task = self.tasks.get_mut(id).ok_or_else(not_found)?;
        match method {
            "tasks/get" => {
                let mut v = self.show(id, &self.tasks[id]);
                v["resultType"] = "complete".into();
                Ok(v)
            }
            "tasks/cancel" => {
                if self.broken != TaskBreak::RunsOn && task.cancelled.is_none() {
                    task.cancelled = Some((Instant::now(), SystemTime::now()));
                }
                Ok(json!({"resultType": "complete"}))
            }
            _ => Err((-32601, "Method not found".into())),
        }
    }

    /// The task as `tasks/get` shows it now. A status ends at whichever
    /// came first: its cancel, its TTL, the end of its work.
    fn show(&self, id: &str, task: &Task) -> Value {
        let (t0, wall0) = task.created;
        let mut ends = vec![(t0 + task.length, "completed")];
        ends.push((t0 + self.ttl, "failed"));
        if let Some((at, _)) = task.cancelled {
            ends.push((at, "cancelled"));
        }
        ends.sort_by_key(|(at, _)| *at);
        let now = Instant::now();
        let (status, updated) = match ends.first() {
            // The break: a cancelled task's status moves on.
            Some((_, "cancelled"))
                if self.broken == TaskBreak::TerminalChanges && t0 + task.length <= now =>
            {
                ("completed", wall0 + task.length)
            }
            // No break: the status stays, its timestamp moves.
            Some((at, "cancelled"))
                if self.broken == TaskBreak::TerminalTouch && t0 + task.length <= now =>
            {
                ("cancelled", wall0 + task.length.max(*at - t0))
            }
            Some((at, "cancelled")) if self.broken == TaskBreak::ResultChanges && *at <= now => {
                ("completed", wall0 + (*at - t0))
            }
            Some((at, status)) if *at <= now => (*status, wall0 + (*at - t0)),
            _ => ("working", wall0),
        };
        let mut v = json!({
            "taskId": id,
            "status": status,
            "createdAt": iso(wall0),
            "lastUpdatedAt": iso(updated),
            "ttlMs": self.numbers.int(self.ttl.as_millis() as u64),
            "pollIntervalMs": self.numbers.int(100),
        });
        if self.broken == TaskBreak::FractionalTtl {
            v["ttlMs"] = json!(self.ttl.as_millis() as f64 + 0.5);
        }
        // The break: the result of a task completed at its cancel changes
        // when its work would have ended.
        let text = if self.broken == TaskBreak::ResultChanges && t0 + task.length <= now {
            "done again"
        } else {
            "done"
        };
        match status {
            "completed" => {
                v["result"] = json!({"content": [{"type": "text", "text": text}], "isError": false})
            }
            "failed" => v["error"] = json!({"code": -32603, "message": "the task's TTL elapsed"}),
            _ => {}
        }
        v
    }
}

/// `t` as an ISO 8601 UTC timestamp with milliseconds.
fn iso(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}
