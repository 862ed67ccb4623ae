//! A small stdio MCP server for the checker's own tests, that breaks exactly
//! one cancellation rule when asked to (`--break RULE`), so the tests can
//! show the checker fails it on that rule and passes it on the rest.
//!
//! ```text
//! fixture_server [--legacy] [--no-tools] [--floats] [--tasks [--task-ttl-ms N]] [--listen-cancel] [--break answer-after-cancel | error-on-cancel | progress-after-cancel | cpu-after-cancel | task-runs-on | ignore-cancels | die-under-load | die-on-cancels | terminal-changes | terminal-touch | result-changes | fractional-ttl | listen-error | listen-twice]
//! ```
//!
//! Tools: `slow {seconds, interval_ms}` sleeps in steps, with progress when
//! asked; `spin {seconds}` burns one core. Without `--break`, a cancel stops
//! either one at once and nothing more is sent for it. The breaks:
//!
//! * `answer-after-cancel`: `slow` stops its progress at the cancel but
//!   still answers when its time is up;
//! * `error-on-cancel`: `slow` answers the cancel with an error response;
//! * `progress-after-cancel`: `slow` sends no answer after the cancel, but
//!   its work (and its progress) runs on;
//! * `cpu-after-cancel`: `spin` sends nothing after the cancel, but keeps
//!   burning the core until its time is up;
//! * `ignore-cancels`: a cancel changes nothing: `slow`'s progress and its
//!   answer still come (what a 2025 SDK that ignores
//!   `notifications/cancelled` does; with `--legacy`, its 2025 session);
//! * `die-under-load`: as `ignore-cancels`, and the server exits once
//!   `LOAD_LIMIT` calls are in flight at once, cancelled or not (a crash
//!   the same calls without their cancels cause too);
//! * `die-on-cancels`: the server exits at its `CANCEL_LIMIT`th cancel (a
//!   crash only the cancels cause).
//!
//! `--tasks` advertises the tasks extension (`io.modelcontextprotocol/tasks`)
//! and adds the tool `job {seconds}`, a task for a request that declares
//! the extension (refused `-32021` otherwise), with a TTL of
//! `--task-ttl-ms` (default 2000; `failed` after it); `tasks/get` and
//! `tasks/cancel` as the extension has them. Its break:
//!
//! * `task-runs-on`: `tasks/cancel` is acknowledged, but the task runs on
//!   to `completed`;
//! * `terminal-changes`: a cancelled task turns `completed` when its time
//!   is up (a terminal status that changes);
//! * `fractional-ttl`: `ttlMs` is half a millisecond past the TTL (the
//!   schema owes an integer);
//! * `terminal-touch`: a cancelled task stays `cancelled`, but its
//!   `lastUpdatedAt` moves when its work would have ended (what FastMCP's
//!   tasks do): no break, the spec says nothing of that timestamp;
//! * `result-changes`: a cancelled task is `completed` at once (its work
//!   had ended), and its result changes when its work would have ended.
//!
//! `subscriptions/listen` (2026-07-28) is acknowledged with the filter it
//! asked for, and held open until the client cancels it or the server gets
//! SIGTERM, which ends each open listen with the completion result
//! (subscriptions § Graceful Closure), then the server; with
//! `--listen-cancel`, with `notifications/cancelled` for its id instead
//! (cancellation's intro), which is no break either. Its breaks:
//!
//! * `listen-error`: at SIGTERM the listen is answered with an error;
//! * `listen-twice`: at SIGTERM the listen gets both the completion result
//!   and a `notifications/cancelled`.
//!
//! `--legacy` makes it a 2025-era server: `server/discover` is unknown, an
//! `initialize` handshake is expected. `--no-tools` declares no tools
//! capability (the tools still answer: the checker must not call them).
//! `--floats` writes its integers and numbers as floats (`2000.0`), as
//! Python's `json` does: `ttlMs`, `pollIntervalMs`, `progress`, `total`;
//! no break (the schema types them by value, not by spelling).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

#[path = "support/tasks.rs"]
mod tasks;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Break {
    None,
    AnswerAfterCancel,
    ErrorOnCancel,
    ProgressAfterCancel,
    CpuAfterCancel,
    IgnoreCancels,
    DieUnderLoad,
    DieOnCancels,
    TaskRunsOn,
    TerminalChanges,
    TerminalTouch,
    ResultChanges,
    FractionalTtl,
    ListenError,
    ListenTwice,
}

/// A call in flight.
struct Job {
    /// Set by the cancel.
    cancelled: Arc<AtomicBool>,
    /// The async work, aborted by an honest cancel.
    abort: tokio::task::AbortHandle,
    /// Whether it is `spin`.
    spin: bool,
}

type Jobs = Arc<Mutex<HashMap<String, Job>>>;

#[derive(Clone)]
struct Out(mpsc::UnboundedSender<String>, tasks::Numbers);

impl Out {
    fn send(&self, v: Value) {
        let _ = self.0.send(v.to_string());
    }
    fn result(&self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    fn error(&self, id: &Value, code: i64, message: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let legacy = args.iter().any(|a| a == "--legacy");
    let mut capabilities = if args.iter().any(|a| a == "--no-tools") {
        json!({})
    } else {
        json!({"tools": {}})
    };
    let with_tasks = args.iter().any(|a| a == "--tasks");
    if with_tasks {
        capabilities["extensions"] = json!({tasks::EXTENSION: {}});
    }
    let ttl = args
        .iter()
        .position(|a| a == "--task-ttl-ms")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis);
    let mode = match args
        .iter()
        .position(|a| a == "--break")
        .map(|i| args.get(i + 1).map(String::as_str))
    {
        None => Break::None,
        Some(Some("answer-after-cancel")) => Break::AnswerAfterCancel,
        Some(Some("error-on-cancel")) => Break::ErrorOnCancel,
        Some(Some("progress-after-cancel")) => Break::ProgressAfterCancel,
        Some(Some("cpu-after-cancel")) => Break::CpuAfterCancel,
        Some(Some("ignore-cancels")) => Break::IgnoreCancels,
        Some(Some("die-under-load")) => Break::DieUnderLoad,
        Some(Some("die-on-cancels")) => Break::DieOnCancels,
        Some(Some("terminal-touch")) => Break::TerminalTouch,
        Some(Some("result-changes")) => Break::ResultChanges,
        Some(Some("task-runs-on")) => Break::TaskRunsOn,
        Some(Some("terminal-changes")) => Break::TerminalChanges,
        Some(Some("fractional-ttl")) => Break::FractionalTtl,
        Some(Some("listen-error")) => Break::ListenError,
        Some(Some("listen-twice")) => Break::ListenTwice,
        Some(other) => {
            eprintln!("fixture_server: unknown --break {other:?}");
            std::process::exit(2);
        }
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            if stdout
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
            let _ = stdout.flush().await;
        }
    });
    let numbers = tasks::Numbers {
        floats: args.iter().any(|a| a == "--floats"),
    };
    let out = Out(tx, numbers);
    let jobs: Jobs = Arc::default();
    let task_break = match mode {
        Break::TaskRunsOn => tasks::TaskBreak::RunsOn,
        Break::TerminalChanges => tasks::TaskBreak::TerminalChanges,
        Break::TerminalTouch => tasks::TaskBreak::TerminalTouch,
        Break::ResultChanges => tasks::TaskBreak::ResultChanges,
        Break::FractionalTtl => tasks::TaskBreak::FractionalTtl,
        _ => tasks::TaskBreak::None,
    };
    let mut table = tasks::Table::new(ttl, task_break, numbers);
    let listen_cancel = args.iter().any(|a| a == "--listen-cancel");
    // The open subscriptions/listen streams, by id.
    let mut listens: Vec<Value> = Vec::new();
    let mut term = Term::new();
    let mut cancels = 0;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => line,
                _ => break,
            },
            _ = term.recv() => {
                for id in listens.drain(..) {
                    end_listen(&id, mode, listen_cancel, &out);
                }
                break;
            }
        };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let method = msg["method"].as_str().unwrap_or_default();
        match (msg.get("id"), method) {
            (None, "notifications/cancelled") => {
                cancels += 1;
                if mode == Break::DieOnCancels && cancels >= CANCEL_LIMIT {
                    std::process::exit(3);
                }
                let id = &msg["params"]["requestId"];
                listens.retain(|l| l != id);
                cancel(id, mode, &jobs, &out);
            }
            (None, _) => {}
            (Some(id), "server/discover") if !legacy => out.result(
                id,
                json!({"supportedVersions": ["2026-07-28"], "capabilities": capabilities, "serverInfo": {"name": "fixture", "version": "0"}}),
            ),
            (Some(id), "initialize") => out.result(
                id,
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "serverInfo": {"name": "fixture", "version": "0"}}),
            ),
            (Some(id), "ping") => out.result(id, json!({})),
            (Some(id), "subscriptions/listen") if !legacy => {
                out.send(json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {SUBSCRIPTION_ID: id}, "notifications": msg["params"]["notifications"]}}));
                listens.push(id.clone());
            }
            (Some(id), m) if with_tasks && (m.starts_with("tasks/") || msg["params"]["name"] == "job") => {
                match table.handle(m, &msg["params"]) {
                    Ok(result) => out.result(id, result),
                    Err((code, message)) => out.error(id, code, &message),
                }
            }
            (Some(id), "tools/call") => call(id.clone(), &msg["params"], mode, &jobs, &out),
            (Some(id), _) => out.error(id, -32601, "Method not found"),
        }
    }
    drop(out);
    let _ = writer.await;
}

/// SIGTERM, where there are signals.
struct Term(#[cfg(unix)] tokio::signal::unix::Signal);

impl Term {
    fn new() -> Self {
        Self(
            #[cfg(unix)]
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler"),
        )
    }

    /// The next SIGTERM (never, without signals).
    async fn recv(&mut self) {
        #[cfg(unix)]
        if self.0.recv().await.is_some() {
            return;
        }
        std::future::pending::<()>().await;
    }
}

/// The `_meta` key naming the listen a message belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Ends the open listen `id` at SIGTERM: the completion result, or (with
/// `--listen-cancel`) a cancel for it; broken, an error, or both.
fn end_listen(id: &Value, mode: Break, cancel: bool, out: &Out) {
    let graceful = json!({"resultType": "complete", "_meta": {SUBSCRIPTION_ID: id}});
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "server shutting down"}});
    match mode {
        Break::ListenError => out.error(id, -32603, "server shutting down"),
        Break::ListenTwice => {
            out.result(id, graceful);
            out.send(cancelled);
        }
        _ if cancel => out.send(cancelled),
        _ => out.result(id, graceful),
    }
}

/// `die-under-load`: how many calls in flight at once it dies at.
const LOAD_LIMIT: usize = 5;

/// `die-on-cancels`: the cancel it dies at (past the few of the checks
/// before the burst, within any burst).
const CANCEL_LIMIT: usize = 12;

fn cancel(id: &Value, mode: Break, jobs: &Jobs, out: &Out) {
    if matches!(mode, Break::IgnoreCancels | Break::DieUnderLoad) {
        return;
    }
    let Some(job) = jobs.lock().unwrap().remove(&id.to_string()) else {
        return;
    };
    job.cancelled.store(true, Ordering::SeqCst);
    let keeps_running = if job.spin {
        mode == Break::CpuAfterCancel
    } else {
        matches!(mode, Break::AnswerAfterCancel | Break::ProgressAfterCancel)
    };
    if !keeps_running {
        job.abort.abort();
    }
    if mode == Break::ErrorOnCancel && !job.spin {
        out.error(id, -32800, "Request cancelled");
    }
}

fn call(id: Value, params: &Value, mode: Break, jobs: &Jobs, out: &Out) {
    let args = &params["arguments"];
    let seconds = args["seconds"].as_f64().unwrap_or(1.0).clamp(0.0, 600.0);
    let token = params["_meta"]["progressToken"].clone();
    let cancelled = Arc::new(AtomicBool::new(false));
    let key = id.to_string();
    // Held while the work is spawned and listed, so that it cannot end (and
    // unlist itself) before it is listed.
    let mut listed = jobs.lock().unwrap();
    if mode == Break::DieUnderLoad && listed.len() + 1 >= LOAD_LIMIT {
        std::process::exit(3);
    }
    let (out2, flag, key2) = (out.clone(), cancelled.clone(), key.clone());
    let numbers = out.1;
    let jobs2 = jobs.clone();
    let spin = params["name"] == "spin";
    let task = match params["name"].as_str() {
        Some("slow") => {
            let interval = Duration::from_secs_f64(
                args["interval_ms"]
                    .as_f64()
                    .unwrap_or(100.0)
                    .clamp(1.0, 60_000.0)
                    / 1000.0,
            );
            let steps = ((seconds / interval.as_secs_f64()).ceil() as u64).max(1);
            tokio::spawn(async move {
                for i in 1..=steps {
                    tokio::time::sleep(interval).await;
                    let quiet = flag.load(Ordering::SeqCst) && mode != Break::ProgressAfterCancel;
                    if !token.is_null() && !quiet {
                        out2.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": numbers.int(i),
                                "total": numbers.int(steps)}}));
                    }
                }
                jobs2.lock().unwrap().remove(&key2);
                if !flag.load(Ordering::SeqCst) || mode == Break::AnswerAfterCancel {
                    out2.result(
                        &id,
                        json!({"content": [{"type": "text", "text": "slept"}], "isError": false}),
                    );
                }
            })
        }
        Some("spin") => tokio::spawn(async move {
            let stop = flag.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let end = Instant::now() + Duration::from_secs_f64(seconds);
                let mut x: u64 = 1;
                while Instant::now() < end
                    && (mode == Break::CpuAfterCancel || !stop.load(Ordering::Relaxed))
                {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
            .await;
            jobs2.lock().unwrap().remove(&key2);
            if !flag.load(Ordering::SeqCst) {
                out2.result(
                    &id,
                    json!({"content": [{"type": "text", "text": "spun"}], "isError": false}),
                );
            }
        }),
        _ => {
            out.error(&id, -32602, "Unknown tool");
            return;
        }
    };
    listed.insert(
        key,
        Job {
            cancelled,
            abort: task.abort_handle(),
            spin,
        },
    );
}
