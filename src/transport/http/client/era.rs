//! Which era the server speaks, and the 2025-era connection: the
//! `initialize` handshake and its session, requests in that shape, the
//! `notifications/cancelled` a dropped call posts, and the `DELETE` that
//! ends the session.
//!
//! Detection follows the spec's Backward Compatibility rule: the first
//! request goes out modern; a `400 Bad Request` whose body is not a
//! recognized modern JSON-RPC error (`HeaderMismatch`,
//! `MissingRequiredClientCapability`, `UnsupportedProtocolVersion`, the
//! ones the spec names, whatever the id) means a legacy server, and the
//! client falls back to `initialize` (then `notifications/initialized`) and
//! sends the request again in the legacy shape. Nothing else is that
//! signal: another status (`401`, `404`, `413`, `429`, …) or a connection
//! failure is the call's error, and the era stays as it was. A success or a
//! modern error makes the client modern. The result is kept for the
//! client's lifetime (its clones share it); a legacy session the server
//! ended (`404`) is initialized again once.
//!
//! A session is the client's from the moment the `initialize` answer's
//! headers arrive: if the handshake does not complete — it fails, or the
//! call that runs it is dropped (a timeout) before the server acknowledged
//! `notifications/initialized` — the session is ended with a `DELETE` in
//! the background, bounded like the cancel posts, rather than left to
//! hold its place on the server until it expires.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request};
use http_body_util::Full;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use super::request::{read_small, CLIENT_CAPABILITIES_META, CLIENT_INFO_META};
use super::response::read_response;
use super::send::{send, Outgoing};
use super::{HttpClientError, Inner, Lease};
use crate::error::BoxError;
use crate::jsonrpc::{self, RequestId, PROTOCOL_VERSION_META};
use crate::protocol::LEGACY_VERSIONS;
use crate::timeout::{WireBudget, WireRequest};
use crate::transport::call::client::Route;
use crate::transport::http::headers::{MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER};
use crate::CancelReason;

/// How long a spawned `notifications/cancelled` or `DELETE` may take.
pub(super) const BACKGROUND_POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How many `notifications/cancelled` POSTs (and `DELETE`s of sessions
/// whose handshake did not complete) may be under way at once; past that
/// one is logged and not sent (the stream is closed all the same; the
/// session expires on the server).
pub(super) const MAX_PENDING_CANCELS: usize = 64;

/// The era of the server an [`HttpClient`](super::HttpClient) talks to, as
/// far as it knows ([`HttpClient::server_era`](super::HttpClient::server_era)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerEra {
    /// Nothing answered yet.
    Unknown,
    /// Stateless (2026-07-28): every request carries its own metadata; a
    /// dropped call closes its response stream.
    Stateless,
    /// Stateful (a 2025 revision): after the `initialize` handshake, in its
    /// session if the server assigned one; a dropped call posts
    /// `notifications/cancelled`.
    Stateful {
        /// The negotiated protocol version.
        protocol_version: String,
        /// The session the server assigned, if any.
        session_id: Option<String>,
    },
}

/// A 2025-era connection: the negotiated version and the session.
#[derive(Debug)]
pub(super) struct Legacy {
    version: HeaderValue,
    session: Option<HeaderValue>,
}

impl Legacy {
    /// A POST (or `method`) to the endpoint with this connection's headers.
    fn request(&self, inner: &Inner, method: http::Method) -> http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(inner.uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(MCP_PROTOCOL_VERSION_HEADER, self.version.clone());
        if let Some(s) = &self.session {
            b = b.header(MCP_SESSION_ID_HEADER, s.clone());
        }
        b
    }
}

#[derive(Clone, Debug)]
pub(super) enum State {
    Unknown,
    Modern,
    Legacy(Arc<Legacy>),
}

/// The client's knowledge of the server's era (shared by clones).
#[derive(Debug)]
pub(super) struct EraCell {
    state: Mutex<State>,
    /// One handshake at a time.
    handshake: tokio::sync::Mutex<()>,
    /// Whether to fall back at all.
    pub(super) fallback: bool,
}

impl EraCell {
    pub(super) fn new(fallback: bool) -> Self {
        Self {
            state: Mutex::new(State::Unknown),
            handshake: tokio::sync::Mutex::new(()),
            fallback,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn get(&self) -> State {
        self.lock().clone()
    }

    /// A modern answer came: the server is modern (unless a concurrent
    /// call already found it legacy).
    pub(super) fn modern(&self) {
        let mut s = self.lock();
        if matches!(*s, State::Unknown) {
            *s = State::Modern;
        }
    }

    pub(super) fn public(&self) -> ServerEra {
        match &*self.lock() {
            State::Unknown => ServerEra::Unknown,
            State::Modern => ServerEra::Stateless,
            State::Legacy(l) => ServerEra::Stateful {
                protocol_version: l.version.to_str().unwrap_or_default().to_owned(),
                session_id: l
                    .session
                    .as_ref()
                    .and_then(|s| s.to_str().ok())
                    .map(str::to_owned),
            },
        }
    }

    /// The legacy connection, initializing it unless another call did (or
    /// replacing `stale`, a session the server ended).
    pub(super) async fn legacy(
        &self,
        inner: &Inner,
        stale: Option<&Arc<Legacy>>,
    ) -> Result<Arc<Legacy>, BoxError> {
        let _one = self.handshake.lock().await;
        if let State::Legacy(l) = self.get() {
            if !stale.is_some_and(|s| Arc::ptr_eq(s, &l)) {
                return Ok(l);
            }
        }
        let legacy = Arc::new(initialize(inner).await?);
        tracing::info!(uri = %inner.uri, version = ?legacy.version, session = legacy.session.is_some(), "server speaks a 2025 revision: using its initialize session");
        *self.lock() = State::Legacy(legacy.clone());
        Ok(legacy)
    }

    /// Takes the legacy session out, for the `DELETE` at the end.
    pub(super) fn take_session(&self) -> Option<Arc<Legacy>> {
        match std::mem::replace(&mut *self.lock(), State::Unknown) {
            State::Legacy(l) if l.session.is_some() => Some(l),
            _ => None,
        }
    }
}

/// The `initialize` handshake of the 2025 revisions (the latest one
/// offered), then `notifications/initialized`. A session the server
/// assigned is [`Unkept`] until the handshake completes.
async fn initialize(inner: &Inner) -> Result<Legacy, BoxError> {
    let offered = LEGACY_VERSIONS.last().copied().unwrap_or("2025-11-25");
    let lease = Lease::fresh(inner);
    let id = lease.id();
    let info = inner.client_info.clone().unwrap_or_else(
        || serde_json::json!({"name": env!("CARGO_PKG_NAME"), "version": env!("CARGO_PKG_VERSION")}),
    );
    let params = serde_json::value::to_raw_value(&serde_json::json!({
        "protocolVersion": offered,
        "capabilities": {},
        "clientInfo": info,
    }))?;
    let body = jsonrpc::encode_request(id, "initialize", Some(&params))?;
    let mut req = Request::post(inner.uri.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(Full::new(Bytes::from(body)))?;
    add_extra_headers(inner, &mut req);
    let res = send(&inner.client, req).await?;
    // From here the session is ours to end, whatever happens next.
    let mut unkept = Unkept {
        inner,
        version: HeaderValue::from_static(offered),
        session: res.headers().get(&MCP_SESSION_ID_HEADER).cloned(),
    };
    let result = read_response(res, id, Route::default(), inner.max_response_bytes).await?;
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !LEGACY_VERSIONS.contains(&version) {
        return Err(HttpClientError::InvalidResponse(format!(
            "initialize answered protocol version {:?}, which this client does not speak",
            crate::sanitize::for_log(version)
        ))
        .into());
    }
    unkept.version = HeaderValue::from_str(version)?;
    let body = jsonrpc::encode_notification("notifications/initialized", &serde_json::json!({}))?;
    let mut req = unkept
        .legacy()
        .request(inner, http::Method::POST)
        .body(Full::new(Bytes::from(body)))?;
    add_extra_headers(inner, &mut req);
    let res = send(&inner.client, req).await?;
    let status = res.status();
    // Read (to reuse the connection), but not without bound.
    let _ = read_small(res.into_body()).await;
    if !status.is_success() {
        return Err(HttpClientError::Status {
            status,
            body: "notifications/initialized refused".into(),
        }
        .into());
    }
    Ok(unkept.keep())
}

/// A connection whose handshake is under way: dropped before
/// [`keep`](Self::keep) — the handshake failed, or the future running it
/// was dropped — it `DELETE`s the session the server assigned, in the
/// background ([`spawn_delete`]), so that the server does not hold it
/// until it expires.
struct Unkept<'a> {
    inner: &'a Inner,
    /// The version offered, then the one the server answered.
    version: HeaderValue,
    /// The session, until it is kept.
    session: Option<HeaderValue>,
}

impl Unkept<'_> {
    fn legacy(&self) -> Legacy {
        Legacy {
            version: self.version.clone(),
            session: self.session.clone(),
        }
    }

    /// The handshake completed: the connection is the client's.
    fn keep(mut self) -> Legacy {
        let legacy = self.legacy();
        self.session = None;
        legacy
    }
}

impl Drop for Unkept<'_> {
    fn drop(&mut self) {
        if self.session.is_none() {
            return;
        }
        let legacy = Arc::new(self.legacy());
        let Ok(permit) = self.inner.pending_cancels.clone().try_acquire_owned() else {
            tracing::warn!(max = MAX_PENDING_CANCELS, "too many background requests under way; the session of an unfinished handshake is not deleted (it expires on the server)");
            return;
        };
        tracing::debug!("handshake not completed; deleting its session");
        spawn_delete(self.inner, legacy, Some(permit));
    }
}

fn add_extra_headers<B>(inner: &Inner, req: &mut Request<B>) {
    for (k, v) in &inner.headers {
        req.headers_mut().append(k.clone(), v.clone());
    }
}

/// Request `id` in the legacy shape: the caller's params (a progress token
/// in `_meta` included) without the 2026 `_meta` keys — a dual-era server
/// would take a body carrying the modern protocol version for a modern
/// request —, its budget (written when it is sent), the session's headers.
pub(super) fn prepare(
    inner: &Inner,
    legacy: &Legacy,
    id: &RequestId,
    method: &str,
    params: Option<&RawValue>,
    budget: Option<WireBudget>,
) -> Result<Outgoing, HttpClientError> {
    let invalid = |e: serde_json::Error| HttpClientError::InvalidRequest(e.to_string());
    let stripped = match params.map(|p| serde_json::from_str::<serde_json::Value>(p.get())) {
        Some(Ok(serde_json::Value::Object(mut obj))) => {
            if let Some(serde_json::Value::Object(meta)) = obj.get_mut("_meta") {
                for key in [
                    PROTOCOL_VERSION_META,
                    CLIENT_INFO_META,
                    CLIENT_CAPABILITIES_META,
                ] {
                    meta.remove(key);
                }
                if meta.is_empty() {
                    obj.remove("_meta");
                }
            }
            Some(serde_json::value::to_raw_value(&obj).map_err(invalid)?)
        }
        _ => params.map(ToOwned::to_owned),
    };
    let mut head = legacy
        .request(inner, http::Method::POST)
        .body(())
        .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?;
    add_extra_headers(inner, &mut head);
    Ok(Outgoing::new(
        head,
        WireRequest::new(id.clone(), method, stripped, budget),
    ))
}

/// Posts `notifications/cancelled` for the request of `lease` in the legacy
/// session, in a task (the caller is not held up), bounded in time and in
/// number; the id stays in flight until then, so that a later call under it
/// is not the one cancelled.
pub(super) fn spawn_cancel(
    inner: &Arc<Inner>,
    legacy: &Arc<Legacy>,
    lease: Lease,
    reason: &CancelReason,
) {
    let id = lease.id();
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(request_id = %id, "no runtime to post notifications/cancelled");
        return;
    };
    let Ok(permit) = inner.pending_cancels.clone().try_acquire_owned() else {
        tracing::warn!(request_id = %id, max = MAX_PENDING_CANCELS, "too many cancellations under way; notifications/cancelled not sent");
        return;
    };
    let req = jsonrpc::encode_cancelled(id, reason.to_string())
        .map_err(|e| e.to_string())
        .and_then(|body| {
            let mut req = legacy
                .request(inner, http::Method::POST)
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| e.to_string())?;
            add_extra_headers(inner, &mut req);
            Ok(req)
        });
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(request_id = %id, error = %e, "notifications/cancelled not sent");
            return;
        }
    };
    let client = inner.client.clone();
    handle.spawn(async move {
        let (_permit, id) = (permit, lease.id().clone());
        let _lease = lease;
        match tokio::time::timeout(BACKGROUND_POST_TIMEOUT, send(&client, req)).await {
            Ok(Ok(res)) => {
                tracing::debug!(request_id = %id, status = %res.status(), "notifications/cancelled posted")
            }
            Ok(Err(e)) => {
                tracing::debug!(request_id = %id, error = %e, "notifications/cancelled not delivered")
            }
            Err(_) => tracing::debug!(request_id = %id, "notifications/cancelled timed out"),
        }
    });
}

/// `DELETE` of the session: awaited (`HttpClient::close`).
pub(super) async fn delete(inner: &Inner, legacy: &Legacy) -> Result<(), BoxError> {
    let mut req = legacy
        .request(inner, http::Method::DELETE)
        .body(Full::new(Bytes::new()))?;
    add_extra_headers(inner, &mut req);
    let res = tokio::time::timeout(BACKGROUND_POST_TIMEOUT, send(&inner.client, req))
        .await
        .map_err(|_| {
            HttpClientError::InvalidResponse("DELETE of the session timed out".into())
        })??;
    tracing::debug!(status = %res.status(), "legacy session deleted");
    Ok(())
}

/// `DELETE` of the session from a task, bounded in time: when the last
/// clone of the client is dropped without
/// [`HttpClient::close`](super::HttpClient::close), or a handshake did not
/// complete ([`Unkept`], which holds `permit` of the bounded background
/// requests for it).
pub(super) fn spawn_delete(
    inner: &Inner,
    legacy: Arc<Legacy>,
    permit: Option<OwnedSemaphorePermit>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::debug!("no runtime to DELETE the legacy session; it will expire on the server");
        return;
    };
    let req = legacy
        .request(inner, http::Method::DELETE)
        .body(Full::new(Bytes::new()));
    let Ok(mut req) = req else { return };
    add_extra_headers(inner, &mut req);
    let client = inner.client.clone();
    handle.spawn(async move {
        let _permit = permit;
        match tokio::time::timeout(BACKGROUND_POST_TIMEOUT, send(&client, req)).await {
            Ok(Ok(res)) => tracing::debug!(status = %res.status(), "legacy session deleted"),
            Ok(Err(e)) => tracing::debug!(error = %e, "DELETE of the legacy session not delivered"),
            Err(_) => tracing::debug!("DELETE of the legacy session timed out"),
        }
    });
}

#[cfg(test)]
mod tests;
