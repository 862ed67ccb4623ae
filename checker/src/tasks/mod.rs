//! The task checks (the `io.modelcontextprotocol/tasks` extension,
//! tasks.md): `tasks/*` refused to a request that did not declare the
//! extension, an unknown task, durable creation, `tasks/cancel`'s ack and
//! what follows it (a terminal status, within a bound, that never changes;
//! the work's CPU time), a cancel of a terminal task, the routing header
//! over Streamable HTTP, and the TTL. The same checks over stdio and HTTP:
//! a transport is a [`Peer`].
//!
//! * `watch`: polling a task, and the checks that read its statuses.

mod watch;

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use tower::BoxError;
use tower_mcp_cancel::jsonrpc::ErrorObject;

use crate::evidence;
use crate::mcp::{self, declare_tasks};
use crate::report::{rules, short, task_rules, Check, Evidence, Rule};
use crate::tool::ToolSpec;
use crate::Config;

use watch::Task;

/// A task id no server made.
const UNKNOWN_TASK: &str = "mcc-no-such-task";

/// The longest TTL the TTL check waits out.
pub(crate) const TTL_WAIT_MAX: Duration = Duration::from_secs(10);

/// What a request got.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A result.
    Result(Value),
    /// A JSON-RPC error.
    Error(ErrorObject),
    /// No answer (why).
    Failed(String),
}

impl Answer {
    /// From a client's answer within `bound` (`None`: it timed out).
    pub(crate) fn of(answer: Option<Result<Value, BoxError>>, bound: Duration) -> Self {
        match answer {
            None => Answer::Failed(format!("no answer within {bound:?}")),
            Some(Ok(v)) => Answer::Result(v),
            Some(Err(e)) => match e.downcast::<ErrorObject>() {
                Ok(o) => Answer::Error(*o),
                Err(e) => Answer::Failed(e.to_string()),
            },
        }
    }

    /// How the report shows it.
    fn show(&self) -> String {
        match self {
            Answer::Result(v) => format!("the result {}", short(v)),
            Answer::Error(e) => format!("the error {} ({})", e.code, e.message),
            Answer::Failed(why) => why.clone(),
        }
    }
}

/// A server the task checks talk to.
pub(crate) trait Peer {
    /// Sends request `method` with `params` (its era's `_meta` added; the
    /// extension declared when the caller did, see [`declare_tasks`]).
    fn send(&self, method: &str, params: Value, bound: Duration) -> impl Future<Output = Answer>;
    /// The server's process, when it is on this machine.
    fn pid(&self) -> Option<u32>;
    /// Over Streamable HTTP: the `Mcp-Name` check of `tasks/get` for task
    /// `task` (`Err`: why it cannot run); `None` on other transports.
    fn name_header(
        &self,
        cfg: &Config,
        task: Result<&str, &str>,
    ) -> impl Future<Output = Option<Check>>;
}

/// The checks, for the report when they cannot run.
const CHECKS: &[(&str, Rule)] = &[
    ("tasks.get-unknown", task_rules::UNKNOWN),
    ("tasks.undeclared", task_rules::UNDECLARED),
    ("tasks.created", task_rules::CREATED),
    ("tasks.cancel-ack", task_rules::CANCEL_ACK),
    ("tasks.cancel-stops", task_rules::CANCEL_STOPS),
    ("tasks.terminal-stays", task_rules::TERMINAL),
    ("tasks.cancel-terminal", task_rules::CANCEL_ACK),
    ("tasks.cancel-work-stops-cpu", rules::WORK_STOPS),
    ("tasks.ttl", task_rules::TTL),
];

/// Each task check skipped for `why` (the HTTP one too, over HTTP).
pub(crate) async fn skip_all(peer: &impl Peer, cfg: &Config, why: &str, out: &mut Vec<Check>) {
    for (id, rule) in CHECKS {
        out.push(Check::skip(id, *rule, why));
    }
    out.extend(peer.name_header(cfg, Err(why)).await);
}

/// Runs the task checks; `capabilities` are the server's, from
/// `server/discover`.
pub(crate) async fn run(
    peer: &impl Peer,
    cfg: &Config,
    capabilities: &Value,
    out: &mut Vec<Check>,
) {
    if !mcp::advertises_tasks(capabilities) {
        let why = format!(
            "the server does not advertise {} in server/discover",
            mcp::TASKS
        );
        return skip_all(peer, cfg, &why, out).await;
    }
    cfg.say("tasks/get of an unknown task");
    out.push(get_unknown(peer, cfg).await);
    let Some(tool) = &cfg.task else {
        out.push(undeclared(peer, cfg, None).await);
        let why = "no --task operation named";
        for (id, rule) in &CHECKS[2..] {
            out.push(Check::skip(id, *rule, why));
        }
        out.extend(peer.name_header(cfg, Err(why)).await);
        return;
    };
    cfg.say(&format!("{tool} as a task, then tasks/cancel"));
    let created = created(peer, cfg, tool).await;
    let task = match created {
        Ok(task) => task,
        Err(check) => {
            let why = format!("no task was created: {}", check.detail);
            out.push(undeclared(peer, cfg, None).await);
            out.push(check);
            for (id, rule) in &CHECKS[3..] {
                out.push(Check::skip(id, *rule, why.clone()));
            }
            out.extend(peer.name_header(cfg, Err(&why)).await);
            return;
        }
    };
    // In the order of CHECKS, though the live task comes first.
    out.push(undeclared(peer, cfg, Some(&task.id)).await);
    out.push(Check::pass(
        "tasks.created",
        task_rules::CREATED,
        Evidence::Strong,
        format!(
            "resultType \"task\" with taskId, status, createdAt, lastUpdatedAt, ttlMs ({}); tasks/get right after finds it {}",
            task.ttl_text(),
            task.status.name()
        ),
    ));
    out.extend(peer.name_header(cfg, Ok(&task.id)).await);
    watch::cancel_and_watch(peer, cfg, &task, out).await;
    cpu(peer, cfg, tool, out).await;
    cfg.say(&format!("{tool} as a task, left to its TTL"));
    out.push(watch::ttl(peer, cfg, tool).await);
}

/// `tasks/get` of `task`, declaring the extension.
async fn get(peer: &impl Peer, cfg: &Config, task: &str) -> Answer {
    let params = declare_tasks(json!({"taskId": task}));
    peer.send("tasks/get", params, cfg.check_timeout).await
}

/// `tasks/cancel` of `task`, declaring the extension.
async fn cancel(peer: &impl Peer, cfg: &Config, task: &str) -> Answer {
    let params = declare_tasks(json!({"taskId": task}));
    peer.send("tasks/cancel", params, cfg.check_timeout).await
}

/// Why a call made no task.
#[derive(Debug)]
enum NoTask {
    /// It was no task (the server decides): the checks cannot run.
    NotATask(String),
    /// A `CreateTaskResult` without what it must carry.
    Malformed(String),
}

impl std::fmt::Display for NoTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoTask::NotATask(why) | NoTask::Malformed(why) => f.write_str(why),
        }
    }
}

/// Calls `tool` declaring the extension: the task it created, or why not.
async fn create(peer: &impl Peer, cfg: &Config, tool: &ToolSpec) -> Result<Task, NoTask> {
    let call = peer
        .send(
            "tools/call",
            declare_tasks(tool.params()),
            cfg.check_timeout,
        )
        .await;
    let v = match call {
        Answer::Result(v) => v,
        other => {
            return Err(NoTask::NotATask(format!(
                "{tool} answered {}",
                other.show()
            )))
        }
    };
    if v["resultType"] != "task" {
        return Err(NoTask::NotATask(format!(
            "{tool} answered a {} result, not a task (the server decides: name a longer --task)",
            v["resultType"]
        )));
    }
    Task::parse(&v)
        .map_err(|e| NoTask::Malformed(format!("CreateTaskResult: {e} in {}", short(&v))))
}

/// The empty acknowledgement of `tasks/cancel`: `None` when it is one, else
/// what is wrong with it.
fn not_an_ack(answer: &Answer) -> Option<String> {
    match answer {
        Answer::Result(v)
            if v["resultType"] == "complete"
                && v.as_object()
                    .is_some_and(|o| o.keys().all(|k| k == "resultType" || k == "_meta")) =>
        {
            None
        }
        Answer::Result(v) => Some(format!(
            "not the empty acknowledgement {{\"resultType\":\"complete\"}}: {}",
            short(v)
        )),
        other => Some(other.show()),
    }
}

/// Check 2: `tasks/get` of an unknown id gets -32602.
async fn get_unknown(peer: &impl Peer, cfg: &Config) -> Check {
    let (id, rule) = ("tasks.get-unknown", task_rules::UNKNOWN);
    match get(peer, cfg, UNKNOWN_TASK).await {
        Answer::Error(e) if e.code == ErrorObject::INVALID_PARAMS => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!("-32602 ({})", e.message),
        ),
        other => Check::fail(
            id,
            rule,
            format!("tasks/get of an unknown task: {}", other.show()),
        ),
    }
}

/// Check 1: `tasks/*` without the extension get -32021, for an unknown
/// task and for `known` (a task of the checker's).
async fn undeclared(peer: &impl Peer, cfg: &Config, known: Option<&str>) -> Check {
    let (id, rule) = ("tasks.undeclared", task_rules::UNDECLARED);
    cfg.say("tasks/* without the extension declared");
    let mut asked = vec![
        ("tasks/get", UNKNOWN_TASK),
        ("tasks/update", UNKNOWN_TASK),
        ("tasks/cancel", UNKNOWN_TASK),
    ];
    if let Some(task) = known {
        asked.push(("tasks/get", task));
    }
    let mut wrong = Vec::new();
    for (method, task) in &asked {
        let mut params = json!({"taskId": task});
        if *method == "tasks/update" {
            params["inputResponses"] = json!({});
        }
        match peer.send(method, params, cfg.check_timeout).await {
            Answer::Error(e) if e.code == ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY => {}
            other => {
                let which = if *task == UNKNOWN_TASK {
                    "an unknown task"
                } else {
                    "its task"
                };
                wrong.push(format!("{method} of {which}: {}", other.show()));
            }
        }
    }
    if wrong.is_empty() {
        Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!(
                "-32021 for tasks/get, tasks/update, tasks/cancel of an unknown task{}",
                if known.is_some() {
                    " and tasks/get of a live one"
                } else {
                    ""
                }
            ),
        )
    } else {
        Check::fail(id, rule, wrong.join("; "))
    }
}

/// Check 3: the task `tool` creates has the fields of a `CreateTaskResult`,
/// and `tasks/get` right after finds it.
async fn created(peer: &impl Peer, cfg: &Config, tool: &ToolSpec) -> Result<Task, Check> {
    let (id, rule) = ("tasks.created", task_rules::CREATED);
    let task = create(peer, cfg, tool).await.map_err(|no| match no {
        NoTask::NotATask(why) => Check::skip(id, rule, why),
        NoTask::Malformed(why) => Check::fail(id, rule, why),
    })?;
    match get(peer, cfg, &task.id).await {
        Answer::Result(v) if v["resultType"] != "complete" => Err(Check::fail(
            id,
            rule,
            format!(
                "tasks/get answered resultType {} (not \"complete\")",
                v["resultType"]
            ),
        )),
        Answer::Result(v) => match Task::parse(&v) {
            Ok(got) if got.id == task.id => Ok(Task {
                status: got.status,
                ..task
            }),
            Ok(got) => Err(Check::fail(
                id,
                rule,
                format!("tasks/get of {} answered task {}", task.id, got.id),
            )),
            Err(e) => Err(Check::fail(id, rule, format!("tasks/get: {e}"))),
        },
        other => Err(Check::fail(
            id,
            rule,
            format!(
                "tasks/get right after the CreateTaskResult: {}",
                other.show()
            ),
        )),
    }
}

/// `tasks.cancel-work-stops-cpu`: a task of `tool`, cancelled after
/// [`evidence::CPU_LEAD`]; the server's CPU time stops growing.
async fn cpu(peer: &impl Peer, cfg: &Config, tool: &ToolSpec, out: &mut Vec<Check>) {
    let id = "tasks.cancel-work-stops-cpu";
    let Some(pid) = peer.pid().filter(|&p| crate::procfs::usage(p).is_some()) else {
        out.push(Check::skip(
            id,
            rules::WORK_STOPS,
            "no /proc for the server process (a stdio child, or --pid, on Linux): the evidence is the task's status only (weak)",
        ));
        return;
    };
    cfg.say(&format!(
        "{tool} as a task, cancelled, watching the server's CPU time"
    ));
    let cancelled = async {
        let task = create(peer, cfg, tool).await.map_err(|e| e.to_string())?;
        tokio::time::sleep(evidence::CPU_LEAD).await;
        match not_an_ack(&cancel(peer, cfg, &task.id).await) {
            None => Ok(()),
            Some(why) => Err(format!("tasks/cancel: {why}")),
        }
    };
    let mut check = evidence::cpu_check(id, cfg, pid, tool, cancelled).await;
    if check.outcome == crate::report::Outcome::Skip {
        check.detail += ": the evidence that the work stopped is the task's status only (weak)";
    }
    out.push(check);
}

/// When a task's status is read again after a change, at the soonest.
fn poll_every(task: &Task) -> Duration {
    task.poll
        .unwrap_or(Duration::from_millis(200))
        .clamp(Duration::from_millis(50), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_empty_result_is_an_ack() {
        let ok = |v: Value| not_an_ack(&Answer::Result(v)).is_none();
        assert!(ok(json!({"resultType": "complete"})));
        assert!(ok(json!({"resultType": "complete", "_meta": {"k": 1}})));
        assert!(!ok(json!({})));
        assert!(!ok(json!({"resultType": "task"})));
        assert!(!ok(
            json!({"resultType": "complete", "status": "cancelled"})
        ));
        let error = ErrorObject::new(ErrorObject::INVALID_PARAMS, "no such task");
        assert!(not_an_ack(&Answer::Error(error)).is_some());
        assert!(not_an_ack(&Answer::Failed("gone".into())).is_some());
    }

    #[test]
    fn json_rpc_errors_are_told_from_failures() {
        let error: BoxError = Box::new(ErrorObject::new(-32021, "declare it"));
        assert!(matches!(
            Answer::of(Some(Err(error)), Duration::ZERO),
            Answer::Error(e) if e.code == -32021
        ));
        let io: BoxError = "broken pipe".into();
        assert!(matches!(
            Answer::of(Some(Err(io)), Duration::ZERO),
            Answer::Failed(_)
        ));
        assert!(matches!(
            Answer::of(None, Duration::ZERO),
            Answer::Failed(_)
        ));
    }
}
