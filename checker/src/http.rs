//! The Streamable HTTP checks. Calls go through the crate's `HttpClient`
//! (a cancel is dropping the call, which closes its response stream, and in
//! a 2025 session also POSTs `notifications/cancelled`); the moments a
//! stream is closed at, and headers that contradict the body, go raw
//! ([`crate::rawhttp`]). Over HTTP a closed stream hides what the server
//! does next: with `--pid` (a server on this machine) its CPU time shows
//! whether the work stopped; without, the evidence is that the server still
//! answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Uri;
use serde_json::{json, Value};
use tokio::time::Instant;
use tower::ServiceExt;
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::http::{HttpClient, ServerEra};
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest, ProgressObserver};

use crate::mcp::{self, Era};
use crate::procfs;
use crate::rawhttp::{self, Close, Closing, Version};
use crate::report::{rules, Check, Evidence, Report, Rule, RunError};
use crate::tool::ToolSpec;
use crate::Config;

/// One client per HTTP version.
#[derive(Debug)]
struct Target {
    uri: Uri,
    h1: HttpClient,
    /// `None` when the server does not speak h2c (why).
    h2: Result<HttpClient, String>,
    era: Era,
    pid: Option<u32>,
}

impl Target {
    fn client(&self, v: Version) -> Option<&HttpClient> {
        match v {
            Version::H1 => Some(&self.h1),
            Version::H2 => self.h2.as_ref().ok(),
        }
    }
}

fn builder(uri: &Uri) -> tower_mcp_cancel::transport::http::HttpClientBuilder {
    HttpClient::builder(uri.clone()).client_info("mcp-cancel-check", env!("CARGO_PKG_VERSION"))
}

/// Sends `method` with `params` (the client adds the era's `_meta`).
async fn call(client: &HttpClient, req: McpRequest, bound: Duration) -> Result<Value, String> {
    match tokio::time::timeout(bound, client.clone().oneshot(req)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {bound:?}")),
    }
}

/// Whether the server answers a `ping` (with anything) within `bound`.
async fn responsive(client: &HttpClient, bound: Duration) -> Result<(), String> {
    let ping = McpRequest::without_id("ping").with_params(json!({}));
    match tokio::time::timeout(bound, client.clone().oneshot(ping)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.is::<ErrorObject>() => Ok(()),
        Ok(Err(e)) => Err(format!("the server no longer answers: {e}")),
        Err(_) => Err(format!("no answer to a ping within {bound:?}")),
    }
}

/// Runs every HTTP check against `url`.
pub(crate) async fn run(cfg: &Config, uri: Uri, pid: Option<u32>) -> Result<Report, RunError> {
    cfg.say(&format!("probing {uri}"));
    let h1 = match cfg.era {
        Some(Era::Modern) => builder(&uri).stateful_fallback(false).build(),
        _ => builder(&uri).build(),
    };
    let (era, capabilities) = negotiate(cfg, &h1).await?;
    let h2 = if era == Era::Modern {
        let h2 = builder(&uri).http2_prior_knowledge().build();
        let ping = McpRequest::without_id("ping").with_params(json!({}));
        let no = "the server does not speak HTTP/2 with prior knowledge (h2c)";
        match tokio::time::timeout(Duration::from_secs(5), h2.clone().oneshot(ping)).await {
            Ok(Ok(_)) => Ok(h2),
            Ok(Err(e)) if e.is::<ErrorObject>() => Ok(h2),
            Ok(Err(e)) => Err(format!("{no}: {e}")),
            Err(_) => Err(format!("{no}: no answer in 5 s")),
        }
    } else {
        Err("a 2025 session is checked over HTTP/1.1 only".into())
    };
    let t = Target {
        uri,
        h1,
        h2,
        era,
        pid,
    };
    let mut report = Report {
        target: format!("Streamable HTTP {}, {}", t.uri, era.name()),
        checks: Vec::new(),
    };
    let out = &mut report.checks;
    if era == Era::Modern {
        header_mismatch(cfg, &t, out).await;
    }
    let tools = match &cfg.slow {
        None => Err("no --slow operation named".to_owned()),
        Some(slow) => {
            let list = McpRequest::without_id("tools/list").with_params(json!({}));
            match call(&t.h1, list, cfg.check_timeout).await {
                Ok(_) => Ok(slow),
                Err(e) => Err(format!("tools/list failed, so no tools: {e}")),
            }
        }
    };
    match tools {
        Ok(slow) => tool_checks(cfg, &t, slow, out).await,
        Err(why) => {
            for (id, rule) in tool_check_ids(era) {
                out.push(Check::skip(&id, rule, why.clone()));
            }
        }
    }
    let peer = TaskPeer { t: &t };
    if era == Era::Modern {
        crate::tasks::run(&peer, cfg, &capabilities, out).await;
    } else {
        crate::tasks::skip_all(&peer, cfg, crate::stdio::NO_TASKS_2025, out).await;
    }
    out.extend(crate::stdio::listen::skipped(
        crate::stdio::listen::NO_LISTEN_HTTP,
    ));
    let _ = t.h1.close().await;
    report.judge(era);
    Ok(report)
}

/// `server/discover`; the client falls back to a 2025 session by itself.
/// The era, and the capabilities a 2026-07-28 server declared.
async fn negotiate(cfg: &Config, h1: &HttpClient) -> Result<(Era, Value), String> {
    let mut capabilities = Value::Null;
    if cfg.era == Some(Era::Legacy) {
        // The client opens a session for a server that refuses the modern shape.
        let ping = McpRequest::without_id("ping").with_params(json!({}));
        let _ = call(h1, ping, cfg.check_timeout).await;
    } else {
        let probe = McpRequest::without_id("server/discover").with_params(json!({}));
        let probed = tokio::time::timeout(cfg.check_timeout, h1.clone().oneshot(probe)).await;
        match (h1.server_era(), probed) {
            (ServerEra::Stateful { .. }, _) => {}
            (_, Ok(Ok(v))) => capabilities = v["capabilities"].clone(),
            (_, Ok(Err(e)))
                if e.downcast_ref::<ErrorObject>()
                    .is_some_and(|o| !mcp::is_modern_error(o)) => {}
            (_, Ok(Err(e))) => return Err(format!("cannot talk to the server: {e}")),
            (_, Err(_)) => {
                return Err(format!(
                    "no answer to server/discover within {:?}",
                    cfg.check_timeout
                ))
            }
        }
    }
    match h1.server_era() {
        ServerEra::Stateful { .. } => Ok((Era::Legacy, Value::Null)),
        _ if cfg.era == Some(Era::Legacy) => Err("the server did not open a 2025 session".into()),
        _ => Ok((Era::Modern, capabilities)),
    }
}

/// The checks that need a tool, for the report when they cannot run.
fn tool_check_ids(era: Era) -> Vec<(String, Rule)> {
    let mut ids = vec![("progress.increases".to_owned(), rules::PROGRESS_INCREASES)];
    if era == Era::Modern {
        for v in [Version::H1, Version::H2] {
            ids.push((
                format!("http.close-before-first-message.{}", v.tag()),
                rules::STREAM_CLOSE,
            ));
            ids.push((
                format!("http.close-mid-stream.{}", v.tag()),
                rules::STREAM_CLOSE,
            ));
        }
    } else {
        ids.push(("http.session-cancel".to_owned(), rules::SESSION_CANCEL));
    }
    ids.push(("cancel.burst-healthy".to_owned(), rules::RACES));
    ids.push(("cancel.burst-resources".to_owned(), rules::RESOURCES_FREED));
    ids.push(("cancel.work-stops-cpu".to_owned(), rules::WORK_STOPS));
    ids
}

async fn tool_checks(cfg: &Config, t: &Target, slow: &ToolSpec, out: &mut Vec<Check>) {
    let progress_tool = cfg.progress.as_ref().unwrap_or(slow);
    cfg.say(&format!("baseline: {progress_tool}, uncancelled"));
    let (took, first) = baseline(cfg, t, progress_tool, out).await;
    let (took, first) = if progress_tool == slow {
        (took, first)
    } else {
        (None, None)
    };
    let cancel_at = took.map_or(Duration::from_millis(500), |d| {
        (d / 3).max(Duration::from_millis(20))
    });
    if t.era == Era::Modern {
        for v in [Version::H1, Version::H2] {
            stream_close(cfg, t, slow, v, first, out).await;
        }
    } else {
        session_cancel(cfg, t, slow, took, cancel_at, out).await;
    }
    burst(cfg, t, slow, out).await;
    cpu(cfg, t, cfg.cpu.as_ref().unwrap_or(slow), out).await;
}

/// Runs `tool` to its end; its progress values must increase.
/// How long it took, and when its first progress came (both if seen).
async fn baseline(
    cfg: &Config,
    t: &Target,
    tool: &ToolSpec,
    out: &mut Vec<Check>,
) -> (Option<Duration>, Option<Duration>) {
    let seen: Arc<Mutex<Vec<(Instant, f64)>>> = Arc::default();
    let record = seen.clone();
    let req = McpRequest::without_id("tools/call")
        .with_params(tool.params())
        .with_extension(ProgressObserver::new(move |p| {
            let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
            seen.push((Instant::now(), p.progress));
        }));
    let start = Instant::now();
    let answered = call(&t.h1, req, cfg.check_timeout).await;
    let took = start.elapsed();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let first = seen.first().map(|(at, _)| *at - start);
    let values: Vec<f64> = seen.iter().map(|(_, v)| *v).collect();
    let (id, rule) = ("progress.increases", rules::PROGRESS_INCREASES);
    out.push(if values.is_empty() {
        Check::skip(
            id,
            rule,
            format!("{tool} sent no progress (asked with a progressToken)"),
        )
    } else if let Some(w) = values.windows(2).find(|w| w[1] <= w[0]) {
        // The client passes on only increasing values; it still counts them.
        Check::fail(id, rule, format!("{} after {}", w[1], w[0]))
    } else {
        Check::pass(
            id,
            rule,
            Evidence::Weak,
            format!(
                "{} progress values seen increasing (the client shows only those)",
                values.len()
            ),
        )
    });
    (answered.ok().map(|_| took), first)
}

/// Closes a raw call's stream before its first byte and mid-stream.
/// (`first`: when the operation's first progress came in the baseline.)
async fn stream_close(
    cfg: &Config,
    t: &Target,
    slow: &ToolSpec,
    v: Version,
    first: Option<Duration>,
    out: &mut Vec<Check>,
) {
    let Some(client) = t.client(v) else {
        let why = t.h2.as_ref().err().cloned().unwrap_or_default();
        for what in ["before-first-message", "mid-stream"] {
            out.push(Check::skip(
                &format!("http.close-{what}.{}", v.tag()),
                rules::STREAM_CLOSE,
                why.clone(),
            ));
        }
        return;
    };
    // Soon after the request, before the operation's first progress.
    let early = first
        .map_or(Duration::from_millis(50), |f| f / 2)
        .clamp(Duration::from_millis(5), Duration::from_millis(200));
    for (what, close) in [
        ("before-first-message", Close::BeforeFirstMessage(early)),
        ("mid-stream", Close::MidStream(cfg.check_timeout)),
    ] {
        let id = format!("http.close-{what}.{}", v.tag());
        cfg.say(&format!("{slow} over {}, stream closed {what}", v.tag()));
        let req = rawhttp::post(
            &t.uri,
            &format!("mcc-{what}-{}", v.tag()),
            "tools/call",
            slow.params(),
            &[],
        );
        let closed = rawhttp::call_and_close(v, req, close, cfg.check_timeout).await;
        out.push(match closed {
            Closing::Missed(why) => Check::skip(&id, rules::STREAM_CLOSE, format!("could not close {what}: {why}")),
            Closing::Failed(why) => Check::fail(&id, rules::STREAM_CLOSE, why),
            Closing::Done => match responsive(client, cfg.check_timeout).await {
                Err(e) => Check::fail(&id, rules::STREAM_CLOSE, format!("after the close: {e}")),
                Ok(()) => Check::pass(
                    &id,
                    rules::STREAM_CLOSE,
                    Evidence::Weak,
                    "closed; the server still answers (whether its work stopped shows only with --pid and a CPU-bound --cpu)",
                ),
            },
        });
    }
}

/// A 2025 session: the call's stream stays open (closing it is no cancel
/// there), `notifications/cancelled` is POSTed in the session, and what
/// the stream still carries is the evidence: a response after the cancel
/// (the 2025 pages: SHOULD not send one), progress after it (allowed for
/// an operation still in progress, so it shows the work runs on: SHOULD
/// stop processing), and whether the session still answers.
async fn session_cancel(
    cfg: &Config,
    t: &Target,
    slow: &ToolSpec,
    took: Option<Duration>,
    cancel_at: Duration,
    out: &mut Vec<Check>,
) {
    let (id, rule) = ("http.session-cancel", rules::SESSION_CANCEL);
    let ServerEra::Stateful {
        protocol_version,
        session_id,
    } = t.h1.server_era()
    else {
        out.push(Check::skip(id, rule, "no 2025 session was opened"));
        return;
    };
    let session = crate::watch2025::Session2025 {
        uri: t.uri.clone(),
        version: protocol_version,
        id: session_id,
    };
    // Past the operation's own end, when that is known.
    let (watch, covered) = match took {
        Some(d) => (
            (d + d / 2 + Duration::from_millis(300)).min(cfg.check_timeout),
            true,
        ),
        None => (cfg.window, false),
    };
    cfg.say(&format!("{slow} in the 2025 session, cancelled by a POSTed notifications/cancelled, watched {watch:?}"));
    let seen = session
        .cancel_and_watch(slow.params(), cancel_at, watch, cfg.check_timeout)
        .await;
    let Some(cancelled) = seen.cancelled else {
        let why = seen.not_cancelled.unwrap_or_default();
        out.push(Check::skip(
            id,
            rule,
            format!("no cancel was judged: {why}"),
        ));
        return;
    };
    let alive = responsive(&t.h1, cfg.check_timeout).await;
    let how = crate::watch2025::Judging {
        cancelled,
        race: cfg.race,
        watch,
        covered,
    };
    out.push(how.judge(&seen, alive));
}

/// Calls `tool` and drops the call after `after` (the client closes its
/// stream, and in a 2025 session POSTs the cancel); how it ended first, if it did.
async fn drop_call(client: &HttpClient, tool: &ToolSpec, after: Duration) -> Option<String> {
    let cancellation = Cancellation::new();
    let req = McpRequest::without_id("tools/call")
        .with_params(tool.params())
        .with_cancellation(cancellation.clone());
    let mut call = Box::pin(client.clone().oneshot(req));
    tokio::select! {
        r = &mut call => Some(match r {
            Ok(v) => format!("it answered before the cancel: {}", crate::report::short(&v)),
            Err(e) => format!("it ended before the cancel: {e}"),
        }),
        () = tokio::time::sleep(after) => {
            cancellation.cancel(CancelReason::Other(mcp::REASON.into()));
            None
        }
    }
}

/// A burst of call+cancel pairs; the server answers after, its memory back.
async fn burst(cfg: &Config, t: &Target, slow: &ToolSpec, out: &mut Vec<Check>) {
    cfg.say(&format!(
        "burst of {} call+cancel pairs of {slow}",
        cfg.burst
    ));
    let before = t.pid.and_then(procfs::usage);
    for _ in 0..cfg.burst {
        drop_call(&t.h1, slow, Duration::from_millis(20)).await;
    }
    let alive = responsive(&t.h1, cfg.check_timeout).await;
    let gone = alive.is_err();
    out.push(match alive {
        Ok(()) => Check::pass(
            "cancel.burst-healthy",
            rules::RACES,
            Evidence::Strong,
            format!("answers a ping after {} call+cancel pairs", cfg.burst),
        ),
        Err(e) => Check::fail(
            "cancel.burst-healthy",
            rules::RACES,
            format!(
                "after {} call+cancel pairs: {e} (no control run over HTTP: the checker does not restart a server it did not start, so the load is not told apart from the cancels)",
                cfg.burst
            ),
        ),
    });
    // A server that no longer answers never passes the memory check.
    let (after, why_none) = if gone {
        (None, crate::evidence::GONE_AFTER_BURST)
    } else {
        (
            t.pid.and_then(procfs::usage),
            "give --pid for a server on this machine (Linux)",
        )
    };
    out.push(crate::evidence::rss_check(before, after, why_none));
}

/// With `--pid`: the server's CPU time stops growing at the cancel.
async fn cpu(cfg: &Config, t: &Target, tool: &ToolSpec, out: &mut Vec<Check>) {
    let Some(pid) = t.pid.filter(|&p| procfs::usage(p).is_some()) else {
        out.push(Check::skip(
            "cancel.work-stops-cpu",
            rules::WORK_STOPS,
            "give --pid for a server on this machine (Linux)",
        ));
        return;
    };
    cfg.say(&format!("cancel {tool} and watch the server's CPU time"));
    let h1 = t.h1.clone();
    let tool2 = tool.clone();
    let check =
        crate::evidence::cpu_check(crate::evidence::CPU_CHECK, cfg, pid, tool, async move {
            drop_call(&h1, &tool2, crate::evidence::CPU_LEAD)
                .await
                .map_or(Ok(()), |why| {
                    Err(format!("the operation is not slow enough: {why}"))
                })
        })
        .await;
    out.push(check);
}

/// Headers that contradict the body: `400` with `-32020`.
async fn header_mismatch(cfg: &Config, t: &Target, out: &mut Vec<Check>) {
    let (id, rule) = ("http.header-mismatch", rules::HEADER_MISMATCH);
    cfg.say("a request whose Mcp-Method header contradicts its body");
    let req = rawhttp::post(
        &t.uri,
        "mcc-mismatch",
        "ping",
        json!({}),
        &[("mcp-method", "tools/list")],
    );
    out.push(
        match rawhttp::call(Version::H1, req, cfg.check_timeout).await {
            Err(e) => Check::fail(id, rule, e),
            Ok((400, body)) if rawhttp::error_code(&body) == Some(ErrorObject::HEADER_MISMATCH) => {
                Check::pass(
                    id,
                    rule,
                    Evidence::Strong,
                    "Mcp-Method: tools/list on a ping: 400 with -32020",
                )
            }
            Ok((status, body)) => Check::fail(
                id,
                rule,
                format!(
                    "Mcp-Method: tools/list on a ping: {status} with {}",
                    crate::report::short(&Value::from(body))
                ),
            ),
        },
    );
}

/// What a body held, in short: its error code, a result, or the body.
fn answered_with(body: &str) -> String {
    match rawhttp::error_code(body) {
        Some(code) => format!("error {code}"),
        None if body.contains("\"result\"") => "a result (the task)".into(),
        None => crate::report::short(&Value::from(body)),
    }
}

/// The task checks' view of the server: the HTTP/1.1 client (which sends
/// `Mcp-Name` = `taskId` on `tasks/*`), and raw requests for the header check.
#[derive(Debug)]
struct TaskPeer<'a> {
    t: &'a Target,
}

impl crate::tasks::Peer for TaskPeer<'_> {
    async fn send(&self, method: &str, params: Value, bound: Duration) -> crate::tasks::Answer {
        let req = McpRequest::without_id(method).with_params(params);
        let answer = tokio::time::timeout(bound, self.t.h1.clone().oneshot(req)).await;
        crate::tasks::Answer::of(answer.ok(), bound)
    }

    fn pid(&self) -> Option<u32> {
        self.t.pid
    }

    /// `tasks/get` of `task` without `Mcp-Name`, and with another task's
    /// name in it: `400` with `-32020` both times.
    async fn name_header(&self, cfg: &Config, task: Result<&str, &str>) -> Option<Check> {
        let (id, rule) = (
            "http.task-name-header",
            crate::report::task_rules::NAME_HEADER,
        );
        if self.t.era != Era::Modern {
            return Some(Check::skip(id, rule, crate::stdio::NO_TASKS_2025));
        }
        let task = match task {
            Ok(task) => task,
            Err(why) => return Some(Check::skip(id, rule, why)),
        };
        cfg.say("tasks/get with a missing or mismatched Mcp-Name");
        let mut wrong = Vec::new();
        for (what, value) in [
            ("without Mcp-Name", ""),
            ("with another task's Mcp-Name", "mcc-other-task"),
        ] {
            let params = crate::mcp::declare_tasks(json!({"taskId": task}));
            let req = rawhttp::post(
                &self.t.uri,
                "mcc-task-name",
                "tasks/get",
                params,
                &[("mcp-name", value)],
            );
            match rawhttp::call(Version::H1, req, cfg.check_timeout).await {
                Ok((400, body))
                    if rawhttp::error_code(&body) == Some(ErrorObject::HEADER_MISMATCH) => {}
                Ok((status, body)) => {
                    wrong.push(format!("{what}: {status} with {}", answered_with(&body)))
                }
                Err(e) => wrong.push(format!("{what}: {e}")),
            }
        }
        Some(if wrong.is_empty() {
            Check::pass(
                id,
                rule,
                Evidence::Strong,
                "tasks/get of a live task without Mcp-Name, and with another task's: 400 with -32020",
            )
        } else {
            Check::fail(id, rule, wrong.join("; "))
        })
    }
}
