//! What the endpoint does with the session of a request: `DELETE`, a
//! POSTed notification, and the session a legacy request belongs to (looked
//! up, or minted by `initialize`). Each failure is a [`Rejection`].
//!
//! Apart from [`session`](super::session), the sessions' store, which the
//! configuration holds: this module answers with response bodies, and those
//! are above the configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::body::ResponseBody;
use super::headers::MCP_SESSION_ID_HEADER;
use super::response;
use super::session::{CreateError, Session, Sessions};
use super::validation::Rejection;
use crate::jsonrpc::{self, ErrorObject, RawNotification, RequestId};
use crate::transport::call::server::Ending;
use crate::CancelReason;

/// The session id a request carries; a header that is not visible ASCII
/// names no session the server could have minted. A repeated one is a
/// `400`: which session the request belongs to must not depend on which
/// copy a reader takes.
fn session_id(headers: &HeaderMap) -> Option<Result<&str, Rejection>> {
    let mut values = headers.get_all(&MCP_SESSION_ID_HEADER).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return Some(Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            None,
            ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Bad Request: the Mcp-Session-Id header is sent more than once",
            ),
        )));
    }
    Some(
        value
            .to_str()
            .ok()
            .filter(|v| !v.is_empty() && v.bytes().all(|b| (0x21..=0x7e).contains(&b)))
            .ok_or_else(not_found),
    )
}

/// `404` with a JSON-RPC error: the session does not exist (any more); the
/// 2025 revisions tell the client to initialize again.
fn not_found() -> Rejection {
    Rejection::new(
        StatusCode::NOT_FOUND,
        None,
        ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            "Not Found: no such session (unknown, ended or expired); send initialize again",
        ),
    )
}

/// `DELETE` on the endpoint: ends the session it names, cancelling its
/// calls in flight (`200`); `404` for an unknown one, `400` without one.
pub(crate) fn delete(
    sessions: &Sessions,
    headers: &HeaderMap,
) -> Result<Response<ResponseBody>, Rejection> {
    let Some(id) = session_id(headers) else {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            None,
            ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Bad Request: DELETE needs the Mcp-Session-Id header of the session to end",
            ),
        ));
    };
    let id = id?;
    let cancelled = sessions.end(id).ok_or_else(not_found)?;
    tracing::info!(cancelled, "legacy session ended by the client (DELETE)");
    Ok(response::plain(StatusCode::OK))
}

/// A notification POSTed with a session id: the session must exist (`404`
/// otherwise); a `notifications/cancelled` cancels that session's request
/// with the id it names. Without a session id, nothing happens (`202`
/// follows either way).
pub(crate) fn notification(
    sessions: &Sessions,
    headers: &HeaderMap,
    n: &RawNotification,
) -> Result<(), Rejection> {
    let Some(id) = session_id(headers) else {
        if n.method == jsonrpc::CANCELLED {
            tracing::debug!("notifications/cancelled without a session id ignored (nothing to resolve its request id in)");
        }
        return Ok(());
    };
    let session = sessions.get(id?).ok_or_else(not_found)?;
    if let Some((request_id, reason)) = n.cancel_request() {
        let cancelled = session.cancel(&request_id, reason.clone());
        tracing::info!(%request_id, %reason, cancelled, "notifications/cancelled from a legacy session");
    }
    Ok(())
}

/// The session of a legacy request: the one its `Mcp-Session-Id` names
/// (`404` if unknown or expired), a new one for an `initialize` without
/// one, or none (a 2025 request outside any session is served as before).
pub(crate) fn of_request(
    sessions: &Sessions,
    headers: &HeaderMap,
    method: &str,
) -> Result<Option<Opened>, Rejection> {
    if let Some(id) = session_id(headers) {
        let session = sessions.get(id?).ok_or_else(not_found)?;
        return Ok(Some(Opened {
            session,
            minted: false,
            finished: AtomicBool::new(false),
        }));
    }
    if method != "initialize" {
        return Ok(None);
    }
    match sessions.create() {
        Ok(session) => {
            tracing::info!("legacy session opened by initialize");
            Ok(Some(Opened {
                session,
                minted: true,
                finished: AtomicBool::new(false),
            }))
        }
        Err(e) => {
            let status = match e {
                CreateError::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
                CreateError::Random(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            tracing::warn!(error = %e, "legacy initialize refused");
            Err(Rejection::new(
                status,
                None,
                ErrorObject::new(ErrorObject::INTERNAL_ERROR, e.to_string()),
            ))
        }
    }
}

/// A request's session, and whether this request minted it.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) session: Arc<Session>,
    pub(crate) minted: bool,
    /// Whether [`finish`](Self::finish) ran: a minted session dropped
    /// before it (the client went away) never gave out its id.
    finished: AtomicBool,
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.minted && !self.finished.load(Ordering::Relaxed) {
            tracing::debug!("legacy initialize dropped before its answer; its session ended");
            self.session.end(CancelReason::TransportClosed);
        }
    }
}

impl Opened {
    /// Finishes the answer to the request that minted the session: the
    /// new `Mcp-Session-Id` goes only on a response that carries an
    /// `InitializeResult` — a successful status and a session that
    /// [`settle`](Self::settle) has not ended (a JSON answer is settled
    /// before it gets here). After a failed one the session is ended, so a
    /// refused `initialize` holds no place under the bound.
    pub(crate) fn finish(&self, sessions: &Sessions, res: &mut Response<ResponseBody>) {
        if !self.minted {
            return;
        }
        self.finished.store(true, Ordering::Relaxed);
        match HeaderValue::from_str(self.session.id()) {
            Ok(v) if res.status().is_success() && !self.session.is_ended() => {
                res.headers_mut().insert(MCP_SESSION_ID_HEADER, v);
            }
            _ => {
                sessions.end(self.session.id());
            }
        }
    }

    /// What settles the handshake once the minting `initialize` ended, or
    /// `None` for a request that minted nothing.
    pub(crate) fn handshake(&self, sessions: &Arc<Sessions>) -> Option<Handshake> {
        self.minted.then(|| Handshake {
            sessions: sessions.clone(),
            session: self.session.clone(),
        })
    }
}

/// The session an `initialize` minted, until that `initialize` is answered.
#[derive(Debug)]
pub(crate) struct Handshake {
    sessions: Arc<Sessions>,
    session: Arc<Session>,
}

impl Handshake {
    /// Ends the session unless the `initialize` was answered with a result:
    /// an error (e.g. `-32602` "Unsupported protocol version") is HTTP 200
    /// like any other, and a streamed answer had its headers, and the id,
    /// sent before it was known.
    pub(crate) fn settle(self, ending: &Ending) {
        if !matches!(
            ending,
            Ending::Respond {
                error_code: None,
                ..
            }
        ) {
            tracing::debug!("legacy initialize not answered with a result; its session ended");
            self.sessions.end(self.session.id());
        }
    }
}

/// A request whose id is already in flight in its session: refused without
/// that id (an answer carrying it would look like the running request's).
pub(crate) fn duplicate(id: &RequestId) -> Rejection {
    Rejection::new(
        StatusCode::BAD_REQUEST,
        None,
        ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            format!("Invalid Request: a request with id {id} is already in flight in this session"),
        ),
    )
}

/// The session ended between the lookup and the call (a concurrent
/// `DELETE` or expiry).
pub(crate) fn ended() -> Rejection {
    not_found()
}
