//! The wire budget: a request's remaining time, written by a client
//! transport into its `_meta` under a configured key and honoured by a
//! server transport configured with that key (see the
//! [module docs](super#on-the-wire-an-opt-in-budget-in-_meta)).
// Only the transports read and write a budget; without one, all but the
// public error type is unused.
#![cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::jsonrpc::RequestId;
use crate::request::RequestView;
use crate::state::Stamp;
use crate::timeout::DeadlineCap;

/// Whether `key` is under a `_meta` prefix MCP reserves: one whose second
/// label is `modelcontextprotocol` or `mcp` (`io.modelcontextprotocol/`,
/// `dev.mcp/`, …). A budget key is not: MCP standardizes no budget key.
fn reserved(key: &str) -> bool {
    key.split_once('/').is_some_and(|(prefix, _)| {
        matches!(
            prefix.split('.').nth(1),
            Some("modelcontextprotocol" | "mcp")
        )
    })
}

/// The largest budget honoured, in milliseconds (about 30 years): a larger
/// one is clamped to it, and then to the server's policy, like any other.
pub(crate) const MAX_BUDGET_MS: u64 = 1 << 50;

/// A budget key a transport's `budget_key` setting refused: empty, or under
/// a `_meta` prefix MCP reserves (MCP defines no budget key, so a key of
/// its namespace would claim a meaning the protocol does not give it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidBudgetKey {
    key: String,
}

impl InvalidBudgetKey {
    /// The key that was refused.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl std::fmt::Display for InvalidBudgetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            f.write_str("a budget key must not be empty")
        } else {
            write!(
                f,
                "budget key {:?} is under a _meta prefix MCP reserves; \
                 MCP defines no budget key: choose one under your own reverse-DNS prefix",
                self.key
            )
        }
    }
}

impl std::error::Error for InvalidBudgetKey {}

/// The `_meta` key a transport writes or reads the budget under, checked
/// once when configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BudgetKey(Arc<str>);

impl BudgetKey {
    /// Refuses a `key` that is empty or under a prefix MCP reserves
    /// (`io.modelcontextprotocol/`, any whose second label is
    /// `modelcontextprotocol` or `mcp`); MCP defines no budget key.
    pub(crate) fn new(key: impl Into<String>) -> Result<Self, InvalidBudgetKey> {
        let key = key.into();
        if key.is_empty() || reserved(&key) {
            return Err(InvalidBudgetKey { key });
        }
        Ok(Self(key.into()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The deadline a client transport reads for the budget it writes: the
/// earliest the request's state knows (a `TimeoutLayer` above that offered
/// it, an inherited cap, a progress layer's hard maximum) or a
/// [`DeadlineCap`] in its extensions.
pub(crate) fn request_deadline<R: RequestView>(req: &R) -> Option<Instant> {
    let state = req
        .cancellation()
        .and_then(|c| c.request_state().deadlines().offered())
        .map(Stamp::at);
    let max = req.progress_tap().and_then(|t| t.max_deadline());
    let cap = req
        .extensions()
        .get::<DeadlineCap>()
        .and_then(DeadlineCap::deadline);
    [state, max, cap].into_iter().flatten().min()
}

/// The budget of a request due at `deadline`, in whole milliseconds
/// (rounded down: the peer never gets more time than is left; 0 once due).
pub(crate) fn budget_ms(deadline: Instant, now: Instant) -> u64 {
    u64::try_from(deadline.saturating_duration_since(now).as_millis())
        .unwrap_or(u64::MAX)
        .min(MAX_BUDGET_MS)
}

/// A request's budget as a client transport writes it: its key, and the
/// deadline the time left is counted to. Taken from the request when its
/// call starts; the milliseconds are counted when the request's bytes are
/// made ([`WireRequest::encode`]), so a request that waited — behind a
/// handshake, in a write queue, for another attempt — never carries more
/// time than is left.
#[derive(Clone, Debug)]
pub(crate) struct WireBudget {
    key: BudgetKey,
    deadline: Instant,
}

impl WireBudget {
    /// The budget of `req` under `key`, when there is a key and the request
    /// has a [deadline](request_deadline).
    pub(crate) fn of<R: RequestView>(req: &R, key: Option<&BudgetKey>) -> Option<Self> {
        Some(Self {
            key: key?.clone(),
            deadline: request_deadline(req)?,
        })
    }

    /// `params` with `_meta[key]` set to the milliseconds left now; `None`
    /// when they are written unchanged: params that are not an object (an
    /// array), or whose `_meta` is not one — the budget is a hint, never a
    /// reason to fail a call.
    fn write(&self, params: Option<&RawValue>) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        let mut obj: serde_json::Map<String, serde_json::Value> = match params {
            None => serde_json::Map::new(),
            Some(p) => match serde_json::from_str(p.get()) {
                Ok(obj) => obj,
                Err(_) => {
                    tracing::debug!("budget not sent: the params are not an object");
                    return Ok(None);
                }
            },
        };
        let meta = obj
            .entry("_meta")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        let serde_json::Value::Object(meta) = meta else {
            tracing::debug!("budget not sent: the params' `_meta` is not an object");
            return Ok(None);
        };
        let budget = budget_ms(self.deadline, Instant::now());
        meta.insert(self.key.as_str().to_owned(), budget.into());
        serde_json::value::to_raw_value(&obj).map(Some)
    }
}

/// A request as a client transport writes it: its id, method and params,
/// and its [budget](WireBudget), written into the params' `_meta` each time
/// the request is [encoded](Self::encode) — at the moment it goes on the
/// wire, not when its call started.
#[derive(Clone, Debug)]
pub(crate) struct WireRequest {
    id: RequestId,
    method: String,
    params: Option<Box<RawValue>>,
    budget: Option<WireBudget>,
}

impl WireRequest {
    pub(crate) fn new(
        id: RequestId,
        method: &str,
        params: Option<Box<RawValue>>,
        budget: Option<WireBudget>,
    ) -> Self {
        Self {
            id,
            method: method.to_owned(),
            params,
            budget,
        }
    }

    /// The JSON-RPC request, its budget (if any) counted now.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        let stamped = match &self.budget {
            Some(budget) => budget.write(self.params.as_deref())?,
            None => None,
        };
        let params = stamped.as_deref().or(self.params.as_deref());
        crate::jsonrpc::encode_request(&self.id, &self.method, params)
    }
}

/// Reads a budget: a JSON integer of milliseconds, at least 0. Anything
/// else (a string, a fraction, a negative number, an object) is ignored
/// (`None`, with a debug event); a huge one is clamped to
/// [`MAX_BUDGET_MS`].
pub(crate) fn parse_budget(raw: &RawValue) -> Option<Duration> {
    let text = raw.get();
    match serde_json::from_str::<u64>(text) {
        Ok(ms) => Some(Duration::from_millis(ms.min(MAX_BUDGET_MS))),
        // An integer too large for a `u64` is still a (huge) budget.
        Err(_) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            Some(Duration::from_millis(MAX_BUDGET_MS))
        }
        Err(_) => {
            tracing::debug!(
                budget = %crate::sanitize::for_log(text),
                "request budget ignored: not a non-negative integer of milliseconds"
            );
            None
        }
    }
}

/// Honours the budget a server transport read with the request (`raw`,
/// from its `_meta`): its deadline, counted from the request's start, is
/// inherited by the request's state, so that its timer layers enforce
/// `min(own policy, budget)` and its handler sees it (a stack without
/// timer layers enforces no deadline, this one included).
pub(crate) fn inherit_budget<R: RequestView>(req: &mut R, raw: Option<&RawValue>) {
    let Some(budget) = raw.and_then(parse_budget) else {
        return;
    };
    let started = req.started_at();
    let (Some(deadline), Some(c)) = (started.checked_add(budget), req.cancellation()) else {
        return;
    };
    c.request_state().deadlines().inherit(deadline);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<Duration> {
        parse_budget(&RawValue::from_string(s.into()).unwrap())
    }

    #[test]
    fn only_non_negative_integers_are_budgets() {
        assert_eq!(parse("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        for bad in [
            "\"1500\"",
            "-1",
            "1.5",
            "1e3",
            "{\"ms\":1}",
            "[1]",
            "null",
            "true",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let max = Some(Duration::from_millis(MAX_BUDGET_MS));
        assert_eq!(parse("18446744073709551615"), max);
        assert_eq!(parse("99999999999999999999999999"), max);
    }

    #[test]
    fn an_empty_or_reserved_key_is_refused_with_an_error_that_names_it() {
        let err = BudgetKey::new("io.modelcontextprotocol/deadline").unwrap_err();
        assert_eq!(err.key(), "io.modelcontextprotocol/deadline");
        assert!(err.to_string().contains("reserves"), "{err}");
        let err = BudgetKey::new("").unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        assert_eq!(
            BudgetKey::new("com.example/budgetMs").unwrap().as_str(),
            "com.example/budgetMs"
        );
    }

    #[test]
    fn reserved_prefixes_are_those_of_the_spec() {
        for key in ["io.modelcontextprotocol/x", "dev.mcp/x", "com.mcp.tools/x"] {
            assert!(reserved(key), "{key}");
        }
        for key in [
            "com.example.mcp/budgetMs",
            "budgetMs",
            "io.github.tower-mcp-cancel/budgetMs",
        ] {
            assert!(!reserved(key), "{key}");
        }
    }

    #[test]
    fn budgets_round_down() {
        let now = Instant::now();
        assert_eq!(budget_ms(now + Duration::from_micros(1999), now), 1);
        assert_eq!(budget_ms(now, now + Duration::from_secs(1)), 0);
    }
}
