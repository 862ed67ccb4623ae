//! How a server tears down a `subscriptions/listen` stream at its shutdown
//! (2026-07-28, stdio). On a fresh child, so that no other check is
//! affected: a listen is opened and held open (the checker never cancels
//! it), then the child's process group gets SIGTERM while its stdin stays
//! open, the shutdown a host asks of a server; what the server writes for
//! the listen until its output ends tells how it ended the stream.
//!
//! The spec's two pages disagree on that message (modelcontextprotocol
//! issue 3348): cancellation's intro has the server send
//! `notifications/cancelled` for the listen id (a MUST), subscriptions §
//! Graceful Closure has it answer the listen with a completion result (a
//! SHOULD), which the SDKs send. Either ends the stream; both end it twice
//! (a cancel for a request already answered, or an answer to a request the
//! server itself declared ended): `server-cancel.listen-teardown` fails
//! only that. `server-cancel.listen-graceful` judges the answer, when there
//! is one. A process that exits with neither is a transport close, which
//! carries neither (subscriptions § Cancellation): skipped.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use crate::mcp::{self, Era, SUBSCRIPTION_ID};
use crate::report::{rules, short, Check, Evidence};
use crate::session::Session;
use crate::wire::{Dir, Entry};
use crate::Config;

/// The check of the stream's end.
pub(crate) const TEARDOWN: &str = "server-cancel.listen-teardown";
/// The check of the listen's answer.
pub(crate) const GRACEFUL: &str = "server-cancel.listen-graceful";

/// What the experiment found: its checks, and the server-sent cancels
/// that named no listen (`server-cancel.listen-only`'s to judge).
#[derive(Debug, Default)]
pub(super) struct Teardown {
    /// `server-cancel.listen-teardown`, `server-cancel.listen-graceful`.
    pub(super) checks: Vec<Check>,
    /// Server-sent `notifications/cancelled` for anything but the listen.
    pub(super) strays: Vec<Entry>,
}

/// Both checks skipped for `why`.
pub(crate) fn skipped(why: &str) -> Vec<Check> {
    vec![
        Check::skip(TEARDOWN, rules::LISTEN_TEARDOWN, why),
        Check::skip(GRACEFUL, rules::LISTEN_GRACEFUL, why),
    ]
}

/// Why the checks do not run in a 2025 session.
const NO_LISTEN_2025: &str = "a 2025 session: subscriptions/listen is a 2026-07-28 method";

/// Why they do not run over Streamable HTTP.
pub(crate) const NO_LISTEN_HTTP: &str = "over Streamable HTTP a server ends a listen by closing its SSE stream (notifications/cancelled is stdio's: schema, CancelledNotification), and the checker does not stop a server it did not start";

/// Opens a listen on a fresh `command` and shuts the server down under it.
pub(super) async fn run(cfg: &Config, command: &[String], era: Era) -> Teardown {
    if era == Era::Legacy {
        return Teardown {
            checks: skipped(NO_LISTEN_2025),
            strays: Vec::new(),
        };
    }
    cfg.say("a subscriptions/listen on a fresh server, then SIGTERM");
    let mut t = match Session::start(command, Some(Era::Modern), cfg.check_timeout).await {
        Ok(t) => t,
        Err(e) => {
            return Teardown {
                checks: skipped(&format!("a fresh server for the listen did not start: {e}")),
                strays: Vec::new(),
            }
        }
    };
    let bound = cfg.window.min(cfg.check_timeout);
    let checks = match open(&t, bound).await {
        Err(why) => skipped(&why),
        Ok(_) if !t.terminate() => skipped("no signals to stop the server with (not Unix)"),
        Ok(id) => {
            let ended = t.output_ended(bound).await;
            judge(&id, &t.log.snapshot(), ended, bound)
        }
    };
    let strays = strays(&t.log.snapshot());
    t.close().await;
    Teardown { checks, strays }
}

/// The filters to open a listen with, the likeliest to be served first:
/// each list the server says changes, the tasks extension's task ids (an
/// empty list, with the extension declared), then tool list changes.
fn filters(capabilities: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for (capability, key) in [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ] {
        if capabilities[capability]["listChanged"] == true {
            out.push(json!({ key: true }));
        }
    }
    if mcp::advertises_tasks(capabilities) {
        out.push(json!({"taskIds": []}));
    }
    let tools = json!({"toolsListChanged": true});
    if !out.contains(&tools) {
        out.push(tools);
    }
    out
}

/// Opens a listen the server acknowledges and holds it open: its id, or
/// why none was.
async fn open(t: &Session, bound: Duration) -> Result<Value, String> {
    let mut refused = Vec::new();
    for filter in filters(&t.capabilities) {
        let mut params = json!({"notifications": filter});
        if filter.get("taskIds").is_some() {
            params = mcp::declare_tasks(params);
        }
        let sent = t.request("subscriptions/listen", params, false);
        let id = sent.id.clone();
        // Held open by its task until the server ends it or the run ends.
        drop(t.open(sent.request));
        let seen = t
            .log
            .wait_for(Instant::now() + bound, |e| {
                acknowledges(e, &id)
                    || e.response_id() == Some(&id)
                    || e.server_cancel() == Some(&id)
            })
            .await;
        match seen {
            Some(e) if e.server_cancel().is_some() => {
                return Err(format!(
                    "cancelled the listen {filter} at once, without acknowledging it: {}",
                    short(&e.msg)
                ))
            }
            Some(e) if e.response_id().is_none() => return Ok(id),
            Some(e) => match e.msg.get("error") {
                Some(error) => refused.push(format!("{filter}: {}", short(error))),
                None => {
                    return Err(format!(
                        "answered the listen {filter} at once, without acknowledging it: {}",
                        short(&e.msg)
                    ))
                }
            },
            None if t.gone() => {
                return Err("the server exited before it acknowledged the listen".into())
            }
            None => {
                return Err(format!(
                    "no notifications/subscriptions/acknowledged nor answer for the listen {filter} within {bound:?}"
                ))
            }
        }
    }
    Err(format!(
        "the server refused subscriptions/listen: {}",
        refused.join("; ")
    ))
}

/// Whether `e` acknowledges the listen `id`.
fn acknowledges(e: &Entry, id: &Value) -> bool {
    e.dir == Dir::In
        && e.method() == Some("notifications/subscriptions/acknowledged")
        && e.msg["params"]["_meta"][SUBSCRIPTION_ID] == *id
}

/// The server-sent cancels in `entries` that name no listen the checker
/// sent (acknowledged or not: a cancel for one is the rule's one purpose).
fn strays(entries: &[Entry]) -> Vec<Entry> {
    let listens: Vec<&Value> = entries
        .iter()
        .filter(|e| e.dir == Dir::Out && e.method() == Some("subscriptions/listen"))
        .filter_map(|e| e.msg.get("id"))
        .collect();
    entries
        .iter()
        .filter(|e| e.server_cancel().is_some_and(|id| !listens.contains(&id)))
        .cloned()
        .collect()
}

/// Reads off `entries` how the server ended the listen `id` after its
/// SIGTERM (`ended`: its output ended within `bound`).
fn judge(id: &Value, entries: &[Entry], ended: bool, bound: Duration) -> Vec<Check> {
    let ends: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.response_id() == Some(id) || e.server_cancel() == Some(id))
        .collect();
    let (Some(first), second) = (ends.first(), ends.get(1)) else {
        return skipped(&if ended {
            "the server exited at SIGTERM without ending the listen: a transport close, which carries neither a cancel nor a result (subscriptions § Cancellation)".to_owned()
        } else {
            format!("the listen was not ended within {bound:?} of SIGTERM, and the server's output is still open")
        });
    };
    let teardown = match second {
        Some(again) => Check::fail(
            TEARDOWN,
            rules::LISTEN_TEARDOWN,
            format!(
                "ended the listen twice: {} then {}",
                short(&first.msg),
                short(&again.msg)
            ),
        ),
        None if first.response_id().is_none() => Check::pass(
            TEARDOWN,
            rules::LISTEN_TEARDOWN,
            Evidence::Strong,
            format!("at SIGTERM: {}", short(&first.msg)),
        ),
        None => Check::pass(
            TEARDOWN,
            rules::LISTEN_TEARDOWN,
            Evidence::Weak,
            "answered the listen at SIGTERM instead of cancelling it (subscriptions § Graceful Closure; the two pages disagree, modelcontextprotocol issue 3348): ended once",
        ),
    };
    let answer = ends.iter().find(|e| e.response_id().is_some());
    let graceful = match answer {
        None => Check::skip(
            GRACEFUL,
            rules::LISTEN_GRACEFUL,
            "ended the listen with notifications/cancelled, not a completion result: cancellation's MUST, which subscriptions § Graceful Closure contradicts (modelcontextprotocol issue 3348)",
        ),
        Some(e) if e.msg.get("error").is_some() => Check::fail(
            GRACEFUL,
            rules::LISTEN_GRACEFUL,
            format!("answered the listen with an error at SIGTERM: {}", short(&e.msg)),
        ),
        Some(e)
            if e.msg["result"]["resultType"] == "complete"
                && e.msg["result"]["_meta"][SUBSCRIPTION_ID] == *id =>
        {
            Check::pass(
                GRACEFUL,
                rules::LISTEN_GRACEFUL,
                Evidence::Strong,
                format!("the completion result at SIGTERM: {}", short(&e.msg)),
            )
        }
        Some(e) => Check::fail(
            GRACEFUL,
            rules::LISTEN_GRACEFUL,
            format!(
                "answered the listen at SIGTERM with a result that is not the completion result (resultType \"complete\", _meta {SUBSCRIPTION_ID} = {id}): {}",
                short(&e.msg)
            ),
        ),
    };
    vec![teardown, graceful]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    fn from_server(msg: Value) -> Entry {
        Entry {
            at: Instant::now(),
            dir: Dir::In,
            msg,
        }
    }

    fn cancel(id: &str) -> Entry {
        from_server(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "shutting down"}}),
        )
    }

    fn graceful(id: &str) -> Entry {
        from_server(json!({"jsonrpc": "2.0", "id": id,
            "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: id}}}))
    }

    fn outcomes(entries: &[Entry], ended: bool) -> (Outcome, Outcome, Vec<Check>) {
        let checks = judge(&json!("mcc-1"), entries, ended, Duration::from_secs(3));
        assert_eq!(checks[0].id, TEARDOWN);
        assert_eq!(checks[1].id, GRACEFUL);
        (checks[0].outcome.clone(), checks[1].outcome.clone(), checks)
    }

    #[test]
    fn a_cancel_for_the_listen_passes_and_leaves_the_answer_unjudged() {
        let (t, g, checks) = outcomes(&[cancel("mcc-1")], true);
        assert_eq!((t, g), (Outcome::Pass, Outcome::Skip));
        assert_eq!(checks[0].evidence, Evidence::Strong);
        assert!(checks[1].detail.contains("3348"), "{checks:?}");
    }

    #[test]
    fn the_completion_result_passes_both() {
        let (t, g, checks) = outcomes(&[graceful("mcc-1")], true);
        assert_eq!((t, g), (Outcome::Pass, Outcome::Pass));
        assert_eq!(
            checks[0].evidence,
            Evidence::Weak,
            "the page it cites asks a cancel"
        );
    }

    #[test]
    fn a_result_and_a_cancel_end_it_twice_in_either_order() {
        for entries in [
            [graceful("mcc-1"), cancel("mcc-1")],
            [cancel("mcc-1"), graceful("mcc-1")],
        ] {
            let (t, g, checks) = outcomes(&entries, true);
            assert_eq!((t, g), (Outcome::Fail, Outcome::Pass), "{checks:?}");
            assert!(checks[0].detail.contains("twice"));
        }
        let (t, _, _) = outcomes(&[cancel("mcc-1"), cancel("mcc-1")], true);
        assert_eq!(t, Outcome::Fail);
    }

    #[test]
    fn an_error_answer_fails_the_graceful_closure_only() {
        let error = from_server(json!({"jsonrpc": "2.0", "id": "mcc-1",
            "error": {"code": -32603, "message": "shutting down"}}));
        let (t, g, _) = outcomes(&[error], true);
        assert_eq!((t, g), (Outcome::Pass, Outcome::Fail));
    }

    #[test]
    fn a_result_without_the_completion_shape_fails_the_graceful_closure() {
        for result in [json!({}), json!({"resultType": "complete"})] {
            let e = from_server(json!({"jsonrpc": "2.0", "id": "mcc-1", "result": result}));
            let (t, g, _) = outcomes(&[e], true);
            assert_eq!((t, g), (Outcome::Pass, Outcome::Fail), "{result}");
        }
    }

    #[test]
    fn neither_is_a_transport_close_or_no_teardown_never_a_failure() {
        for ended in [true, false] {
            let others = [cancel("mcc-9"), graceful("mcc-9")];
            let (t, g, checks) = outcomes(&others, ended);
            assert_eq!((t, g), (Outcome::Skip, Outcome::Skip));
            let expected = if ended {
                "transport close"
            } else {
                "still open"
            };
            assert!(checks[0].detail.contains(expected), "{checks:?}");
        }
    }

    #[test]
    fn a_cancel_for_a_listen_sent_is_no_stray() {
        let listen = |id: &str| Entry {
            at: Instant::now(),
            dir: Dir::Out,
            msg: json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen"}),
        };
        // mcc-2 refused, mcc-3 never acknowledged: both were listens.
        let entries = [
            listen("mcc-2"),
            listen("mcc-3"),
            cancel("mcc-3"),
            cancel("mcc-4"),
        ];
        let found = strays(&entries);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].msg["params"]["requestId"], "mcc-4");
    }

    #[test]
    fn filters_follow_the_capabilities() {
        assert_eq!(filters(&json!({})), [json!({"toolsListChanged": true})]);
        let caps = json!({"prompts": {"listChanged": true}, "tools": {"listChanged": true},
            "extensions": {mcp::TASKS: {}}});
        assert_eq!(
            filters(&caps),
            [
                json!({"toolsListChanged": true}),
                json!({"promptsListChanged": true}),
                json!({"taskIds": []}),
            ]
        );
    }
}
