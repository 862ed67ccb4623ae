//! The stdio checks: each experiment runs one kind of call (a baseline, a
//! cancelled call, a burst, …) and the wire log and the child's `/proc`
//! tell what the server did; each check reads one rule off that.
//!
//! * `notices`: the checks of cancels that name no request in flight, and
//!   the rules read off the whole run's log.
//! * `listen`: how the server tears down a `subscriptions/listen` at its
//!   shutdown, on a fresh child (run last, once the checked one is closed).

mod control;
pub(crate) mod listen;
mod notices;

use std::time::Duration;

use tokio::time::Instant;

use crate::evidence;
use crate::mcp::Era;
use crate::procfs;
use crate::report::{rules, short, Check, Evidence, Report, RunError};
use crate::session::{CancelledCall, Session, Trigger};
use crate::tasks;
use crate::tool::ToolSpec;
use crate::wire::{Dir, Entry};
use crate::Config;

/// Why the checks that read `/proc` are skipped.
const NO_PROC: &str = "no /proc for the server process (Linux stdio only)";

/// What an uncancelled run of an operation showed.
#[derive(Debug)]
struct Baseline {
    /// How long it took, when it ended within the bound.
    took: Option<Duration>,
    /// How many progress notifications it got.
    progress: usize,
}

/// Runs every stdio check against `command`.
pub(crate) async fn run(cfg: &Config, command: &[String]) -> Result<Report, RunError> {
    cfg.say(&format!("starting {}", command.join(" ")));
    let s = Session::start(command, cfg.era, cfg.check_timeout).await?;
    let mut report = Report {
        target: format!("stdio `{}`, {}", command.join(" "), s.era.name()),
        checks: Vec::new(),
    };
    let out = &mut report.checks;
    notices::invalid_cancels(cfg, &s, out).await;
    let tools = match (&cfg.slow, s.has_tools()) {
        (None, _) => Err("no --slow operation named"),
        (Some(_), false) => Err("the server declares no tools capability"),
        (Some(slow), true) => Ok(slow),
    };
    match tools {
        Err(why) => {
            for (id, rule) in TOOL_CHECKS {
                out.push(Check::skip(id, *rule, why));
            }
        }
        Ok(slow) => tool_checks(cfg, &s, command, slow, out).await,
    }
    // Checks not run because the server had gone in an earlier one.
    for (id, rule) in TOOL_CHECKS {
        if !out.iter().any(|c| c.id == *id) {
            out.push(Check::skip(id, *rule, GONE));
        }
    }
    if s.gone() {
        tasks::skip_all(&s, cfg, GONE, out).await;
    } else if s.era == Era::Legacy {
        tasks::skip_all(&s, cfg, NO_TASKS_2025, out).await;
    } else {
        let capabilities = s.capabilities.clone();
        tasks::run(&s, cfg, &capabilities, out).await;
    }
    let (log, era) = (s.log.clone(), s.era);
    s.close().await;
    let teardown = listen::run(cfg, command, era).await;
    let entries = log.snapshot();
    notices::server_cancels(&entries, &teardown.strays, era, out);
    out.extend(teardown.checks);
    notices::progress_rules(&entries, out);
    report.judge(era);
    Ok(report)
}

/// Why the task checks do not run in a 2025 session.
pub(crate) const NO_TASKS_2025: &str =
    "a 2025 session: the tasks extension is a 2026-07-28 one (server/discover)";

/// Why a check did not run after the server went away.
const GONE: &str = "the server exited during an earlier check";

/// The checks that need a tool, for the report when they cannot run.
const TOOL_CHECKS: &[(&str, crate::report::Rule)] = &[
    ("progress.stops-at-response", rules::PROGRESS_STOPS),
    ("cancel.no-response", rules::NO_RESPONSE),
    ("cancel.progress-stops", rules::NO_PROGRESS),
    ("cancel.right-behind", rules::NO_RESPONSE),
    ("cancel.right-behind-healthy", rules::RACES),
    ("cancel.burst-no-response", rules::NO_RESPONSE),
    ("cancel.burst-healthy", rules::RACES),
    ("cancel.burst-resources", rules::RESOURCES_FREED),
    ("cancel.work-stops-cpu", rules::WORK_STOPS),
];

async fn tool_checks(
    cfg: &Config,
    s: &Session,
    command: &[String],
    slow: &ToolSpec,
    out: &mut Vec<Check>,
) {
    if s.gone() {
        return;
    }
    cfg.say(&format!("baseline: {slow}, uncancelled"));
    let base = baseline(cfg, s, slow, out).await;
    if let Some(p) = cfg.progress.as_ref().filter(|p| *p != slow) {
        cfg.say(&format!("baseline: {p}, uncancelled"));
        let mut ignored = Vec::new();
        baseline(cfg, s, p, &mut ignored).await;
    }
    // How long to watch after a cancel: past the time the operation would
    // have ended by itself, when that is known.
    let (window, covered) = match base.took {
        Some(d) => (
            (d + d / 2 + Duration::from_millis(300)).min(cfg.check_timeout),
            true,
        ),
        None => (cfg.window, false),
    };
    let cancel_at = base.took.map_or(Duration::from_millis(500), |d| {
        (d / 3).max(Duration::from_millis(20))
    });

    if s.gone() {
        return;
    }
    cfg.say(&format!(
        "cancel {slow} at its first progress, watch {window:?}"
    ));
    let c = s
        .cancel_call(
            slow.params(),
            Trigger::FirstProgressOr(cancel_at),
            cfg.check_timeout,
        )
        .await;
    tokio::time::sleep(window).await;
    out.push(alive(
        s,
        no_response("cancel.no-response", cfg, s, &c, covered, window),
    ));
    let progress_tool = cfg.progress.as_ref().unwrap_or(slow);
    if progress_tool == slow {
        out.push(alive(s, progress_stops(cfg, s, &c, base.progress)));
    } else {
        cfg.say(&format!("cancel {progress_tool} at its first progress"));
        let c = s
            .cancel_call(
                progress_tool.params(),
                Trigger::FirstProgressOr(Duration::from_secs(1)),
                cfg.check_timeout,
            )
            .await;
        tokio::time::sleep(cfg.window).await;
        out.push(alive(s, progress_stops(cfg, s, &c, 1)));
    }

    if s.gone() {
        return;
    }
    cfg.say(&format!("cancel {slow} right behind its request"));
    let c = s
        .cancel_call(slow.params(), Trigger::Written, cfg.check_timeout)
        .await;
    tokio::time::sleep(window).await;
    out.push(alive(
        s,
        no_response("cancel.right-behind", cfg, s, &c, covered, window),
    ));
    out.push(
        healthy(
            "cancel.right-behind-healthy",
            cfg,
            s,
            "after a cancel right behind its request",
        )
        .await,
    );

    if s.gone() {
        return;
    }
    burst(cfg, s, command, slow, window, covered, out).await;
    if s.gone() {
        return;
    }
    cpu(cfg, s, cfg.cpu.as_ref().unwrap_or(slow), out).await;
}

/// Runs `tool` to its end (within the bound), asked for progress.
async fn baseline(cfg: &Config, s: &Session, tool: &ToolSpec, out: &mut Vec<Check>) -> Baseline {
    let sent = s.request("tools/call", tool.params(), true);
    let (id, token) = (sent.id.clone(), sent.token.clone());
    let start = Instant::now();
    let answered = tokio::time::timeout(cfg.check_timeout, s.call(sent.request)).await;
    let took = start.elapsed();
    let entries = s.log.snapshot();
    let progress: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.progress().is_some_and(|(t, _)| Some(t) == token.as_ref()))
        .collect();
    let id_ = "progress.stops-at-response";
    let rule = rules::PROGRESS_STOPS;
    let took = match answered {
        Err(_) => {
            out.push(Check::skip(
                id_,
                rule,
                format!("{tool} did not end within {:?}", cfg.check_timeout),
            ));
            None
        }
        Ok(Err(e)) => {
            out.push(Check::skip(id_, rule, format!("{tool} failed: {e}")));
            Some(took)
        }
        Ok(Ok(_)) => {
            let response = entries.iter().find(|e| e.response_id() == Some(&id));
            match response {
                _ if progress.is_empty() => {
                    out.push(Check::skip(
                        id_,
                        rule,
                        format!("{tool} sent no progress (asked with a progressToken)"),
                    ));
                }
                None => out.push(Check::skip(
                    id_,
                    rule,
                    "its response was not seen on the wire",
                )),
                Some(r) => match progress.iter().find(|p| p.at > r.at) {
                    Some(p) => out.push(Check::fail(
                        id_,
                        rule,
                        format!("progress after the response: {}", short(&p.msg)),
                    )),
                    None => out.push(Check::pass(
                        id_,
                        rule,
                        Evidence::Strong,
                        format!(
                            "{} progress notifications, none after the response ({took:.1?})",
                            progress.len()
                        ),
                    )),
                },
            }
            Some(took)
        }
    };
    Baseline {
        took,
        progress: progress.len(),
    }
}

/// The messages the server sent for a cancelled call after its cancel.
fn after_cancel<'a>(
    entries: &'a [Entry],
    c: &CancelledCall,
    pred: impl Fn(&Entry) -> bool,
) -> Vec<&'a Entry> {
    let Some(at) = c.cancelled else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.dir == Dir::In && e.at > at && pred(e))
        .collect()
}

/// Why a cancel experiment could not be judged, if it could not.
fn unjudged(c: &CancelledCall) -> Option<String> {
    if let Some(why) = &c.ended_first {
        return Some(format!("the operation is not slow enough: {why}"));
    }
    if c.cancelled.is_none() {
        return Some("the client's notifications/cancelled was not seen going out".into());
    }
    None
}

/// No response for the call after its cancel (a result that crossed the
/// cancel within the race window is the race the spec allows).
fn no_response(
    id: &str,
    cfg: &Config,
    s: &Session,
    c: &CancelledCall,
    covered: bool,
    window: Duration,
) -> Check {
    let rule = rules::NO_RESPONSE;
    if let Some(why) = unjudged(c) {
        return Check::skip(id, rule, why);
    }
    let entries = s.log.snapshot();
    let late = after_cancel(&entries, c, |e| e.response_id() == Some(&c.id));
    let cancelled = c.cancelled.unwrap_or_else(Instant::now);
    match late.first() {
        Some(e) if e.msg.get("error").is_some() => Check::fail(
            id,
            rule,
            format!(
                "answered the cancelled request with an error {:.0?} after the cancel: {}",
                e.at - cancelled,
                short(&e.msg)
            ),
        ),
        Some(e) if e.at - cancelled <= cfg.race => Check::pass(
            id,
            rule,
            Evidence::Weak,
            format!(
                "a result crossed the cancel ({:.0?} after it: the race the spec allows)",
                e.at - cancelled
            ),
        ),
        Some(e) => Check::fail(
            id,
            rule,
            format!(
                "answered {:.0?} after the cancel: {}",
                e.at - cancelled,
                short(&e.msg)
            ),
        ),
        None if covered => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!("no response in {window:.1?} after the cancel (past the operation's own end)"),
        ),
        None => Check::pass(
            id,
            rule,
            Evidence::Weak,
            format!(
                "no response in {window:.1?} after the cancel (the operation's length is unknown)"
            ),
        ),
    }
}

/// No progress for the call once its cancel was read (the race window).
fn progress_stops(cfg: &Config, s: &Session, c: &CancelledCall, baseline_progress: usize) -> Check {
    let (id, rule) = ("cancel.progress-stops", rules::NO_PROGRESS);
    if let Some(why) = unjudged(c) {
        return Check::skip(id, rule, why);
    }
    if baseline_progress == 0 {
        return Check::skip(id, rule, "the operation sends no progress");
    }
    let entries = s.log.snapshot();
    let before = entries
        .iter()
        .filter(|e| {
            e.progress()
                .is_some_and(|(t, _)| Some(t) == c.token.as_ref())
        })
        .count();
    let cancelled = c.cancelled.unwrap_or_else(Instant::now);
    let late = after_cancel(&entries, c, |e| {
        e.at - cancelled > cfg.race
            && e.progress()
                .is_some_and(|(t, _)| Some(t) == c.token.as_ref())
    });
    match late.last() {
        Some(last) => Check::fail(
            id,
            rule,
            format!(
                "{} progress notifications after the cancel, the last {:.0?} after it: the work runs on",
                late.len(),
                last.at - cancelled
            ),
        ),
        None => Check::pass(
            id,
            rule,
            if before > 0 { Evidence::Strong } else { Evidence::Weak },
            format!("no progress after the cancel ({before} before it)"),
        ),
    }
}

/// Why a silence is not judged: the server had gone.
const SILENT_GONE: &str =
    "the server exited during the check: the silence of a gone server is no evidence";

/// `check`, unless it passed on the silence of a server that has gone
/// since (a server that is gone never passes a check): then skipped.
fn alive(s: &Session, check: Check) -> Check {
    silent_unless(!s.gone(), check, SILENT_GONE)
}

/// `check`, or (when it passed and `alive` is false) skipped for `why`.
fn silent_unless(alive: bool, check: Check, why: &str) -> Check {
    if alive || check.outcome != crate::report::Outcome::Pass {
        return check;
    }
    let detail = format!("{why} ({})", check.detail);
    Check::skip(&check.id, check.rule, detail)
}

/// The server answers a ping after an experiment.
async fn healthy(id: &str, cfg: &Config, s: &Session, after: &str) -> Check {
    match s.responsive(cfg.check_timeout).await {
        Ok(()) => Check::pass(
            id,
            rules::RACES,
            Evidence::Strong,
            format!("answers a ping {after}"),
        ),
        Err(e) => Check::fail(id, rules::RACES, format!("{after}: {e}")),
    }
}

/// A burst of call+cancel pairs: no responses, still answering, memory back.
async fn burst(
    cfg: &Config,
    s: &Session,
    command: &[String],
    slow: &ToolSpec,
    window: Duration,
    covered: bool,
    out: &mut Vec<Check>,
) {
    cfg.say(&format!(
        "burst of {} call+cancel pairs of {slow}",
        cfg.burst
    ));
    let before = s.pid.and_then(procfs::usage);
    let mut calls = Vec::new();
    for _ in 0..cfg.burst {
        calls.push(
            s.cancel_call(slow.params(), Trigger::Written, cfg.check_timeout)
                .await,
        );
    }
    tokio::time::sleep(window).await;
    let id = "cancel.burst-no-response";
    let checks: Vec<Check> = calls
        .iter()
        .map(|c| no_response(id, cfg, s, c, covered, window))
        .collect();
    let failed = checks
        .iter()
        .filter(|c| c.outcome == crate::report::Outcome::Fail)
        .count();
    let skipped = checks
        .iter()
        .filter(|c| c.outcome == crate::report::Outcome::Skip)
        .count();
    let answered = match checks
        .iter()
        .find(|c| c.outcome == crate::report::Outcome::Fail)
    {
        Some(first) => Check::fail(
            id,
            rules::NO_RESPONSE,
            format!(
                "{failed} of {} answered; first: {}",
                cfg.burst, first.detail
            ),
        ),
        None if skipped == checks.len() => Check::skip(
            id,
            rules::NO_RESPONSE,
            checks.first().map_or(String::new(), |c| c.detail.clone()),
        ),
        None => Check::pass(
            id,
            rules::NO_RESPONSE,
            if covered {
                Evidence::Strong
            } else {
                Evidence::Weak
            },
            format!(
                "none of {} cancelled calls answered in {window:.1?}",
                cfg.burst - skipped
            ),
        ),
    };
    let healthy = healthy(
        "cancel.burst-healthy",
        cfg,
        s,
        &format!("after {} call+cancel pairs", cfg.burst),
    )
    .await;
    let answers = healthy.outcome == crate::report::Outcome::Pass;
    out.push(silent_unless(
        answers,
        answered,
        "the server stopped answering in the burst (cancel.burst-healthy): the silence of a gone server is no evidence",
    ));
    if answers {
        out.push(healthy);
        let after = s.pid.and_then(procfs::usage);
        out.push(evidence::rss_check(before, after, NO_PROC));
        return;
    }
    // Gone, or no longer answering: whether the cancels did it, the same
    // calls without them on a fresh server tell; and its memory shows nothing.
    let ran = control::run(cfg, command, s.era, slow, window).await;
    out.push(control::judge(healthy, ran, cfg.burst));
    out.push(evidence::rss_check(
        before,
        None,
        evidence::GONE_AFTER_BURST,
    ));
}

/// The CPU time of a CPU-bound operation stops growing at its cancel.
async fn cpu(cfg: &Config, s: &Session, tool: &ToolSpec, out: &mut Vec<Check>) {
    let Some(pid) = s.pid.filter(|&p| procfs::usage(p).is_some()) else {
        out.push(Check::skip(
            "cancel.work-stops-cpu",
            rules::WORK_STOPS,
            NO_PROC,
        ));
        return;
    };
    cfg.say(&format!("cancel {tool} and watch the server's CPU time"));
    let cancelled = async {
        let c = s
            .cancel_call(
                tool.params(),
                Trigger::After(evidence::CPU_LEAD),
                cfg.check_timeout,
            )
            .await;
        unjudged(&c).map_or(Ok(()), Err)
    };
    out.push(evidence::cpu_check(evidence::CPU_CHECK, cfg, pid, tool, cancelled).await);
}
