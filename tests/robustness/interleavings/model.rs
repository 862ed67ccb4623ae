//! The interleavings' model: the limits, ids and timings of a schedule, what
//! the model expects of a request and how an outcome is seen and compared
//! with it, and the operations of a schedule with their strategies, for (a)
//! the layers ([`LayerOp`]) and (b) the stdio transport ([`StdioOp`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::Value;
use tower::BoxError;
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::{Cancelled, Elapsed, Limit};

/// The default deadline of `TimeoutLayer`, and the per-request overrides a
/// schedule may pick (index 0 = the default).
pub(super) const TIMEOUT_MS: u64 = 1000;
pub(super) const TIMEOUT_CHOICES: [u64; 3] = [TIMEOUT_MS, 250, 450];
/// `ProgressResetLayer`: idle limit and hard maximum.
pub(super) const IDLE_MS: u64 = 300;
pub(super) const MAX_MS: u64 = 400;

/// Request ids a schedule draws from: `"1"` and `1` differ, `0` is an id.
pub(super) fn ids() -> [RequestId; 6] {
    [
        RequestId::from(0),
        RequestId::from(1),
        RequestId::from("1"),
        RequestId::from("a"),
        RequestId::from(2),
        RequestId::from(-7),
    ]
}

/// Ids that may be cancelled: the above, and some nobody ever sends.
pub(super) fn cancel_ids() -> [RequestId; 8] {
    let [a, b, c, d, e, f] = ids();
    [a, b, c, d, e, f, RequestId::from(99), RequestId::from("0")]
}

/// Lets every task that can run, run, without moving the clock: `rounds`
/// yields, fewer than `test_util::settle`'s in these hot loops whose tasks
/// need few.
pub(super) async fn settle(rounds: usize) {
    for _ in 0..rounds {
        tokio::task::yield_now().await;
    }
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// Milliseconds since the case started, on the paused clock.
pub(super) fn now_ms(t0: tokio::time::Instant) -> u64 {
    (tokio::time::Instant::now() - t0).as_millis() as u64
}

/// How a request ended, as observed.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Seen {
    /// A result (carrying the request's number).
    Response(u64),
    /// The handler's own error.
    HandlerError,
    /// A limit fired.
    Elapsed(Limit),
    /// Cancelled (no response is written).
    Cancelled,
    /// Refused before it ran (duplicate id).
    Refused,
    /// The connection closed under it (stdio client).
    Closed,
}

pub(super) fn classify(out: &Result<Value, BoxError>) -> Seen {
    match out {
        Ok(v) => Seen::Response(v["n"].as_u64().unwrap_or(u64::MAX)),
        Err(e) if e.is::<Elapsed>() => Seen::Elapsed(e.downcast_ref::<Elapsed>().unwrap().limit()),
        Err(e) if e.is::<Cancelled>() => Seen::Cancelled,
        Err(e) if e.is::<std::io::Error>() => Seen::Closed,
        Err(e) => match e.downcast_ref::<ErrorObject>() {
            Some(o) if o.code == ErrorObject::INVALID_REQUEST => Seen::Refused,
            Some(_) => Seen::HandlerError,
            None => panic!("unexpected error type: {e}"),
        },
    }
}

/// The limit that fires first for a request, given its deadlines, if any is
/// due by `now`; on a tie, every limit due at that instant is acceptable.
pub(super) fn due(
    now: u64,
    timeout_at: u64,
    idle_at: u64,
    max_at: u64,
) -> Option<(u64, Vec<Limit>)> {
    let first = timeout_at.min(idle_at).min(max_at);
    if first > now {
        return None;
    }
    let mut limits = Vec::new();
    if max_at == first {
        limits.push(Limit::Max);
    }
    if idle_at == first {
        limits.push(Limit::Idle);
    }
    if timeout_at == first {
        limits.push(Limit::Timeout);
    }
    Some((first, limits))
}

/// What the model expects of a request that ended.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Expect {
    Response,
    HandlerError,
    /// One of these limits (more than one on a tie).
    Elapsed(Vec<Limit>),
    /// Cancelled by the transport (peer cancel, close): nothing written.
    Cancelled,
    /// The response future was dropped (disconnect, or the client gave up).
    Dropped,
    Refused,
    Closed,
}

pub(super) fn matches(expect: &Expect, seen: Option<&Seen>, n: u64) -> bool {
    match (expect, seen) {
        (Expect::Response, Some(Seen::Response(m))) => *m == n,
        (Expect::HandlerError, Some(Seen::HandlerError)) => true,
        (Expect::Elapsed(ls), Some(Seen::Elapsed(l))) => ls.contains(l),
        (Expect::Cancelled, Some(Seen::Cancelled)) => true,
        (Expect::Dropped, None) => true,
        (Expect::Refused, Some(Seen::Refused)) => true,
        (Expect::Closed, Some(Seen::Closed)) => true,
        _ => false,
    }
}

#[derive(Clone, Debug)]
pub(super) enum LayerOp {
    /// A request with id `ids()[id]` and deadline `TIMEOUT_CHOICES[timeout]`.
    Request { id: usize, timeout: usize },
    /// The peer's `notifications/cancelled` for `cancel_ids()[id]`.
    Cancel { id: usize },
    /// The handler of request `slot` (modulo the requests so far) answers.
    Respond { slot: usize, ok: bool },
    /// The handler of request `slot` reports progress.
    Progress { slot: usize, increasing: bool },
    /// The paused clock moves on.
    Advance { ms: u64 },
    /// The response future of request `slot` is dropped (client went away).
    Disconnect { slot: usize },
    /// The transport closes: every in-flight request is cancelled.
    Close,
}

fn advance_ms() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![
        1u64, 50, 100, 150, 249, 250, 299, 300, 301, 450, 700, 1000,
    ])
}

pub(super) fn layer_op() -> impl Strategy<Value = LayerOp> {
    prop_oneof![
        6 => (0..ids().len(), 0..TIMEOUT_CHOICES.len())
            .prop_map(|(id, timeout)| LayerOp::Request { id, timeout }),
        3 => (0..cancel_ids().len()).prop_map(|id| LayerOp::Cancel { id }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(slot, ok)| LayerOp::Respond { slot, ok }),
        4 => (any::<usize>(), any::<bool>())
            .prop_map(|(slot, increasing)| LayerOp::Progress { slot, increasing }),
        4 => advance_ms().prop_map(|ms| LayerOp::Advance { ms }),
        2 => any::<usize>().prop_map(|slot| LayerOp::Disconnect { slot }),
        1 => Just(LayerOp::Close),
    ]
}

#[derive(Clone, Debug)]
pub(super) enum StdioOp {
    /// The client calls with id `ids()[id]` and deadline `TIMEOUT_CHOICES[timeout]`.
    Request { id: usize, timeout: usize },
    /// The caller drops call `slot`: the client sends `notifications/cancelled`.
    Drop { slot: usize },
    /// A raw `notifications/cancelled` for `cancel_ids()[id]`, known or not.
    RawCancel { id: usize },
    /// The server handler of call `slot` answers.
    Respond { slot: usize, ok: bool },
    /// The server handler of call `slot` sends progress.
    Progress { slot: usize, increasing: bool },
    /// The paused clock moves on.
    Advance { ms: u64 },
    /// The handler answers and, in the same instant, the caller drops the
    /// call: the response reaches a client that no longer waits for it.
    LateResponse { slot: usize },
    /// The client shuts the connection down (the server sees end of input).
    Close,
}

pub(super) fn stdio_op() -> impl Strategy<Value = StdioOp> {
    prop_oneof![
        6 => (0..ids().len(), 0..TIMEOUT_CHOICES.len())
            .prop_map(|(id, timeout)| StdioOp::Request { id, timeout }),
        2 => any::<usize>().prop_map(|slot| StdioOp::Drop { slot }),
        2 => (0..cancel_ids().len()).prop_map(|id| StdioOp::RawCancel { id }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(slot, ok)| StdioOp::Respond { slot, ok }),
        4 => (any::<usize>(), any::<bool>())
            .prop_map(|(slot, increasing)| StdioOp::Progress { slot, increasing }),
        4 => advance_ms().prop_map(|ms| StdioOp::Advance { ms }),
        2 => any::<usize>().prop_map(|slot| StdioOp::LateResponse { slot }),
        1 => Just(StdioOp::Close),
    ]
}

pub(super) type Outcomes = Arc<Mutex<HashMap<u64, Vec<Seen>>>>;

/// The request a slot names: three times in four one still in flight (if
/// any), otherwise any request so far (ended ones included).
pub(super) fn pick<T>(reqs: &[T], slot: usize, active: impl Fn(&T) -> bool) -> Option<usize> {
    if reqs.is_empty() {
        return None;
    }
    let live: Vec<usize> = (0..reqs.len()).filter(|&k| active(&reqs[k])).collect();
    if slot % 4 != 0 && !live.is_empty() {
        Some(live[(slot / 4) % live.len()])
    } else {
        Some(slot % reqs.len())
    }
}
