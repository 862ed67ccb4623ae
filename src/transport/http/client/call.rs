//! One call of [`HttpClient`](super::HttpClient), in steps:
//! [`Call::prepare`] takes from the request everything the call needs
//! before its future exists; [`Call::run`] sends it in the server's era
//! ([`send`](Call::send)), falls back to the 2025 era on the spec's `400`
//! ([`fall_back`](Call::fall_back)), sends in a legacy session
//! ([`send_legacy`](Call::send_legacy)), then handles the answer (a second
//! attempt after a `HeaderMismatch`, the tools a `tools/list` taught).

use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::era::{self, Legacy, State};
use super::request::{exchange, prepare, NotModern, SessionGone, Shape};
use super::send::Outgoing;
use super::tools::{is_header_mismatch, learn_tools, param_headers_of, Retry};
use super::{CancelHttp, HttpClientError, Inner, Lease};
use crate::error::BoxError;
use crate::jsonrpc::RequestId;
use crate::observe::{Era, Transport};
use crate::timeout::WireBudget;
use crate::transport::call::client::{CallGuard, Route};
use crate::McpRequest;

/// The method, params (as the caller gave them) and budget of a request,
/// for the legacy shape.
struct LegacyParts {
    method: String,
    params: Result<Option<Box<RawValue>>, serde_json::Error>,
    budget: Option<WireBudget>,
}

/// The legacy session a call was sent in, once it was (for its cancel).
pub(super) type SentIn = Arc<Mutex<Option<Arc<Legacy>>>>;

/// A call's outcome: the result, or the error the caller gets.
type Answer = Result<serde_json::Value, BoxError>;

/// One call. Everything that needs the request is done before the future,
/// so the future holds only what it sends and where progress goes (and,
/// for a `tools/call`, the request, in case it must be sent again; and the
/// method and params while the server may be legacy).
pub(super) struct Call {
    inner: Arc<Inner>,
    id: RequestId,
    route: Route,
    /// The legacy session, if the server was known to be legacy.
    legacy: Option<Arc<Legacy>>,
    /// The 2026 POST, unless the server was known to be legacy.
    modern: Option<Result<Outgoing, HttpClientError>>,
    /// The server's era is unknown: a `400` may mean it is legacy.
    probe: bool,
    /// Kept unless the server was known to be modern.
    legacy_parts: Option<LegacyParts>,
    sent_in: SentIn,
    retry: Option<Retry>,
    is_tools_list: bool,
}

impl Call {
    /// Prepares call `id` (already in the table of calls in flight, which
    /// it now holds) and the guard that records it and, dropped before its
    /// answer, cancels it.
    pub(super) fn prepare(
        inner: Arc<Inner>,
        id: RequestId,
        route: Route,
        req: McpRequest,
    ) -> (Self, CallGuard<CancelHttp>) {
        let lease = Lease {
            table: inner.in_flight.clone(),
            id: id.clone(),
        };
        let era = inner.era.get();
        // The deadline is taken now; the budget is counted when sent.
        let legacy_parts = (!matches!(era, State::Modern)).then(|| LegacyParts {
            method: req.method().to_owned(),
            params: req.wire_params(),
            budget: WireBudget::of(&req, inner.budget_key.as_ref()),
        });
        let modern = match era {
            State::Legacy(_) => None,
            _ => Some(prepare(&inner, &id, &req)),
        };
        let is_tools_list = req.method() == "tools/list";
        let sent_in = SentIn::default();
        // Unknown until the first answer: a modern request goes first.
        let span_era = match era {
            State::Legacy(_) => Era::Legacy,
            _ => Era::Modern,
        };
        let cancel = CancelHttp {
            inner: inner.clone(),
            sent_in: sent_in.clone(),
            lease: Some(lease),
        };
        let guard = CallGuard::new(id.clone(), &req, cancel, Transport::Http, Some(span_era));
        let retry = retry(&inner, &era, &modern, &route, req);
        let probe = matches!(era, State::Unknown) && inner.era.fallback;
        let legacy = match era {
            State::Legacy(legacy) => Some(legacy),
            _ => None,
        };
        let call = Self {
            inner,
            id,
            route,
            legacy,
            modern,
            probe,
            legacy_parts,
            sent_in,
            retry,
            is_tools_list,
        };
        (call, guard)
    }

    /// Runs the call to its answer, which `guard` records.
    pub(super) async fn run(mut self, mut guard: CallGuard<CancelHttp>) -> Answer {
        let mut out = self.send().await;
        if let Some(retry) = self.retry.take() {
            if is_header_mismatch(&out) {
                if let Some(again) = retry.again(&self.inner, &self.id).await {
                    out = again;
                }
            }
        }
        guard.finish(&out);
        if self.is_tools_list {
            if let Ok(result) = out.as_mut() {
                learn_tools(&self.inner, result);
            }
        }
        out
    }

    /// Sends the call in the era the server was known to be in: in its
    /// legacy session, or as a 2026 request (falling back if that finds the
    /// server legacy).
    async fn send(&mut self) -> Answer {
        if let Some(legacy) = self.legacy.take() {
            return self.send_legacy(legacy).await;
        }
        let http_req = match self.modern.take() {
            Some(Ok(http_req)) => http_req,
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(HttpClientError::InvalidRequest("no request prepared".into()).into())
            }
        };
        let shape = Shape::Modern { probe: self.probe };
        let out = exchange(&self.inner, http_req, &self.id, self.route.clone(), shape).await;
        if out.as_ref().err().is_some_and(|e| e.is::<NotModern>()) {
            self.fall_back().await
        } else {
            out
        }
    }

    /// The spec's only signal of a 2025-era server, a `400` to the 2026
    /// request that is no modern error ([`NotModern`]): the call goes again
    /// in the legacy session, initialized now unless another call did.
    async fn fall_back(&mut self) -> Answer {
        let legacy = self.inner.era.legacy(&self.inner, None).await?;
        self.send_legacy(legacy).await
    }

    /// Sends the call in `legacy`'s session. A session the server ended
    /// (`404`) is initialized again, and the call sent once more: it never
    /// ran.
    async fn send_legacy(&mut self, mut legacy: Arc<Legacy>) -> Answer {
        let Some(LegacyParts {
            method,
            params,
            budget,
        }) = self.legacy_parts.take()
        else {
            return Err(HttpClientError::InvalidRequest(
                "request not kept for the legacy era".into(),
            )
            .into());
        };
        let params = params.map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
        let mut renewed = false;
        loop {
            let req = era::prepare(
                &self.inner,
                &legacy,
                &self.id,
                &method,
                params.as_deref(),
                budget.clone(),
            )?;
            // A cancel from now on is posted in this session.
            self.sent_in(Some(legacy.clone()));
            let out = exchange(
                &self.inner,
                req,
                &self.id,
                self.route.clone(),
                Shape::Legacy,
            )
            .await;
            match out {
                Err(e) if !renewed && e.is::<SessionGone>() => {
                    self.sent_in(None);
                    tracing::info!(request_id = %self.id, "legacy session ended by the server; initializing again");
                    legacy = self.inner.era.legacy(&self.inner, Some(&legacy)).await?;
                    renewed = true;
                }
                out => return out,
            }
        }
    }

    fn sent_in(&self, legacy: Option<Arc<Legacy>>) {
        *self.sent_in.lock().unwrap_or_else(|e| e.into_inner()) = legacy;
    }
}

/// What a second attempt after a `HeaderMismatch` needs, for a `tools/call`
/// not known to go to a legacy server (unless that retry is turned off):
/// the request (to mirror its arguments again), the headers first sent, and
/// the progress route.
fn retry(
    inner: &Inner,
    era: &State,
    modern: &Option<Result<Outgoing, HttpClientError>>,
    route: &Route,
    req: McpRequest,
) -> Option<Retry> {
    let wanted = inner.relist_on_mismatch
        && req.method() == "tools/call"
        && !matches!(era, State::Legacy(_));
    wanted.then(|| Retry {
        sent: match modern {
            Some(Ok(r)) => param_headers_of(r),
            _ => Vec::new(),
        },
        route: route.clone(),
        req,
    })
}
