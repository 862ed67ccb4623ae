//! The client side of a request's lifecycle, written once for the stdio and
//! HTTP clients:
//!
//! * [`Outbound`]: ids and progress tokens — an id when the request has
//!   none, a token when the caller's [`ProgressObserver`] wants progress and
//!   no layer assigned one — and the request's [`Route`]: the tap a
//!   [`ProgressResetLayer`](crate::ProgressResetLayer) set, or one of the
//!   client's own for the observer.
//! * [`route_progress`]: a `notifications/progress` from the server, to the
//!   tap of its token.
//! * [`Pending`]: the table of one client's requests in flight (a stdio
//!   connection's, an HTTP client's) and their progress routes, which keeps
//!   the one rule of both clients: ids and tokens are unique among them.
//! * [`CallGuard`]: a call dropped before its answer is cancelled, with the
//!   reason its request's [`Cancellation`](crate::Cancellation) holds, and
//!   logged, once; the transport says what cancelling is ([`Abandon`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::jsonrpc::{ErrorObject, ProgressParams, ProgressToken, RequestId};
use crate::observe::record::{Record, SpanParams};
use crate::observe::{Era, Outcome, Side, Transport};
use crate::{CancelReason, Cancellation, McpRequest, ProgressObserver, ProgressTap, RequestView};

/// A client's id and progress-token counters.
#[derive(Debug)]
pub(crate) struct Outbound {
    next_id: AtomicI64,
    next_token: AtomicI64,
}

/// A request's progress token, and where its progress goes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Route {
    /// The token on the wire, if any (the caller's, a layer's or ours).
    pub(crate) token: Option<ProgressToken>,
    /// Where progress for `token` is recorded; `None`: nobody listens.
    pub(crate) tap: Option<ProgressTap>,
}

impl Route {
    /// The tap for progress with `token`: ours when the token is ours.
    #[cfg(feature = "http")]
    pub(crate) fn tap_for(&self, token: &ProgressToken) -> Option<ProgressTap> {
        match (&self.token, &self.tap) {
            (Some(t), Some(tap)) if t == token => Some(tap.clone()),
            _ => None,
        }
    }
}

impl Outbound {
    pub(crate) fn new() -> Self {
        Self {
            next_id: AtomicI64::new(1),
            next_token: AtomicI64::new(1),
        }
    }

    /// A fresh request id for which `in_use` is false.
    pub(crate) fn next_id(&self, in_use: impl Fn(&RequestId) -> bool) -> RequestId {
        loop {
            let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
            if !in_use(&id) {
                return id;
            }
        }
    }

    /// The id of `req`: its own, or a fresh one (for which `in_use` is
    /// false), which is then set on it.
    pub(crate) fn assign_id(
        &self,
        req: &mut McpRequest,
        in_use: impl Fn(&RequestId) -> bool,
    ) -> RequestId {
        if let Some(id) = req.id() {
            return id.clone();
        }
        let id = self.next_id(in_use);
        req.set_id(id.clone());
        id
    }

    /// The route of `req`'s progress: its token, and the tap a layer set,
    /// else — when the caller put a [`ProgressObserver`] on it — a tap of
    /// our own for that observer. A request with an observer and no
    /// progress token gets one (for which `in_use` is false) so the server
    /// reports progress at all; it is written in `req.wire_params()`.
    /// Params that are not an object cannot carry `_meta` and are left
    /// alone.
    pub(crate) fn route(
        &self,
        req: &mut McpRequest,
        in_use: impl Fn(&ProgressToken) -> bool,
    ) -> Route {
        let tap = self.progress_tap(req, in_use);
        let token = req.progress_token().cloned();
        // A tap is only reachable through the token on the wire.
        let tap = tap.filter(|_| token.is_some());
        Route { token, tap }
    }

    fn progress_tap(
        &self,
        req: &mut McpRequest,
        in_use: impl Fn(&ProgressToken) -> bool,
    ) -> Option<ProgressTap> {
        if let Some(tap) = req.progress_tap() {
            return Some(tap.clone());
        }
        let observer = req.extensions().get::<ProgressObserver>().cloned()?;
        let token = match req.progress_token() {
            Some(t) => t.clone(),
            None => {
                let object = req
                    .params()
                    .is_none_or(|p| p.get().trim_start().starts_with('{'));
                if !object {
                    return None;
                }
                let token = loop {
                    let t = ProgressToken::Number(self.next_token.fetch_add(1, Ordering::Relaxed));
                    if !in_use(&t) {
                        break t;
                    }
                };
                RequestView::set_progress_token(req, token.clone());
                token
            }
        };
        Some(ProgressTap::new(token, Some(observer)))
    }
}

/// Records the `params` of a `notifications/progress` in the tap `find`
/// gives for its token; malformed ones and unknown tokens are ignored
/// (debug log).
pub(crate) fn route_progress(
    params: Option<&RawValue>,
    find: impl FnOnce(&ProgressToken) -> Option<ProgressTap>,
) {
    let Some(params) = params.and_then(|p| serde_json::from_str::<ProgressParams>(p.get()).ok())
    else {
        tracing::debug!("malformed notifications/progress ignored");
        return;
    };
    match find(&params.progress_token) {
        Some(tap) => {
            #[cfg(feature = "metrics")]
            crate::observe::metrics::progress(Side::Client);
            tap.record_params(params);
        }
        None => {
            tracing::debug!(progress_token = %params.progress_token, "progress for no request in flight ignored")
        }
    }
}

/// One client's requests in flight, each with a `T` of the transport's, and
/// the progress tokens they carry on the wire (with the tap their progress
/// goes to, if anyone listens).
///
/// The rule both clients keep, in both eras: **an id or a progress token
/// is unique among one client's requests in flight.** The ids and tokens
/// the client assigns skip those in use; a caller's own id or token that is
/// already in flight is refused with `-32600` and the request is not sent
/// (it is not rewritten: the id and token the caller chose are the ones on
/// the wire, in the server's logs and in its cancellations).
pub(crate) struct Pending<T> {
    calls: HashMap<RequestId, (T, Option<ProgressToken>)>,
    tokens: HashMap<ProgressToken, Option<ProgressTap>>,
}

impl<T> Pending<T> {
    pub(crate) fn new() -> Self {
        Self {
            calls: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// Adds `req` with `value`: its id (given one unique among the pending
    /// and `reserved` ids when it has none) and its progress route, which is
    /// returned. A request whose own id is pending or reserved, or whose
    /// progress token is in use, is refused with `-32600`.
    pub(crate) fn register(
        &mut self,
        out: &Outbound,
        req: &mut McpRequest,
        reserved: impl Fn(&RequestId) -> bool,
        value: T,
    ) -> Result<(RequestId, Route), ErrorObject> {
        let invalid = |m: String| ErrorObject::new(ErrorObject::INVALID_REQUEST, m);
        match req.id() {
            Some(id) if self.calls.contains_key(id) => {
                return Err(invalid(format!(
                    "a request with id {id} is already in flight"
                )));
            }
            Some(id) if reserved(id) => {
                return Err(invalid(format!(
                    "request id {id} is reserved: a cancelled request with this id may still be answered"
                )));
            }
            _ => {}
        }
        if let Some(t) = req
            .progress_token()
            .filter(|t| self.tokens.contains_key(*t))
        {
            return Err(invalid(format!(
                "progress token {t} is already in use by a request in flight"
            )));
        }
        let id = out.assign_id(req, |id| self.calls.contains_key(id) || reserved(id));
        let route = out.route(req, |t| self.tokens.contains_key(t));
        if let Some(t) = &route.token {
            self.tokens.insert(t.clone(), route.tap.clone());
        }
        self.calls.insert(id.clone(), (value, route.token.clone()));
        Ok((id, route))
    }

    /// Adds a request of the client's own (no params, no progress) under a
    /// fresh id, which is returned.
    #[cfg(feature = "http")]
    pub(crate) fn fresh(&mut self, out: &Outbound, value: T) -> RequestId {
        let id = out.next_id(|id| self.calls.contains_key(id));
        self.calls.insert(id.clone(), (value, None));
        id
    }

    /// Whether a request with `id` is pending.
    #[cfg(feature = "stdio")]
    pub(crate) fn contains(&self, id: &RequestId) -> bool {
        self.calls.contains_key(id)
    }

    /// Removes a pending request and its progress route.
    pub(crate) fn take(&mut self, id: &RequestId) -> Option<T> {
        let (value, token) = self.calls.remove(id)?;
        if let Some(t) = &token {
            self.tokens.remove(t);
        }
        Some(value)
    }

    #[cfg(feature = "stdio")]
    pub(crate) fn get(&self, id: &RequestId) -> Option<&T> {
        self.calls.get(id).map(|(v, _)| v)
    }

    /// The progress route of `token`.
    #[cfg(feature = "stdio")]
    pub(crate) fn tap(&self, token: &ProgressToken) -> Option<ProgressTap> {
        self.tokens.get(token).cloned().flatten()
    }

    /// The ids in flight.
    #[cfg(feature = "stdio")]
    pub(crate) fn ids(&self) -> impl Iterator<Item = &RequestId> {
        self.calls.keys()
    }

    #[cfg(any(feature = "stdio", test))]
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Removes every pending request (the connection closed).
    #[cfg(feature = "stdio")]
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.tokens.clear();
        self.calls.drain().map(|(_, (v, _))| v).collect()
    }
}

/// What cancelling a call means to a transport.
pub(crate) trait Abandon: Send {
    /// The call's future was dropped before its answer: undo what the call
    /// holds and say what cancels it (for the log), or `None` when there is
    /// nothing to cancel (already answered, or never sent).
    fn abandon(&mut self, id: &RequestId) -> Option<&'static str>;

    /// Tells the peer, with the reason of the drop (after the log).
    fn cancel(&mut self, id: &RequestId, reason: CancelReason);
}

/// Cancels its call when dropped before [`finish`](Self::finish), with the
/// reason of the drop, logged once for both sides; holds the call's span
/// and records its [`Outcome`] (see [`observe`](crate::observe)).
///
/// The reason is the one the request's [`Cancellation`] was cancelled with:
/// a layer above that gives up (a limit fired) cancels it before it drops
/// the call, and so can a caller with a reason of their own. It travels with
/// the request, so it holds however the call was driven (spawned, on
/// another thread). A request without a cancellation, or whose cancellation
/// was not cancelled, was dropped by its caller:
/// [`CancelReason::CallerDropped`].
pub(crate) struct CallGuard<A: Abandon> {
    id: RequestId,
    method: String,
    started: Instant,
    cancellation: Option<Cancellation>,
    abandon: A,
    record: Option<Record>,
}

impl<A: Abandon> CallGuard<A> {
    pub(crate) fn new(
        id: RequestId,
        req: &McpRequest,
        abandon: A,
        transport: Transport,
        era: Option<Era>,
    ) -> Self {
        let method = req.method();
        Self {
            record: Some(Record::start(
                Side::Client,
                transport,
                era,
                Some(&id),
                method,
                SpanParams::Raw(req.params()),
            )),
            id,
            method: method.to_owned(),
            started: Instant::now(),
            cancellation: req.cancellation().cloned(),
            abandon,
        }
    }

    /// The call's span, to run the call in.
    pub(crate) fn span(&self) -> tracing::Span {
        self.record
            .as_ref()
            .map(|r| r.span().clone())
            .unwrap_or_else(tracing::Span::none)
    }

    /// The transport's side of the call.
    #[cfg(feature = "stdio")]
    pub(crate) fn abandon(&self) -> &A {
        &self.abandon
    }

    /// The answer came (or the call failed): nothing to cancel; the call's
    /// outcome is that of `result`.
    pub(crate) fn finish<T>(&mut self, result: &Result<T, BoxError>) {
        if let Some(record) = self.record.take() {
            record.end(&Outcome::of(result));
        }
    }
}

impl<A: Abandon> Drop for CallGuard<A> {
    fn drop(&mut self) {
        let Some(record) = self.record.take() else {
            return;
        };
        let reason = self
            .cancellation
            .as_ref()
            .and_then(|c| c.reason().cloned())
            .unwrap_or(CancelReason::CallerDropped);
        record.end(&Outcome::from_reason(&reason));
        let Some(what) = self.abandon.abandon(&self.id) else {
            return;
        };
        tracing::debug!(
            request_id = %self.id,
            method = %self.method,
            %reason,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "request abandoned; {what}"
        );
        self.abandon.cancel(&self.id, reason);
    }
}

/// The `result` of a response, or its error as an [`ErrorObject`].
pub(crate) fn outcome(
    outcome: Result<Box<RawValue>, ErrorObject>,
) -> Result<serde_json::Value, BoxError> {
    match outcome {
        Ok(raw) => Ok(serde_json::from_str(raw.get())?),
        Err(e) => Err(Box::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(req: McpRequest) -> McpRequest {
        req.with_extension(ProgressObserver::new(|_| {}))
    }

    #[test]
    fn an_observer_gets_a_token_on_the_wire_and_a_tap() {
        let out = Outbound::new();
        let mut req = observed(
            McpRequest::new(1, "tools/call").with_params(serde_json::json!({"name": "x"})),
        );
        let route = out.route(&mut req, |t| *t == ProgressToken::Number(1));
        let tap = route.tap.expect("a tap");
        assert_eq!(tap.token(), ProgressToken::Number(2), "token 1 was in use");
        assert_eq!(req.progress_token(), Some(&ProgressToken::Number(2)));
        let wire: serde_json::Value =
            serde_json::from_str(req.wire_params().unwrap().unwrap().get()).unwrap();
        assert_eq!(wire["_meta"]["progressToken"], 2);
        assert_eq!(wire["name"], "x");
    }

    #[test]
    fn a_callers_token_is_kept_and_no_observer_means_no_token() {
        let out = Outbound::new();
        let mut req = observed(
            McpRequest::new(1, "tools/call")
                .with_params(serde_json::json!({"_meta": {"progressToken": "mine"}})),
        );
        let tap = out.route(&mut req, |_| false).tap.unwrap();
        assert_eq!(tap.token(), ProgressToken::from("mine"));
        let mut plain = McpRequest::new(2, "tools/call");
        assert!(out.route(&mut plain, |_| false).tap.is_none());
        assert!(plain.progress_token().is_none());
        let mut array = observed(McpRequest::new(3, "x").with_params(serde_json::json!([1])));
        assert!(out.route(&mut array, |_| false).tap.is_none());
        assert_eq!(array.wire_params().unwrap().unwrap().get(), "[1]");
    }
    #[cfg(feature = "stdio")]
    #[test]
    fn the_pending_table_keeps_ids_and_tokens_unique() {
        let out = Outbound::new();
        let mut table = Pending::new();
        let reserved = |id: &RequestId| *id == RequestId::Number(2);
        let mut first = McpRequest::without_id("a");
        let (id, _) = table.register(&out, &mut first, reserved, 'a').unwrap();
        assert_eq!(id, RequestId::Number(1));
        assert_eq!(first.id(), Some(&id));
        let mut second = observed(McpRequest::without_id("b"));
        let (id, _) = table.register(&out, &mut second, reserved, 'b').unwrap();
        assert_eq!(id, RequestId::Number(3), "2 is reserved");
        let token = second.progress_token().cloned().expect("a token");
        assert!(table.tap(&token).is_some());

        let mut again = McpRequest::new(1, "c");
        let e = table.register(&out, &mut again, reserved, 'c').unwrap_err();
        assert_eq!(e.code, ErrorObject::INVALID_REQUEST);
        let mut reused = McpRequest::new(2, "c");
        assert!(table.register(&out, &mut reused, reserved, 'c').is_err());
        let mut same_token = McpRequest::new(9, "c").with_params(
            serde_json::json!({"_meta": {"progressToken": serde_json::to_value(&token).unwrap()}}),
        );
        assert!(table
            .register(&out, &mut same_token, reserved, 'c')
            .is_err());

        assert_eq!(table.take(&RequestId::Number(3)), Some('b'));
        assert!(table.tap(&token).is_none(), "the route goes with the call");
        assert_eq!(table.len(), 1);
        assert_eq!(table.drain(), vec!['a']);
    }

    struct Probe(std::sync::Arc<std::sync::Mutex<Vec<CancelReason>>>);

    impl Abandon for Probe {
        fn abandon(&mut self, _id: &RequestId) -> Option<&'static str> {
            Some("probing")
        }
        fn cancel(&mut self, _id: &RequestId, reason: CancelReason) {
            self.0.lock().unwrap().push(reason);
        }
    }

    #[test]
    fn a_guard_cancels_with_its_requests_reason_unless_finished() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let guard = |n, cancellation: Option<&Cancellation>| {
            let mut req = McpRequest::new(n, "m");
            if let Some(c) = cancellation {
                req = req.with_cancellation(c.clone());
            }
            CallGuard::new(
                RequestId::Number(n),
                &req,
                Probe(seen.clone()),
                Transport::Stdio,
                None,
            )
        };
        let mut done = guard(1, None);
        done.finish(&Ok::<(), BoxError>(()));
        drop(done);
        drop(guard(2, None));
        let active = Cancellation::new();
        drop(guard(3, Some(&active)));
        let shut = Cancellation::new();
        let g = guard(4, Some(&shut));
        shut.cancel(CancelReason::Shutdown);
        drop(g);
        let seen = seen.lock().unwrap();
        assert!(
            matches!(
                seen.as_slice(),
                [
                    CancelReason::CallerDropped,
                    CancelReason::CallerDropped,
                    CancelReason::Shutdown
                ]
            ),
            "{seen:?}"
        );
    }
}
