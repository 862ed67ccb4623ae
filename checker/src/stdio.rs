//! The stdio checks: each experiment runs one kind of call (a baseline, a
//! cancelled call, a burst, …) and the wire log and the child's `/proc`
//! tell what the server did; each check reads one rule off that.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::procfs;
use crate::report::{rules, Check, Evidence, Report};
use crate::session::{short, CancelledCall, Session, Trigger};
use crate::tool::ToolSpec;
use crate::wire::{Dir, Entry};
use crate::Config;

/// Above this share of one core while it runs, an operation is CPU-bound
/// enough for its CPU time to show whether it stopped. (Low, because on a
/// busy machine a spinning server gets only its share of a core.)
const CPU_BOUND: f64 = 0.1;

/// The server's CPU use after a cancel that counts as stopped: under this
/// share of what it used while the operation ran (a server whose work runs
/// on keeps about the same share), or under `CPU_IDLE` of one core.
const CPU_STOPPED: f64 = 0.4;

/// CPU use that counts as idle whatever the operation used.
const CPU_IDLE: f64 = 0.05;

/// Memory the server may keep after a burst of cancelled calls beyond what
/// it held before: a quarter more, at least this many bytes (allocators
/// keep freed pages).
const RSS_SLACK: u64 = 16 << 20;

/// What an uncancelled run of an operation showed.
#[derive(Debug)]
struct Baseline {
    /// How long it took, when it ended within the bound.
    took: Option<Duration>,
    /// How many progress notifications it got.
    progress: usize,
}

/// Runs every stdio check against `command`.
pub(crate) async fn run(cfg: &Config, command: &[String]) -> Result<Report, String> {
    cfg.say(&format!("starting {}", command.join(" ")));
    let s = Session::start(command, cfg.check_timeout).await?;
    let mut report = Report {
        target: format!("stdio `{}`, {}", command.join(" "), s.era.name()),
        checks: Vec::new(),
    };
    let out = &mut report.checks;
    invalid_cancels(cfg, &s, out).await;
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
        Ok(slow) => tool_checks(cfg, &s, slow, out).await,
    }
    server_cancels(&s, out);
    progress_rules(&s, out);
    s.close().await;
    Ok(report)
}

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

async fn tool_checks(cfg: &Config, s: &Session, slow: &ToolSpec, out: &mut Vec<Check>) {
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
    out.push(no_response(
        "cancel.no-response",
        cfg,
        s,
        &c,
        covered,
        window,
    ));
    let progress_tool = cfg.progress.as_ref().unwrap_or(slow);
    if progress_tool == slow {
        out.push(progress_stops(cfg, s, &c, base.progress));
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
        out.push(progress_stops(cfg, s, &c, 1));
    }

    cfg.say(&format!("cancel {slow} right behind its request"));
    let c = s
        .cancel_call(slow.params(), Trigger::Written, cfg.check_timeout)
        .await;
    tokio::time::sleep(window).await;
    out.push(no_response(
        "cancel.right-behind",
        cfg,
        s,
        &c,
        covered,
        window,
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

    burst(cfg, s, slow, window, covered, out).await;
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
    out.push(
        match checks
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
        },
    );
    out.push(
        healthy(
            "cancel.burst-healthy",
            cfg,
            s,
            &format!("after {} call+cancel pairs", cfg.burst),
        )
        .await,
    );
    let id = "cancel.burst-resources";
    let after = s.pid.and_then(procfs::usage);
    out.push(match (before, after) {
        (Some(b), Some(a)) => {
            let allowed = b.rss + (b.rss / 4).max(RSS_SLACK);
            let mib = |x: u64| x as f64 / f64::from(1 << 20);
            let detail = format!(
                "resident memory {:.1} MiB before, {:.1} MiB after",
                mib(b.rss),
                mib(a.rss)
            );
            if a.rss <= allowed {
                Check::pass(id, rules::RESOURCES_FREED, Evidence::Weak, detail)
            } else {
                Check::fail(
                    id,
                    rules::RESOURCES_FREED,
                    format!("{detail}: kept more than {:.1} MiB", mib(allowed)),
                )
            }
        }
        _ => Check::skip(
            id,
            rules::RESOURCES_FREED,
            "no /proc for the server process (Linux stdio only)",
        ),
    });
}

/// The CPU time of a CPU-bound operation stops growing at its cancel.
async fn cpu(cfg: &Config, s: &Session, tool: &ToolSpec, out: &mut Vec<Check>) {
    let (id, rule) = ("cancel.work-stops-cpu", rules::WORK_STOPS);
    let Some(pid) = s.pid.filter(|&p| procfs::usage(p).is_some()) else {
        out.push(Check::skip(
            id,
            rule,
            "no /proc for the server process (Linux stdio only)",
        ));
        return;
    };
    cfg.say(&format!("cancel {tool} and watch the server's CPU time"));
    let lead = Duration::from_millis(600);
    let start = procfs::usage(pid);
    let t0 = Instant::now();
    let c = s
        .cancel_call(tool.params(), Trigger::After(lead), cfg.check_timeout)
        .await;
    let at_cancel = procfs::usage(pid);
    let t1 = Instant::now();
    if let Some(why) = unjudged(&c) {
        out.push(Check::skip(id, rule, why));
        return;
    }
    // The cancel has been read once the race window has passed.
    tokio::time::sleep(cfg.race.max(Duration::from_millis(200))).await;
    let settled = procfs::usage(pid);
    let t2 = Instant::now();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let end = procfs::usage(pid);
    let t3 = Instant::now();
    let (Some(start), Some(at_cancel), Some(settled), Some(end)) = (start, at_cancel, settled, end)
    else {
        out.push(Check::skip(id, rule, "the server process went away"));
        return;
    };
    let rate = |a: procfs::Usage, b: procfs::Usage, d: Duration| {
        b.cpu.saturating_sub(a.cpu).as_secs_f64() / d.as_secs_f64().max(1e-3)
    };
    let running = rate(start, at_cancel, t1 - t0);
    let after = rate(settled, end, t3 - t2);
    if running < CPU_BOUND {
        out.push(Check::skip(
            id,
            rule,
            format!(
                "{tool} is not CPU-bound ({:.0}% of a core while it ran): name one with --cpu",
                running * 100.0
            ),
        ));
        return;
    }
    let detail = format!(
        "{:.0}% of a core while it ran, {:.0}% in the {:.1?} after the cancel",
        running * 100.0,
        after * 100.0,
        t3 - t2
    );
    out.push(if after <= (running * CPU_STOPPED).max(CPU_IDLE) {
        Check::pass(id, rule, Evidence::Strong, detail)
    } else {
        Check::fail(id, rule, format!("{detail}: the work runs on"))
    });
}

/// Cancels naming an unknown request, a completed one, or nothing valid.
async fn invalid_cancels(cfg: &Config, s: &Session, out: &mut Vec<Check>) {
    cfg.say("cancels for unknown, completed and malformed references");
    let mark = Instant::now();
    let unknown = json!({"requestId": "mcc-never-sent", "reason": crate::mcp::REASON});
    let sent = s.notify("notifications/cancelled", &unknown);
    out.push(
        ignored(
            "cancel.unknown",
            rules::INVALID_IGNORED,
            cfg,
            s,
            sent,
            mark,
            "a cancel for an unknown id",
        )
        .await,
    );

    let mark = Instant::now();
    let ping = s.request("ping", json!({}), false);
    let done = ping.id.clone();
    let answered = tokio::time::timeout(cfg.check_timeout, s.call(ping.request)).await;
    if answered.is_err() {
        out.push(Check::fail(
            "cancel.completed",
            rules::RACES,
            "no answer to a ping",
        ));
    } else {
        let sent = s.notify(
            "notifications/cancelled",
            &json!({"requestId": done, "reason": crate::mcp::REASON}),
        );
        out.push(
            ignored(
                "cancel.completed",
                rules::RACES,
                cfg,
                s,
                sent,
                mark,
                "a cancel for a completed request",
            )
            .await,
        );
    }

    let mark = Instant::now();
    // Valid JSON-RPC notifications whose params are no valid cancel. (Params
    // that are neither object nor array make an invalid JSON-RPC message,
    // which JSON-RPC answers with an error: not a cancel's rule.)
    let malformed = [
        json!({}),
        json!({"requestId": null}),
        json!({"requestId": {"not": "an id"}}),
        json!({"requestId": true, "reason": 7}),
        json!([1, 2]),
    ];
    let sent = malformed
        .iter()
        .try_for_each(|p| s.notify("notifications/cancelled", p));
    out.push(
        ignored(
            "cancel.malformed",
            rules::INVALID_IGNORED,
            cfg,
            s,
            sent,
            mark,
            "malformed cancels",
        )
        .await,
    );
}

/// Nothing answered the notifications sent since `mark` (a response with a
/// null id, an error) and the server still answers a ping.
async fn ignored(
    id: &str,
    rule: crate::report::Rule,
    cfg: &Config,
    s: &Session,
    sent: Result<(), tower::BoxError>,
    mark: Instant,
    what: &str,
) -> Check {
    if let Err(e) = sent {
        return Check::fail(id, rule, format!("could not send {what}: {e}"));
    }
    if let Err(e) = s.responsive(cfg.check_timeout).await {
        return Check::fail(id, rule, format!("after {what}: {e}"));
    }
    let entries = s.log.snapshot();
    let answer = entries.iter().find(|e| {
        e.at >= mark
            && e.response_id()
                .is_some_and(|i| i.is_null() || !i.as_str().is_some_and(|s| s.starts_with("mcc-")))
    });
    match answer {
        Some(e) => Check::fail(
            id,
            rule,
            format!("answered {what} (a notification): {}", short(&e.msg)),
        ),
        None => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!("ignored {what}; still answers"),
        ),
    }
}

/// Server-sent `notifications/cancelled`: the checker opens no
/// `subscriptions/listen`, so every one it saw breaks the rule.
fn server_cancels(s: &Session, out: &mut Vec<Check>) {
    let entries = s.log.snapshot();
    let requests = entries
        .iter()
        .filter(|e| e.dir == Dir::Out && e.msg.get("id").is_some())
        .count();
    let id = "server-cancel.listen-only";
    let rule = rules::SERVER_CANCEL;
    out.push(
        match entries
            .iter()
            .find(|e| e.dir == Dir::In && e.method() == Some("notifications/cancelled"))
        {
            Some(e) => Check::fail(
                id,
                rule,
                format!(
                    "sent a cancel for a request that is no subscriptions/listen: {}",
                    short(&e.msg)
                ),
            ),
            None => Check::pass(
                id,
                rule,
                Evidence::Weak,
                format!("no server-sent cancel in {requests} requests"),
            ),
        },
    );
    out.push(Check::skip(
        "server-cancel.listen-teardown",
        rule,
        "needs a subscriptions/listen the server tears down; not driven by this checker yet",
    ));
}

/// Every progress notification of the run: it names a token the checker
/// sent, and each token's values increase.
fn progress_rules(s: &Session, out: &mut Vec<Check>) {
    let entries = s.log.snapshot();
    let tokens: Vec<&Value> = entries
        .iter()
        .filter(|e| e.dir == Dir::Out)
        .filter_map(|e| e.msg.pointer("/params/_meta/progressToken"))
        .collect();
    let progress: Vec<(&Entry, &Value, Option<f64>)> = entries
        .iter()
        .filter_map(|e| e.progress().map(|(t, v)| (e, t, v)))
        .collect();
    let malformed = entries.iter().find(|e| {
        e.dir == Dir::In && e.method() == Some("notifications/progress") && e.progress().is_none()
    });
    let (id, rule) = ("progress.token", rules::PROGRESS_TOKEN);
    if progress.is_empty() && malformed.is_none() {
        out.push(Check::skip(id, rule, "the server sent no progress"));
        out.push(Check::skip(
            "progress.increases",
            rules::PROGRESS_INCREASES,
            "the server sent no progress",
        ));
        return;
    }
    let stranger = progress.iter().find(|(_, t, _)| !tokens.contains(t));
    out.push(match (malformed, stranger) {
        (Some(e), _) => Check::fail(
            id,
            rule,
            format!("progress without a progressToken: {}", short(&e.msg)),
        ),
        (None, Some((e, _, _))) => Check::fail(
            id,
            rule,
            format!("progress for a token no request carried: {}", short(&e.msg)),
        ),
        (None, None) => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!(
                "{} progress notifications, each with its request's token",
                progress.len()
            ),
        ),
    });
    let (id, rule) = ("progress.increases", rules::PROGRESS_INCREASES);
    let mut last: Vec<(&Value, f64)> = Vec::new();
    let mut broken = None;
    for (e, t, v) in &progress {
        let Some(v) = *v else {
            broken = Some(format!(
                "a progress value that is no number: {}",
                short(&e.msg)
            ));
            break;
        };
        match last.iter_mut().find(|(lt, _)| lt == t) {
            Some((_, prev)) if v <= *prev => {
                broken = Some(format!("{v} after {prev} for token {t}"));
                break;
            }
            Some((_, prev)) => *prev = v,
            None => last.push((t, v)),
        }
    }
    out.push(match broken {
        Some(why) => Check::fail(id, rule, why),
        None => Check::pass(
            id,
            rule,
            Evidence::Strong,
            format!("strictly increasing for each of {} tokens", last.len()),
        ),
    });
}
