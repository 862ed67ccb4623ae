//! The checks of cancels that name no request in flight (unknown,
//! completed, malformed), and the rules read off the whole run's log
//! (server-sent cancels, progress tokens and values).

use serde_json::{json, Value};
use tokio::time::Instant;

use super::GONE;
use crate::report::short;
use crate::report::{rules, Check, Evidence, Outcome, Rule};
use crate::session::Session;
use crate::wire::{Dir, Entry};
use crate::Config;

/// Cancels naming an unknown request, a completed one, or nothing valid.
pub(super) async fn invalid_cancels(cfg: &Config, s: &Session, out: &mut Vec<Check>) {
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
    // One at a time, so that an answer names the cancel it answers.
    let mut check = None;
    for params in &malformed {
        let mark = Instant::now();
        let sent = s.notify("notifications/cancelled", params);
        let what = format!("the malformed cancel {params}");
        let c = ignored(
            "cancel.malformed",
            rules::INVALID_IGNORED,
            cfg,
            s,
            sent,
            mark,
            &what,
        )
        .await;
        let failed = c.outcome != Outcome::Pass;
        check = Some(c);
        if failed {
            break;
        }
    }
    out.push(match check {
        Some(c) if c.outcome != Outcome::Pass => c,
        _ => Check::pass(
            "cancel.malformed",
            rules::INVALID_IGNORED,
            Evidence::Strong,
            format!(
                "ignored {} malformed cancels; still answers",
                malformed.len()
            ),
        ),
    });
}

/// Nothing answered the notifications sent since `mark` (a response with a
/// null id, an error) and the server still answers a ping.
async fn ignored(
    id: &str,
    rule: Rule,
    cfg: &Config,
    s: &Session,
    sent: Result<(), tower::BoxError>,
    mark: Instant,
    what: &str,
) -> Check {
    if s.gone() && sent.is_err() {
        return Check::skip(id, rule, GONE);
    }
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

/// Server-sent `notifications/cancelled`: the checked server was sent no
/// `subscriptions/listen`, so each one in its log (`entries`) breaks the
/// rule, as does each in `strays` (the listen experiment's, for another
/// request than its listen).
/// In a 2025 session a server may cancel a request of its own (2025-11-25
/// cancellation: either side, each for requests it issued): only a cancel
/// for anything else breaks the rule there.
pub(super) fn server_cancels(
    entries: &[Entry],
    strays: &[Entry],
    era: crate::mcp::Era,
    out: &mut Vec<Check>,
) {
    let requests = entries
        .iter()
        .filter(|e| e.dir == Dir::Out && e.msg.get("id").is_some())
        .count();
    let id = "server-cancel.listen-only";
    let rule = rules::SERVER_CANCEL;
    // The ids of the requests the server itself sent.
    let own: Vec<&Value> = entries
        .iter()
        .filter(|e| e.dir == Dir::In && e.method().is_some())
        .filter_map(|e| e.msg.get("id"))
        .collect();
    let stray = entries
        .iter()
        .find(|e| {
            e.server_cancel()
                .is_some_and(|id| era == crate::mcp::Era::Modern || !own.contains(&id))
        })
        .or(strays.first());
    out.push(match stray {
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
    });
}

/// Every progress notification of the run: it names a token the checker
/// sent, and each token's values increase.
pub(super) fn progress_rules(entries: &[Entry], out: &mut Vec<Check>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cancel_from_server(id: &str) -> Entry {
        Entry {
            at: Instant::now(),
            dir: Dir::In,
            msg: json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id}}),
        }
    }

    #[test]
    fn a_stray_cancel_of_the_listen_run_fails_listen_only() {
        let judged = |entries: &[Entry], strays: &[Entry]| {
            let mut out = Vec::new();
            server_cancels(entries, strays, crate::mcp::Era::Modern, &mut out);
            out.remove(0).outcome
        };
        assert_eq!(judged(&[], &[]), Outcome::Pass);
        assert_eq!(judged(&[cancel_from_server("mcc-3")], &[]), Outcome::Fail);
        assert_eq!(judged(&[], &[cancel_from_server("mcc-9")]), Outcome::Fail);
    }

    #[test]
    fn in_a_2025_session_a_server_may_cancel_its_own_request() {
        let own_request = Entry {
            at: Instant::now(),
            dir: Dir::In,
            msg: json!({"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage", "params": {}}),
        };
        let judged = |era, cancel: &str| {
            let mut out = Vec::new();
            let entries = [own_request.clone(), cancel_from_server(cancel)];
            server_cancels(&entries, &[], era, &mut out);
            out.remove(0).outcome
        };
        assert_eq!(judged(crate::mcp::Era::Legacy, "s-1"), Outcome::Pass);
        assert_eq!(judged(crate::mcp::Era::Legacy, "mcc-3"), Outcome::Fail);
        assert_eq!(judged(crate::mcp::Era::Modern, "s-1"), Outcome::Fail);
    }
}
