//! What a client transport gives each request it sends, written once for
//! the stdio and HTTP clients: an id when the request has none, a progress
//! token when the caller's [`ProgressObserver`] wants progress and no layer
//! assigned one, and where that request's progress goes (the tap a
//! [`ProgressResetLayer`](crate::ProgressResetLayer) set, or one of the
//! client's own for the observer).

use std::sync::atomic::{AtomicI64, Ordering};

use crate::jsonrpc::{ProgressToken, RequestId};
use crate::{McpRequest, ProgressObserver, ProgressTap, RequestView};

/// A client's id and progress-token counters.
#[derive(Debug)]
pub(crate) struct Outbound {
    next_id: AtomicI64,
    next_token: AtomicI64,
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

    /// Where the progress of `req` goes: the tap a layer set, else — when
    /// the caller put a [`ProgressObserver`] on it — a tap of our own for
    /// that observer. A request with an observer and no progress token gets
    /// one (for which `in_use` is false) so the server reports progress at
    /// all; it is written in `req.wire_params()`. Params that are not an
    /// object cannot carry `_meta` and are left alone.
    pub(crate) fn progress_route(
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
        let tap = out
            .progress_route(&mut req, |t| *t == ProgressToken::Number(1))
            .expect("a tap");
        assert_eq!(tap.token(), &ProgressToken::Number(2), "token 1 was in use");
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
        let tap = out.progress_route(&mut req, |_| false).unwrap();
        assert_eq!(tap.token(), &ProgressToken::from("mine"));
        let mut plain = McpRequest::new(2, "tools/call");
        assert!(out.progress_route(&mut plain, |_| false).is_none());
        assert!(plain.progress_token().is_none());
        let mut array = observed(McpRequest::new(3, "x").with_params(serde_json::json!([1])));
        assert!(out.progress_route(&mut array, |_| false).is_none());
        assert_eq!(array.wire_params().unwrap().unwrap().get(), "[1]");
    }
}
