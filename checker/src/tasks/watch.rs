//! A task's statuses, read by polling `tasks/get`: what follows a
//! `tasks/cancel` (a terminal status within a bound, which never changes
//! again, and a second cancel acknowledged the same), and the TTL.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tower_mcp_cancel::jsonrpc::ErrorObject;

use super::{cancel, create, get, not_an_ack, poll_every, Answer, Peer, TTL_WAIT_MAX};
use crate::number;
use crate::report::{task_rules, Check, Evidence};
use crate::tool::ToolSpec;
use crate::Config;

/// A task's status (tasks § Task Status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "working" => Status::Working,
            "input_required" => Status::InputRequired,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            _ => return None,
        })
    }

    /// Its name on the wire.
    pub(super) fn name(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// A task as a `CreateTaskResult` or a `tasks/get` answer shows it.
#[derive(Clone, Debug)]
pub(super) struct Task {
    /// Its id.
    pub(super) id: String,
    /// Its status.
    pub(super) status: Status,
    /// Its `lastUpdatedAt`.
    pub(super) updated: String,
    /// What a terminal task holds: a completed one's `result`, a failed
    /// one's `error` (`Null` for the others).
    pub(super) outcome: Value,
    /// Its `ttlMs` (`None`: null, unlimited).
    pub(super) ttl: Option<Duration>,
    /// Its `pollIntervalMs`.
    pub(super) poll: Option<Duration>,
    /// When the checker read it.
    pub(super) read: Instant,
}

impl Task {
    /// The `Task` fields of `v`, or what is wrong with them.
    pub(super) fn parse(v: &Value) -> Result<Self, String> {
        let string = |k: &str| {
            v[k].as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("{k} is missing or not a string"))
        };
        let id = string("taskId")?;
        let status = Status::parse(&string("status")?)
            .ok_or_else(|| format!("status {} is not a task status", v["status"]))?;
        string("createdAt")?;
        let updated = string("lastUpdatedAt")?;
        let ttl = match v.get("ttlMs") {
            None => return Err("ttlMs is missing (null for unlimited)".into()),
            Some(Value::Null) => None,
            Some(t) => Some(millis("ttlMs", t)?),
        };
        let poll = v
            .get("pollIntervalMs")
            .map(|p| millis("pollIntervalMs", p))
            .transpose()?;
        let outcome = match status {
            Status::Completed => v.get("result").cloned().unwrap_or_default(),
            Status::Failed => v.get("error").cloned().unwrap_or_default(),
            _ => Value::Null,
        };
        Ok(Self {
            id,
            status,
            updated,
            outcome,
            ttl,
            poll,
            read: Instant::now(),
        })
    }

    /// Its TTL, as the report shows it.
    pub(super) fn ttl_text(&self) -> String {
        self.ttl
            .map_or("ttlMs null".into(), |t| format!("ttlMs {}", t.as_millis()))
    }
}

/// Field `key` of a task, integer milliseconds (the schema's `integer`,
/// however it is written), as a duration.
fn millis(key: &str, v: &Value) -> Result<Duration, String> {
    let ms = number::read::<i64>(v).map_err(|e| format!("{key} {e}"))?;
    let ms = u64::try_from(ms).map_err(|_| format!("{key} {ms} is negative"))?;
    Ok(Duration::from_millis(ms))
}

/// What polling a task found.
#[derive(Debug)]
enum Polled {
    /// A terminal status, and when it was read.
    Terminal(Task, Instant),
    /// Not terminal when the bound came.
    NotYet(Task),
    /// `-32602`: the server no longer knows the task.
    Gone,
    /// Another answer.
    Odd(String),
}

/// The task's status read once.
async fn read(peer: &impl Peer, cfg: &Config, task: &str) -> Result<Task, Polled> {
    match get(peer, cfg, task).await {
        Answer::Result(v) => Task::parse(&v).map_err(|e| Polled::Odd(format!("tasks/get: {e}"))),
        Answer::Error(e) if e.code == ErrorObject::INVALID_PARAMS => Err(Polled::Gone),
        other => Err(Polled::Odd(format!("tasks/get: {}", other.show()))),
    }
}

/// Polls `task` until a terminal status, or `until`.
async fn poll_terminal(peer: &impl Peer, cfg: &Config, task: &Task, until: Instant) -> Polled {
    loop {
        let now = match read(peer, cfg, &task.id).await {
            Ok(now) => now,
            Err(p) => return p,
        };
        if now.status.terminal() {
            let at = now.read;
            return Polled::Terminal(now, at);
        }
        if Instant::now() >= until {
            return Polled::NotYet(now);
        }
        tokio::time::sleep(poll_every(task)).await;
    }
}

/// Check 4 and 5: `tasks/cancel` of the live `task` is acknowledged; the
/// task then reaches a terminal status within a bound (`cancelled`
/// expected), which never changes; a second cancel gets the same ack.
pub(super) async fn cancel_and_watch(
    peer: &impl Peer,
    cfg: &Config,
    task: &Task,
    out: &mut Vec<Check>,
) {
    let ack = cancel(peer, cfg, &task.id).await;
    let acked = Instant::now();
    if let Some(why) = not_an_ack(&ack) {
        out.push(Check::fail(
            "tasks.cancel-ack",
            task_rules::CANCEL_ACK,
            format!("tasks/cancel of a {} task: {why}", task.status.name()),
        ));
        let why = "tasks/cancel was not acknowledged";
        out.push(Check::skip(
            "tasks.cancel-stops",
            task_rules::CANCEL_STOPS,
            why,
        ));
        out.push(Check::skip(
            "tasks.terminal-stays",
            task_rules::TERMINAL,
            why,
        ));
        out.push(Check::skip(
            "tasks.cancel-terminal",
            task_rules::CANCEL_ACK,
            why,
        ));
        return;
    }
    out.push(Check::pass(
        "tasks.cancel-ack",
        task_rules::CANCEL_ACK,
        Evidence::Strong,
        format!(
            "{{\"resultType\":\"complete\"}} for a {} task",
            task.status.name()
        ),
    ));
    let bound = cfg.window.max(poll_every(task) * 4).min(cfg.check_timeout);
    let polled = poll_terminal(peer, cfg, task, acked + bound).await;
    let (id, rule) = ("tasks.cancel-stops", task_rules::CANCEL_STOPS);
    let weak = "the evidence is its status; its CPU time is tasks.cancel-work-stops-cpu's";
    out.push(match &polled {
        Polled::Terminal(t, at) => {
            let after = at.saturating_duration_since(acked);
            match t.status {
                Status::Completed if after > cfg.race => Check::fail(
                    id,
                    rule,
                    format!("the task ran on to completed ({after:.1?} after the ack): the work did not stop"),
                ),
                Status::Completed => Check::pass(
                    id,
                    rule,
                    Evidence::Weak,
                    format!("completed within --race of the ack ({after:.1?}): the work had ended; {weak}"),
                ),
                s => Check::pass(
                    id,
                    rule,
                    Evidence::Weak,
                    format!("{} within {after:.1?} of the ack ({weak})", s.name()),
                ),
            }
        }
        Polled::NotYet(t) => Check::fail(
            id,
            rule,
            format!("still {} {bound:.1?} after the ack: the work runs on", t.status.name()),
        ),
        Polled::Gone => Check::skip(
            id,
            rule,
            "the task was gone (-32602) before a terminal status was seen",
        ),
        Polled::Odd(why) => Check::fail(id, rule, format!("after the cancel, {why}")),
    });
    let Polled::Terminal(done, _) = polled else {
        let why = "the task reached no terminal status after the cancel";
        out.push(Check::skip(
            "tasks.terminal-stays",
            task_rules::TERMINAL,
            why,
        ));
        out.push(Check::skip(
            "tasks.cancel-terminal",
            task_rules::CANCEL_ACK,
            why,
        ));
        return;
    };
    out.push(stays(peer, cfg, &done).await);
    let (id, rule) = ("tasks.cancel-terminal", task_rules::CANCEL_ACK);
    out.push(match not_an_ack(&cancel(peer, cfg, &done.id).await) {
        None => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!("the same empty ack for a {} task", done.status.name()),
        ),
        Some(why) => Check::fail(
            id,
            rule,
            format!("tasks/cancel of a {} task: {why}", done.status.name()),
        ),
    });
}

/// A terminal task's status and what it holds (a result, an error) do not
/// change, watched for `--window`: the spec's state diagram has no
/// transition out of a terminal status (a MUST). Its `lastUpdatedAt` is a
/// timestamp the spec says nothing of for a terminal task: one that moves
/// is told in the detail, a note, never a failure.
async fn stays(peer: &impl Peer, cfg: &Config, done: &Task) -> Check {
    let (id, rule) = ("tasks.terminal-stays", task_rules::TERMINAL);
    let until = Instant::now() + cfg.window;
    let mut polls = 0;
    let mut moved: Option<String> = None;
    let note = |moved: &Option<String>| {
        moved.as_ref().map_or(String::new(), |to| {
            format!(
                "; note: its lastUpdatedAt moved from {} to {to} (the spec says nothing of a terminal task's timestamp: no failure)",
                done.updated
            )
        })
    };
    while Instant::now() < until {
        tokio::time::sleep(poll_every(done)).await;
        polls += 1;
        match read(peer, cfg, &done.id).await {
            Ok(now) if now.status != done.status => {
                return Check::fail(
                    id,
                    rule,
                    format!(
                        "{} at {} became {} at {}",
                        done.status.name(),
                        done.updated,
                        now.status.name(),
                        now.updated
                    ),
                )
            }
            Ok(now) if now.outcome != done.outcome => {
                let what = if done.status == Status::Failed {
                    "error"
                } else {
                    "result"
                };
                return Check::fail(
                    id,
                    rule,
                    format!(
                        "a {} task's {what} changed: {} became {}",
                        done.status.name(),
                        crate::report::short(&done.outcome),
                        crate::report::short(&now.outcome)
                    ),
                );
            }
            Ok(now) if now.updated != done.updated => moved = Some(now.updated),
            Ok(_) => {}
            Err(Polled::Gone) => {
                return Check::pass(
                    id,
                    rule,
                    Evidence::Weak,
                    format!(
                        "stayed {} until the server deleted it ({polls} polls){}",
                        done.status.name(),
                        note(&moved)
                    ),
                )
            }
            Err(Polled::Odd(why)) => return Check::fail(id, rule, why),
            Err(_) => {}
        }
    }
    Check::pass(
        id,
        rule,
        Evidence::Strong,
        format!(
            "stayed {} for {:.1?}, {polls} polls{}",
            done.status.name(),
            cfg.window,
            if moved.is_none() {
                format!(" (lastUpdatedAt {})", done.updated)
            } else {
                note(&moved)
            }
        ),
    )
}

/// Check 7: a task of `tool`, left alone, is no longer working after its
/// `createdAt + ttlMs` (a MAY: a server may keep it).
pub(super) async fn ttl(peer: &impl Peer, cfg: &Config, tool: &ToolSpec) -> Check {
    let (id, rule) = ("tasks.ttl", task_rules::TTL);
    let task = match create(peer, cfg, tool).await {
        Ok(t) => t,
        Err(why) => return Check::skip(id, rule, format!("no task was created: {why}")),
    };
    let ttl = match task.ttl {
        Some(ttl) if ttl <= TTL_WAIT_MAX => ttl,
        _ => {
            let _ = cancel(peer, cfg, &task.id).await;
            return Check::skip(
                id,
                rule,
                format!(
                    "{}: longer than the {TTL_WAIT_MAX:?} this check waits (a server with a short TTL is checked)",
                    task.ttl_text()
                ),
            );
        }
    };
    // The CreateTaskResult was read after createdAt: past createdAt + ttlMs
    // by the time the server's timer (or its next poll) has run.
    let slack = (poll_every(&task) * 2).max(Duration::from_secs(1));
    tokio::time::sleep_until(task.read + ttl + slack).await;
    let past = format!(
        "{:.1?} after it was created, past its {}",
        task.read.elapsed(),
        task.ttl_text()
    );
    match read(peer, cfg, &task.id).await {
        Ok(t) if t.status.terminal() && t.status != Status::Completed => Check::pass(
            id,
            rule,
            if t.status == Status::Failed {
                Evidence::Strong
            } else {
                Evidence::Weak
            },
            format!("{} {past}", t.status.name()),
        ),
        Ok(t) if t.status == Status::Completed => Check::skip(
            id,
            rule,
            format!("the task completed before its TTL ({past}): name a longer --task"),
        ),
        Ok(t) => {
            let _ = cancel(peer, cfg, &task.id).await;
            Check::fail(
                id,
                rule,
                format!(
                    "still {} {past}: the server keeps tasks past their TTL (allowed: servers MAY mark a task failed after it)",
                    t.status.name()
                ),
            )
        }
        Err(Polled::Gone) => Check::pass(
            id,
            rule,
            Evidence::Weak,
            format!("gone (-32602) {past}: deleted after its TTL"),
        ),
        Err(Polled::Odd(why)) => Check::fail(id, rule, why),
        Err(_) => Check::skip(id, rule, "no status read"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task() -> Value {
        json!({"taskId": "t1", "status": "working", "createdAt": "2026-12-06T10:00:00Z",
            "lastUpdatedAt": "2026-12-06T10:00:00Z", "ttlMs": 2000, "pollIntervalMs": 100})
    }

    #[test]
    fn a_task_and_its_fields() {
        let t = Task::parse(&task()).unwrap();
        assert_eq!((t.id.as_str(), t.status), ("t1", Status::Working));
        assert_eq!(t.ttl, Some(Duration::from_secs(2)));
        assert_eq!(t.poll, Some(Duration::from_millis(100)));
        let mut v = task();
        v["ttlMs"] = Value::Null;
        assert_eq!(Task::parse(&v).unwrap().ttl_text(), "ttlMs null");
    }

    #[test]
    fn integral_ms_are_integers_however_written() {
        for (ttl, poll) in [("2000.0", "100.0"), ("2e3", "1e2"), ("2000", "100")] {
            let mut v = task();
            v["ttlMs"] = serde_json::from_str(ttl).unwrap();
            v["pollIntervalMs"] = serde_json::from_str(poll).unwrap();
            let t = Task::parse(&v).unwrap_or_else(|e| panic!("{ttl}, {poll}: {e}"));
            assert_eq!(t.ttl, Some(Duration::from_secs(2)), "{ttl}");
            assert_eq!(t.poll, Some(Duration::from_millis(100)), "{poll}");
            assert_eq!(t.ttl_text(), "ttlMs 2000");
        }
    }

    #[test]
    fn what_a_task_must_carry() {
        for (key, value, says) in [
            ("taskId", Value::Null, "taskId"),
            ("status", json!("running"), "not a task status"),
            ("createdAt", Value::Null, "createdAt"),
            ("lastUpdatedAt", json!(5), "lastUpdatedAt"),
            ("ttlMs", json!(60000.5), "ttlMs 60000.5 is not an integer"),
            ("ttlMs", json!("60000"), "ttlMs \"60000\" is not an integer"),
            ("ttlMs", json!(-1), "ttlMs -1 is negative"),
            (
                "pollIntervalMs",
                json!(100.5),
                "pollIntervalMs 100.5 is not an integer",
            ),
            (
                "pollIntervalMs",
                json!("100"),
                "pollIntervalMs \"100\" is not an integer",
            ),
            (
                "pollIntervalMs",
                json!(-100),
                "pollIntervalMs -100 is negative",
            ),
        ] {
            let mut v = task();
            v[key] = value;
            let e = Task::parse(&v).unwrap_err();
            assert!(e.contains(says), "{key}: {e}");
        }
        let mut v = task();
        v.as_object_mut().unwrap().remove("ttlMs");
        assert!(Task::parse(&v).unwrap_err().contains("ttlMs is missing"));
    }

    #[test]
    fn terminal_statuses() {
        let terminal: Vec<&str> = [
            "working",
            "input_required",
            "completed",
            "failed",
            "cancelled",
        ]
        .into_iter()
        .filter(|s| Status::parse(s).unwrap().terminal())
        .collect();
        assert_eq!(terminal, ["completed", "failed", "cancelled"]);
        assert_eq!(
            Status::parse("input_required").unwrap().name(),
            "input_required"
        );
    }
}
