//! `http.session-cancel`'s evidence: in a 2025 session the cancel is a
//! POSTed `notifications/cancelled`, and closing the response stream is no
//! cancel (2025-11-25 transports § Sending Messages to the Server: a
//! disconnection SHOULD NOT be taken as one). So the checker keeps the
//! call's stream open, POSTs the cancel in the session beside it, and reads
//! what the server still sends on the stream: progress, or the response.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::report::{rules, short, Check, Evidence};

/// The 2025 session a raw request joins.
#[derive(Clone, Debug)]
pub(crate) struct Session2025 {
    /// The endpoint.
    pub(crate) uri: Uri,
    /// The negotiated protocol version (`MCP-Protocol-Version`).
    pub(crate) version: String,
    /// The session id the server assigned, if any (`Mcp-Session-Id`).
    pub(crate) id: Option<String>,
}

/// What the stream of a call cancelled by a POSTed notification carried.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    /// When the cancel was POSTed (`None`: the call ended first, or the POST failed).
    pub(crate) cancelled: Option<Instant>,
    /// Why no cancel was sent, when none was.
    pub(crate) not_cancelled: Option<String>,
    /// The progress notifications on the stream, with when they came.
    pub(crate) progress: Vec<Instant>,
    /// The response, with when it came.
    pub(crate) response: Option<(Instant, Value)>,
}

impl Session2025 {
    fn post(&self, body: &Value) -> Request<Full<Bytes>> {
        let mut req = Request::post(self.uri.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", self.version.as_str());
        if let Some(id) = &self.id {
            req = req.header("mcp-session-id", id.as_str());
        }
        req.body(Full::new(Bytes::from(body.to_string())))
            .unwrap_or_default()
    }

    /// Calls `params` (a `tools/call`'s, with a progress token), POSTs
    /// `notifications/cancelled` for it after `cancel_at` while its stream
    /// stays open, and reads the stream for `watch` after the cancel (or
    /// until it ends).
    pub(crate) async fn cancel_and_watch(
        &self,
        params: Value,
        cancel_at: Duration,
        watch: Duration,
        bound: Duration,
    ) -> Watched {
        let mut params = params;
        params["_meta"] = json!({"progressToken": "mcc-session-cancel"});
        let id = "mcc-session-cancel";
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut seen = Watched::default();
        let start = Instant::now();
        let mut cancel_at = Some(start + cancel_at);
        let mut until = start + bound;
        let response = tokio::time::timeout(bound, client.request(self.post(&call))).await;
        let mut body = match response {
            Ok(Ok(r)) => r.into_body(),
            Ok(Err(e)) => {
                seen.not_cancelled = Some(format!("the call failed: {e}"));
                return seen;
            }
            Err(_) => {
                seen.not_cancelled = Some(format!("no response head within {bound:?}"));
                return seen;
            }
        };
        let mut text = String::new();
        loop {
            let wake = cancel_at.map_or(until, |c| c.min(until));
            match tokio::time::timeout_at(wake, body.frame()).await {
                Err(_) if cancel_at.is_some() => {
                    cancel_at = None;
                    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": crate::mcp::REASON}});
                    let posted =
                        tokio::time::timeout(bound, client.request(self.post(&cancel))).await;
                    match posted {
                        Ok(Ok(r)) if r.status().is_success() => {
                            let now = Instant::now();
                            seen.cancelled = Some(now);
                            until = now + watch;
                        }
                        Ok(Ok(r)) => {
                            seen.not_cancelled =
                                Some(format!("the cancel's POST got {}", r.status()));
                            return seen;
                        }
                        Ok(Err(e)) => {
                            seen.not_cancelled = Some(format!("the cancel's POST failed: {e}"));
                            return seen;
                        }
                        Err(_) => {
                            seen.not_cancelled =
                                Some(format!("no answer to the cancel's POST within {bound:?}"));
                            return seen;
                        }
                    }
                }
                Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(frame))) => {
                    if let Some(d) = frame.data_ref() {
                        // SSE lines may end in CRLF (sse-starlette's default).
                        text.push_str(&String::from_utf8_lossy(d).replace("\r\n", "\n"));
                    }
                    let now = Instant::now();
                    for msg in take_messages(&mut text) {
                        if msg.get("id").is_some_and(|i| i == id) {
                            seen.response = Some((now, msg));
                        } else if msg["method"] == "notifications/progress" {
                            seen.progress.push(now);
                        }
                    }
                    if seen.response.is_some() {
                        break;
                    }
                }
            }
        }
        // A whole JSON body (no stream) is one message, whole at its end.
        if let Ok(msg) = serde_json::from_str::<Value>(text.trim()) {
            if msg.get("id").is_some_and(|i| i == id) {
                seen.response = Some((Instant::now(), msg));
            }
        }
        if seen.cancelled.is_none() && seen.not_cancelled.is_none() {
            seen.not_cancelled = Some(match &seen.response {
                Some((_, v)) => {
                    format!("it answered before the cancel: {}", crate::report::short(v))
                }
                None => "its stream ended before the cancel".into(),
            });
        }
        seen
    }
}

/// How a watched call is judged: when its cancel went, the race window,
/// how long the stream was watched, and whether that covered the
/// operation's own end.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Judging {
    /// When the cancel was POSTed.
    pub(crate) cancelled: Instant,
    /// `--race`.
    pub(crate) race: Duration,
    /// How long the stream was watched after the cancel.
    pub(crate) watch: Duration,
    /// Whether that was past the operation's own end.
    pub(crate) covered: bool,
}

impl Judging {
    /// `http.session-cancel` for what `seen` shows, and whether the
    /// session still answered after (`alive`): an error answer, a result or
    /// progress later than the race window fail the 2025 pages' SHOULDs; a
    /// session that stopped answering fails the races MUST.
    pub(crate) fn judge(&self, seen: &Watched, alive: Result<(), String>) -> Check {
        let (id, rule) = ("http.session-cancel", rules::SESSION_CANCEL);
        let cancelled = self.cancelled;
        let late = |at: Instant| at > cancelled && at - cancelled > self.race;
        let progress: Vec<Duration> = seen
            .progress
            .iter()
            .filter(|&&at| late(at))
            .map(|&at| at - cancelled)
            .collect();
        let before = seen.progress.len() - progress.len();
        let watch = self.watch;
        match (&seen.response, progress.last(), alive) {
            (_, _, Err(e)) => Check::fail(id, rules::RACES, format!("after the cancel: {e}")),
            (Some((at, msg)), _, Ok(())) if msg.get("error").is_some() => Check::fail(
                id,
                rule,
                format!(
                    "answered the cancelled request with an error {:.0?} after the POSTed cancel: {}",
                    at.saturating_duration_since(cancelled),
                    short(msg)
                ),
            ),
            (Some((at, msg)), _, Ok(())) if late(*at) => Check::fail(
                id,
                rule,
                format!(
                    "answered {:.0?} after the POSTed cancel{}: {}",
                    *at - cancelled,
                    if progress.is_empty() {
                        String::new()
                    } else {
                        format!(", after {} progress notifications", progress.len())
                    },
                    short(msg)
                ),
            ),
            (_, Some(last), Ok(())) => Check::fail(
                id,
                rule,
                format!(
                    "{} progress notifications after the POSTed cancel, the last {last:.0?} after it: the work runs on",
                    progress.len()
                ),
            ),
            (Some((at, _)), None, Ok(())) => Check::pass(
                id,
                rule,
                Evidence::Weak,
                format!(
                    "a result crossed the cancel ({:.0?} after it: the race the spec allows)",
                    at.saturating_duration_since(cancelled)
                ),
            ),
            (None, None, Ok(())) => Check::pass(
                id,
                rule,
                if self.covered && before > 0 {
                    Evidence::Strong
                } else {
                    Evidence::Weak
                },
                format!(
                    "no response and no progress in {watch:.1?} after the POSTed cancel ({before} progress before it{}); the session still answers",
                    if self.covered {
                        ", past the operation's own end"
                    } else {
                        "; the operation's length is unknown"
                    }
                ),
            ),
        }
    }
}

/// The whole SSE events at the front of `text` (removed from it), as the
/// JSON messages of their `data:` lines.
fn take_messages(text: &mut String) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(end) = text.find("\n\n") {
        let event: String = text.drain(..end + 2).collect();
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        if let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    /// What a call cancelled at `t0` showed: progress `ms` after it, and a
    /// response (`msg`) `at` ms after it.
    fn seen(t0: Instant, progress: &[u64], response: Option<(u64, Value)>) -> Watched {
        let after = |ms: u64| t0 + Duration::from_millis(ms);
        Watched {
            cancelled: Some(t0),
            not_cancelled: None,
            progress: progress.iter().map(|&ms| after(ms)).collect(),
            response: response.map(|(ms, v)| (after(ms), v)),
        }
    }

    #[test]
    fn the_2025_pages_judge_what_the_open_stream_carried() {
        let t0 = Instant::now();
        let how = Judging {
            cancelled: t0,
            race: Duration::from_millis(100),
            watch: Duration::from_secs(2),
            covered: true,
        };
        let result = json!({"jsonrpc": "2.0", "id": "x", "result": {}});
        let error = json!({"jsonrpc": "2.0", "id": "x", "error": {"code": -32800, "message": "Request cancelled"}});
        let judged = |s: Watched| how.judge(&s, Ok(()));
        // Nothing after the cancel (progress only before it): a pass.
        let quiet = Watched {
            progress: vec![t0 - Duration::from_millis(50)],
            ..seen(t0, &[], None)
        };
        let c = judged(quiet);
        assert_eq!((c.outcome, c.evidence), (Outcome::Pass, Evidence::Strong));
        // Progress, or a result, after the race window: the work ran on.
        assert_eq!(judged(seen(t0, &[300, 600], None)).outcome, Outcome::Fail);
        assert_eq!(
            judged(seen(t0, &[], Some((900, result.clone())))).outcome,
            Outcome::Fail
        );
        // A result within the race window crossed the cancel.
        assert_eq!(
            judged(seen(t0, &[], Some((20, result)))).outcome,
            Outcome::Pass
        );
        // An error answer is a response, however soon.
        let c = judged(seen(t0, &[], Some((20, error))));
        assert_eq!(c.outcome, Outcome::Fail);
        assert!(c.detail.contains("with an error"), "{}", c.detail);
        assert_eq!(c.rule.level, crate::report::Level::Should);
        // A session that no longer answers fails the races MUST.
        let c = how.judge(&seen(t0, &[], None), Err("gone".into()));
        assert_eq!(
            (c.outcome, c.rule.level),
            (Outcome::Fail, crate::report::Level::Must)
        );
    }

    #[test]
    fn whole_events_only() {
        let mut text = String::from(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n: ping\n\nid: 3\ndata: {\"jsonrpc\"",
        );
        let got = take_messages(&mut text);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["method"], "notifications/progress");
        assert_eq!(text, "id: 3\ndata: {\"jsonrpc\"");
        text.push_str(":\"2.0\",\"id\":\"x\",\"result\":{}}\n\n");
        assert_eq!(take_messages(&mut text)[0]["id"], "x");
    }
}
