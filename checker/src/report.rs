//! The checks' results: what each one found, the table a person reads, the
//! JSON a machine reads, and the exit status.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// How strongly the spec asks for what a check looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// MUST / MUST NOT.
    Must,
    /// SHOULD / SHOULD NOT.
    Should,
    /// MAY: what a server is allowed to do; never changes the exit status.
    May,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::May => "MAY",
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The server did what the rule asks, as far as the check could see.
    Pass,
    /// The server broke the rule.
    Fail,
    /// The check could not run (and says why in its detail).
    Skip,
}

impl Outcome {
    fn as_str(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
        }
    }
}

/// How strong the evidence behind an outcome is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// Observed directly where the rule applies (the wire, the process's CPU time).
    Strong,
    /// Seen indirectly, or in a window that may not cover every case.
    Weak,
    /// Nothing was observed (a skipped check).
    None,
}

impl Evidence {
    fn as_str(self) -> &'static str {
        match self {
            Evidence::Strong => "strong",
            Evidence::Weak => "weak",
            Evidence::None => "none",
        }
    }
}

/// A rule of the spec, as the checks cite it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// A short stable name (several checks may test one rule).
    pub(crate) key: &'static str,
    /// Where the spec says it: `page § section`.
    pub(crate) cites: &'static str,
    /// Its level.
    pub(crate) level: Level,
}

/// The rules the checks cite, each in one place.
pub(crate) mod rules {
    use super::{Level, Rule};

    /// No response, nor any other message, for a request after its cancel.
    pub(crate) const NO_RESPONSE: Rule = Rule {
        key: "no-response-after-cancel",
        cites: "transports-stdio § Cancellation (MUST NOT send any further messages); cancellation § Behavior Requirements",
        level: Level::Must,
    };
    /// No progress for a request after its cancel.
    pub(crate) const NO_PROGRESS: Rule = Rule {
        key: "no-progress-after-cancel",
        cites: "transports-stdio § Cancellation (MUST NOT send any further messages)",
        level: Level::Must,
    };
    /// The work of a cancelled request stops.
    pub(crate) const WORK_STOPS: Rule = Rule {
        key: "work-stops-on-cancel",
        cites: "cancellation § Behavior Requirements (SHOULD stop processing); transports-stdio § Cancellation",
        level: Level::Should,
    };
    /// The resources of cancelled requests are freed.
    pub(crate) const RESOURCES_FREED: Rule = Rule {
        key: "resources-freed",
        cites: "cancellation § Behavior Requirements (SHOULD free associated resources)",
        level: Level::Should,
    };
    /// A cancel for an unknown request or a malformed one is ignored.
    pub(crate) const INVALID_IGNORED: Rule = Rule {
        key: "invalid-cancel-ignored",
        cites: "cancellation § Error Handling (SHOULD be ignored)",
        level: Level::Should,
    };
    /// A cancel that crosses the response, or follows its request at once, is handled.
    pub(crate) const RACES: Rule = Rule {
        key: "races-handled",
        cites:
            "cancellation § Timing Considerations (MUST handle these race conditions gracefully)",
        level: Level::Must,
    };
    /// Progress names a token of a request in flight.
    pub(crate) const PROGRESS_TOKEN: Rule = Rule {
        key: "progress-token",
        cites: "progress § Behavior Requirements (MUST only reference tokens provided in an active request)",
        level: Level::Must,
    };
    /// Progress values increase.
    pub(crate) const PROGRESS_INCREASES: Rule = Rule {
        key: "progress-increases",
        cites: "progress § Progress Flow (the progress value MUST increase)",
        level: Level::Must,
    };
    /// No progress after the response.
    pub(crate) const PROGRESS_STOPS: Rule = Rule {
        key: "progress-stops-at-response",
        cites: "progress § Implementation Notes (MUST stop after completion)",
        level: Level::Must,
    };
    /// A server sends `notifications/cancelled` only to end a `subscriptions/listen`.
    pub(crate) const SERVER_CANCEL: Rule = Rule {
        key: "server-cancel-listen-only",
        cites: "cancellation § Behavior Requirements (server-sent cancellations MUST reference a subscriptions/listen)",
        level: Level::Must,
    };
    /// A server that tears down a `subscriptions/listen` stream says so,
    /// once, for that listen.
    pub(crate) const LISTEN_TEARDOWN: Rule = Rule {
        key: "server-cancel-listen-teardown",
        cites: "cancellation (intro: MUST send notifications/cancelled referencing the subscriptions/listen id when it tears down that stream), § Behavior Requirements (a cancel only for a request still in progress); subscriptions § Cancellation",
        level: Level::Must,
    };
    /// A server that ends a listen on its own answers it with the completion result.
    pub(crate) const LISTEN_GRACEFUL: Rule = Rule {
        key: "listen-graceful-closure",
        cites: "subscriptions § Graceful Closure (SHOULD respond to the listen with a completion result: resultType \"complete\", _meta io.modelcontextprotocol/subscriptionId)",
        level: Level::Should,
    };
    /// Over Streamable HTTP, a closed response stream cancels its request.
    pub(crate) const STREAM_CLOSE: Rule = Rule {
        key: "stream-close-cancels",
        cites: "transports-streamable-http § Cancellation (MUST treat a closed stream as cancellation); cancellation § Transport-Specific Cancellation",
        level: Level::Must,
    };
    /// A 2025 session's POSTed `notifications/cancelled` is taken.
    pub(crate) const SESSION_CANCEL: Rule = Rule {
        key: "session-cancel",
        cites: "2025-11-25 cancellation § Behavior Requirements (SHOULD stop processing); transports-streamable-http § Backward Compatibility",
        level: Level::Should,
    };
    /// Headers that contradict the body are refused with 400 and -32020.
    pub(crate) const HEADER_MISMATCH: Rule = Rule {
        key: "header-mismatch-refused",
        cites: "transports-streamable-http § Server Validation (MUST return 400 with -32020)",
        level: Level::Must,
    };
}

/// The same checks judged by the 2025 pages (2025-11-25, and 2025-06-18,
/// which says the same for each of them): a session that negotiated a 2025
/// revision owes what that revision's pages ask, at their level.
pub(crate) mod rules_2025 {
    use super::{Level, Rule};

    /// A response after the cancel: a SHOULD in 2025 (stdio's MUST NOT is 2026-07-28's).
    pub(crate) const NO_RESPONSE: Rule = Rule {
        key: "no-response-after-cancel",
        cites: "2025-11-25 cancellation § Behavior Requirements (receivers SHOULD not send a response for the cancelled request; 2025-06-18 the same)",
        level: Level::Should,
    };
    /// Progress after the cancel: allowed for an operation still in
    /// progress, so what it shows is the work running on (a SHOULD).
    pub(crate) const NO_PROGRESS: Rule = Rule {
        key: "progress-stops-on-cancel",
        cites: "2025-11-25 cancellation § Behavior Requirements (SHOULD stop processing the cancelled request); progress § Behavior Requirements (progress only for an in-progress operation: progress after the cancel is allowed, and shows the work runs on)",
        level: Level::Should,
    };
    /// The work stops.
    pub(crate) const WORK_STOPS: Rule = Rule {
        key: "work-stops-on-cancel",
        cites: "2025-11-25 cancellation § Behavior Requirements (SHOULD stop processing)",
        level: Level::Should,
    };
    /// Resources are freed.
    pub(crate) const RESOURCES_FREED: Rule = Rule {
        key: "resources-freed",
        cites: "2025-11-25 cancellation § Behavior Requirements (SHOULD free associated resources)",
        level: Level::Should,
    };
    /// Invalid cancels are ignored.
    pub(crate) const INVALID_IGNORED: Rule = Rule {
        key: "invalid-cancel-ignored",
        cites: "2025-11-25 cancellation § Error Handling (SHOULD be ignored)",
        level: Level::Should,
    };
    /// Races are handled.
    pub(crate) const RACES: Rule = Rule {
        key: "races-handled",
        cites: "2025-11-25 cancellation § Timing Considerations (MUST handle these race conditions gracefully)",
        level: Level::Must,
    };
    /// A server's cancels reference its own requests in progress.
    pub(crate) const SERVER_CANCEL: Rule = Rule {
        key: "cancel-same-direction",
        cites: "2025-11-25 cancellation § Behavior Requirements (cancellation notifications MUST only reference requests previously issued in the same direction, believed still in progress)",
        level: Level::Must,
    };
    /// Progress names a token of an active request.
    pub(crate) const PROGRESS_TOKEN: Rule = Rule {
        key: "progress-token",
        cites: "2025-11-25 progress § Behavior Requirements (MUST only reference tokens provided in an active request)",
        level: Level::Must,
    };
    /// Progress values increase.
    pub(crate) const PROGRESS_INCREASES: Rule = Rule {
        key: "progress-increases",
        cites: "2025-11-25 progress § Progress Flow (the progress value MUST increase)",
        level: Level::Must,
    };
    /// No progress after completion.
    pub(crate) const PROGRESS_STOPS: Rule = Rule {
        key: "progress-stops-at-response",
        cites: "2025-11-25 progress § Implementation Notes (MUST stop after completion)",
        level: Level::Must,
    };
}

impl Rule {
    /// This rule as the pages of the revision `era` negotiated state it:
    /// the 2026-07-28 rules (the constants of [`rules`]) for a modern
    /// session, their 2025 counterparts ([`rules_2025`]) for a 2025 one.
    /// A rule with no 2025 counterpart (the tasks extension's, HTTP's
    /// stream close, the listen's) is checked only in a 2026 session, and
    /// stays as it is.
    pub(crate) fn judged(self, era: crate::mcp::Era) -> Rule {
        if era == crate::mcp::Era::Modern {
            return self;
        }
        let pairs = [
            (rules::NO_RESPONSE, rules_2025::NO_RESPONSE),
            (rules::NO_PROGRESS, rules_2025::NO_PROGRESS),
            (rules::WORK_STOPS, rules_2025::WORK_STOPS),
            (rules::RESOURCES_FREED, rules_2025::RESOURCES_FREED),
            (rules::INVALID_IGNORED, rules_2025::INVALID_IGNORED),
            (rules::RACES, rules_2025::RACES),
            (rules::SERVER_CANCEL, rules_2025::SERVER_CANCEL),
            (rules::PROGRESS_TOKEN, rules_2025::PROGRESS_TOKEN),
            (rules::PROGRESS_INCREASES, rules_2025::PROGRESS_INCREASES),
            (rules::PROGRESS_STOPS, rules_2025::PROGRESS_STOPS),
        ];
        pairs
            .iter()
            .find(|(modern, _)| *modern == self)
            .map_or(self, |(_, legacy)| *legacy)
    }
}

/// The rules of the tasks extension (tasks.md) the task checks cite.
pub(crate) mod task_rules {
    use super::{Level, Rule};

    /// `tasks/*` from a request that did not declare the extension: -32021.
    pub(crate) const UNDECLARED: Rule = Rule {
        key: "tasks-need-extension",
        cites: "tasks § Error Handling, Protocol Errors (MUST return -32021 to non-declaring clients issuing tasks/get, tasks/update, tasks/cancel)",
        level: Level::Must,
    };
    /// `tasks/get` of an unknown task: -32602.
    pub(crate) const UNKNOWN: Rule = Rule {
        key: "task-unknown-id",
        cites: "tasks § Error Handling, Protocol Errors (MUST return -32602 for tasks/get of a nonexistent taskId)",
        level: Level::Must,
    };
    /// A `CreateTaskResult` only once a `tasks/get` finds the task.
    pub(crate) const CREATED: Rule = Rule {
        key: "task-durably-created",
        cites: "tasks § Task Creation (MUST NOT return CreateTaskResult until a tasks/get would resolve); § Polymorphic Results (resultType MUST be \"task\"); § Task Polling (tasks/get resultType MUST be \"complete\")",
        level: Level::Must,
    };
    /// `tasks/cancel` is acknowledged with an empty result.
    pub(crate) const CANCEL_ACK: Rule = Rule {
        key: "task-cancel-ack",
        cites: "tasks § Task Cancellation, Response (MUST acknowledge with an empty result, resultType \"complete\")",
        level: Level::Must,
    };
    /// A cancelled task's work stops: it reaches a terminal status.
    pub(crate) const CANCEL_STOPS: Rule = Rule {
        key: "task-cancel-stops",
        cites: "tasks § Task Cancellation (cooperative, eventually consistent); cancellation § Behavior Requirements (SHOULD stop processing)",
        level: Level::Should,
    };
    /// A terminal status never changes.
    pub(crate) const TERMINAL: Rule = Rule {
        key: "task-terminal-final",
        cites: "tasks § Task Status (the state diagram: no transition out of completed, failed, cancelled)",
        level: Level::Must,
    };
    /// Over Streamable HTTP, `tasks/*` need `Mcp-Name` = `taskId`.
    pub(crate) const NAME_HEADER: Rule = Rule {
        key: "task-name-header",
        cites: "tasks § Streamable HTTP: Routing Headers (Mcp-Name = params.taskId); transports-streamable-http § Server Validation (MUST return 400 with -32020)",
        level: Level::Must,
    };
    /// A task past its TTL is no longer working.
    pub(crate) const TTL: Rule = Rule {
        key: "task-ttl",
        cites: "tasks § Task Polling, Response (servers MAY mark a task failed after createdAt + ttlMs, and delete it)",
        level: Level::May,
    };
}

/// A value, shortened for a report line.
pub(crate) fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 120 {
        let mut cut = 117;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// One check's result.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    /// Its id (`cancel.no-response`).
    pub(crate) id: String,
    /// The rule it tests.
    pub(crate) rule: Rule,
    /// What it found.
    pub(crate) outcome: Outcome,
    /// How strong that is.
    pub(crate) evidence: Evidence,
    /// What was seen, in a sentence.
    pub(crate) detail: String,
}

impl Check {
    /// A passed check.
    pub(crate) fn pass(
        id: &str,
        rule: Rule,
        evidence: Evidence,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(id, rule, Outcome::Pass, evidence, detail)
    }

    /// A failed check.
    pub(crate) fn fail(id: &str, rule: Rule, detail: impl Into<String>) -> Self {
        Self::new(id, rule, Outcome::Fail, Evidence::Strong, detail)
    }

    /// A check that could not run, and why.
    pub(crate) fn skip(id: &str, rule: Rule, why: impl Into<String>) -> Self {
        Self::new(id, rule, Outcome::Skip, Evidence::None, why)
    }

    fn new(
        id: &str,
        rule: Rule,
        outcome: Outcome,
        evidence: Evidence,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            id: id.to_owned(),
            rule,
            outcome,
            evidence,
            detail: detail.into(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "rule": self.rule.key,
            "cites": self.rule.cites,
            "level": self.rule.level.as_str(),
            "outcome": self.outcome.as_str(),
            "evidence": self.evidence.as_str(),
            "detail": self.detail,
        })
    }
}

/// Why a run produced no report.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The command line names no server that can run (exit status 2).
    Usage(String),
    /// The server could not be talked to (exit status 1).
    Server(String),
}

impl From<String> for RunError {
    fn from(why: String) -> Self {
        RunError::Server(why)
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Usage(why) | RunError::Server(why) => f.write_str(why),
        }
    }
}

/// What the run found about the server, and its checks.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// The transport and era, as detected (`stdio, 2026-07-28`).
    pub(crate) target: String,
    /// The checks, in the order they ran.
    pub(crate) checks: Vec<Check>,
}

impl Report {
    /// The exit status: 1 when a MUST failed (with `strict`, also a
    /// SHOULD; a MAY never), else 0.
    pub(crate) fn exit_code(&self, strict: bool) -> u8 {
        let counts = |level: Level| match level {
            Level::Must => true,
            Level::Should => strict,
            Level::May => false,
        };
        let failed = self
            .checks
            .iter()
            .any(|c| c.outcome == Outcome::Fail && counts(c.rule.level));
        u8::from(failed)
    }

    /// Each check's rule as the pages of the revision `era` state it
    /// ([`Rule::judged`]): its level, and what it cites.
    pub(crate) fn judge(&mut self, era: crate::mcp::Era) {
        for c in &mut self.checks {
            c.rule = c.rule.judged(era);
        }
    }

    /// The machine-readable report.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "target": self.target,
            "checks": self.checks.iter().map(Check::to_json).collect::<Vec<_>>(),
        })
    }

    /// The table a person reads; ANSI colours only when `colour`.
    pub(crate) fn table(&self, colour: bool) -> String {
        let paint = |outcome: &Outcome| {
            let word = match outcome {
                Outcome::Pass => "PASS",
                Outcome::Fail => "FAIL",
                Outcome::Skip => "SKIP",
            };
            if !colour {
                return word.to_owned();
            }
            let code = match outcome {
                Outcome::Pass => "32",
                Outcome::Fail => "31",
                Outcome::Skip => "33",
            };
            format!("\x1b[{code}m{word}\x1b[0m")
        };
        let width = self.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
        let mut out = format!("mcp-cancel-check: {}\n", self.target);
        for c in &self.checks {
            let _ = writeln!(
                out,
                "{}  {:<6}  {:<width$}  {:<6}  {}",
                paint(&c.outcome),
                c.rule.level.as_str(),
                c.id,
                c.evidence.as_str(),
                c.detail,
            );
            let _ = writeln!(out, "{:<w$}{}", "", c.rule.cites, w = 4 + 2 + 6 + 2);
        }
        let count = |o: Outcome| self.checks.iter().filter(|c| c.outcome == o).count();
        let _ = writeln!(
            out,
            "{} passed, {} failed, {} skipped",
            count(Outcome::Pass),
            count(Outcome::Fail),
            count(Outcome::Skip)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(level_failed: Option<Level>) -> Report {
        let mut r = Report {
            target: "stdio".into(),
            checks: vec![Check::pass("a", rules::RACES, Evidence::Strong, "ok")],
        };
        if let Some(level) = level_failed {
            let rule = if level == Level::Must {
                rules::NO_RESPONSE
            } else {
                rules::WORK_STOPS
            };
            r.checks.push(Check::fail("b", rule, "broke it"));
        }
        r.checks
            .push(Check::skip("c", rules::SERVER_CANCEL, "cannot"));
        r
    }

    #[test]
    fn exit_status_by_level_and_strictness() {
        assert_eq!(report(None).exit_code(false), 0);
        assert_eq!(report(None).exit_code(true), 0);
        assert_eq!(report(Some(Level::Must)).exit_code(false), 1);
        assert_eq!(report(Some(Level::Should)).exit_code(false), 0);
        assert_eq!(report(Some(Level::Should)).exit_code(true), 1);
    }

    #[test]
    fn a_failed_may_never_changes_the_exit_status() {
        let mut r = report(None);
        r.checks
            .push(Check::fail("t", task_rules::TTL, "still working"));
        assert_eq!(r.exit_code(false), 0);
        assert_eq!(r.exit_code(true), 0);
        assert_eq!(r.to_json()["checks"][2]["level"], "MAY");
    }

    #[test]
    fn json_carries_id_rule_level_outcome_evidence() {
        let v = report(Some(Level::Must)).to_json();
        let b = &v["checks"][1];
        assert_eq!(b["id"], "b");
        assert_eq!(b["rule"], "no-response-after-cancel");
        assert_eq!(b["level"], "MUST");
        assert_eq!(b["outcome"], "fail");
        assert_eq!(b["evidence"], "strong");
        assert_eq!(v["checks"][2]["outcome"], "skip");
    }

    #[test]
    fn a_2025_session_is_judged_by_the_2025_pages() {
        use crate::mcp::Era;
        let mut r = report(Some(Level::Must));
        r.judge(Era::Legacy);
        // stdio's MUST NOT (2026-07-28) is a SHOULD of 2025-11-25 cancellation.
        assert_eq!(r.checks[1].rule.level, Level::Should);
        assert!(r.checks[1].rule.cites.starts_with("2025-11-25"));
        assert_eq!(r.exit_code(false), 0);
        assert_eq!(r.exit_code(true), 1);
        assert_eq!(rules::NO_PROGRESS.judged(Era::Legacy).level, Level::Should);
        // What is a MUST in both stays one; the modern session keeps its rules.
        assert_eq!(rules::RACES.judged(Era::Legacy).level, Level::Must);
        assert_eq!(rules::PROGRESS_STOPS.judged(Era::Legacy).level, Level::Must);
        assert_eq!(rules::NO_RESPONSE.judged(Era::Modern), rules::NO_RESPONSE);
        // Judged twice is judged once.
        let twice = rules::NO_RESPONSE.judged(Era::Legacy).judged(Era::Legacy);
        assert_eq!(twice, rules_2025::NO_RESPONSE);
    }

    #[test]
    fn colour_only_when_asked() {
        let r = report(Some(Level::Must));
        assert!(!r.table(false).contains('\x1b'));
        assert!(r.table(true).contains("\x1b[31mFAIL"));
        assert!(r.table(false).contains("1 passed, 1 failed, 1 skipped"));
    }
}
