//! One server request from decode to its end.
//!
//! [`prepare`] builds the request the service sees; [`run`] races the
//! handler against its [`Cancellation`] with the
//! [`CancelOnDisconnect`](crate::cancel::CancelOnDisconnect) layer's own
//! future and decides the one [`Ending`]. The transports only render it:
//! stdio writes a line (or nothing), HTTP a JSON body, an SSE event, or a
//! status.
//!
//! # What ends a request on the wire
//!
//! | how the request ended | [`Ending`] |
//! | --- | --- |
//! | the handler returned `Ok(result)` | `Respond` with the result; for `subscriptions/listen`, with `resultType: "complete"` and `_meta["io.modelcontextprotocol/subscriptionId"]` added if absent |
//! | the handler returned an error, or ended as [`Cancelled`] on its own, or a limit inside the stack fired | `Respond` with the JSON-RPC error (a `Cancelled` nobody asked for is `-32603`) |
//! | a `subscriptions/listen` ended as [`Cancelled`] without a transport cancel | `TearDown`: `notifications/cancelled` referencing it (HTTP: as the stream's last event) |
//! | the transport cancelled it: the peer's `notifications/cancelled`, the transport closed | `Silent`: nothing at all (a disconnect drops the call: nothing is decided) |
//! | the server shut down | `Silent`, except a `subscriptions/listen`, which gets its graceful result (`Respond`) |

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde::Serialize;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use crate::cancel::future::ResponseFuture;
use crate::cancel::guard::DisconnectGuard;
use crate::cancel::Passthrough;
use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::{self, ErrorObject, ParamsView, RawRequest, RequestId};
use crate::notify::outbox::{Outgoing, Scope};
use crate::notify::Notifier;
use crate::observe::record::{Record, SpanParams};
use crate::observe::{Era, Outcome, Side, Transport};
use crate::{CancelReason, Cancellation, McpRequest, RequestView};

/// A request service the server transports can drive: a cloneable, sendable
/// `tower::Service<McpRequest>` whose response serializes to the JSON-RPC
/// `result` and whose error converts to a [`BoxError`].
///
/// Implemented for every type that fits (it only names the bound); it is
/// sealed, so it cannot be implemented otherwise. A `ServiceBuilder` stack
/// over `service_fn(handler)` is one.
pub trait McpService:
    Service<McpRequest, Response: Serialize, Error: Into<BoxError>, Future: Send + 'static>
    + Clone
    + Send
    + sealed::Sealed
    + 'static
{
}

impl<S> McpService for S where
    S: Service<McpRequest, Response: Serialize, Error: Into<BoxError>, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

mod sealed {
    /// Keeps [`McpService`](super::McpService) a name for its bound only.
    pub trait Sealed {}
    impl<S> Sealed for S {}
}

/// How a request ends on the wire. Decided once, by [`run`].
#[derive(Debug)]
pub(crate) enum Ending {
    /// Write this response (a result or an error).
    Respond {
        /// The encoded response.
        bytes: Vec<u8>,
        /// Its JSON-RPC error code, for an error (HTTP maps some to statuses).
        #[cfg_attr(not(feature = "http"), allow(dead_code))]
        error_code: Option<i64>,
    },
    /// A `subscriptions/listen` stream torn down by the server without a
    /// result, for this reason: both transports send `notifications/cancelled`.
    TearDown(String),
    /// Write nothing: the transport cancelled the request, for this reason
    /// (HTTP answers a shutdown before the first byte with `503`).
    Silent(#[cfg_attr(not(feature = "http"), allow(dead_code))] CancelReason),
}

/// Builds the request the service sees, with its [`Cancellation`] and a
/// [`Notifier`] that sends through `scope` into `tx`.
pub(crate) fn prepare(
    raw: RawRequest,
    scope: &Scope,
    tx: tokio::sync::mpsc::Sender<Outgoing>,
) -> McpRequest {
    let notifier = Notifier::new(tx, raw.progress_token.clone(), scope.clone());
    let mut req = McpRequest::from(raw);
    req.set_cancellation(scope.cancellation().clone());
    req.extensions_mut().insert(notifier);
    req
}

/// Runs one request to its end: readies and calls `service`, races the call
/// against the request's cancellation (the cancel is checked first, so a
/// processed cancel is never followed by the handler's answer), turns a
/// panic into an internal error, and decides the [`Ending`].
///
/// The request's span (see [`observe`](crate::observe)) is opened here,
/// its fields from `params` read from `view` (the decode's, not parsed
/// again), the handler runs inside it, and its [`Outcome`] is recorded when the
/// ending is decided — or, if the future is dropped first, the outcome of
/// the drop.
///
/// Dropping the returned future drops the handler and fires the token with
/// [`CancelReason::ClientDisconnected`], unless the request's cancellation
/// already holds a reason (a shutdown, a limit).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<S>(
    mut service: S,
    req: McpRequest,
    view: ParamsView<'_>,
    id: RequestId,
    cancellation: Cancellation,
    is_listen: bool,
    transport: Transport,
    era: Option<Era>,
) -> impl Future<Output = Ending> + Send + 'static
where
    S: Service<McpRequest> + Send + 'static,
    S::Response: Serialize,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let record = Record::start(
        Side::Server,
        transport,
        era,
        Some(&id),
        req.method(),
        SpanParams::Viewed(view),
    )
    .with_cancellation(cancellation.clone());
    let span = record.span().clone();
    let guard = DisconnectGuard::new(cancellation.clone());
    let call = AssertUnwindSafe(async move {
        service.ready().await.map_err(Into::into)?;
        service.call(req).await.map_err(Into::into)
    })
    .catch_unwind()
    .map(|out| out.unwrap_or_else(|_panic| Err(Box::new(Panicked) as BoxError)));
    let raced = ResponseFuture::<_, Passthrough>::new(call, guard);
    async move {
        let out: Result<S::Response, BoxError> = raced.await;
        let (ending, outcome) = ending(&id, is_listen, &cancellation, out);
        record.end(&outcome);
        ending
    }
    .instrument(span)
}

/// The handler panicked.
#[derive(Debug)]
struct Panicked;

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Internal error: handler panicked")
    }
}

impl std::error::Error for Panicked {}

/// Whether the transport itself cancelled the request, so that the peer
/// must hear nothing more of it; other reasons (a limit inside the stack,
/// the handler's own) are answered.
///
/// [`CancelReason::ClientDisconnected`] is not among them: a real
/// disconnect drops the call, so no answer is decided at all, and the
/// reason seen here can only come from a guard inside the stack dropped
/// without a reason (a handler that panicked through a layer): that
/// request is still answered.
fn cancelled_by_transport(reason: &CancelReason) -> bool {
    matches!(
        reason,
        CancelReason::Peer(_) | CancelReason::TransportClosed | CancelReason::Shutdown
    )
}

/// The one decision of what ends a request (see the module docs' table),
/// and the request's [`Outcome`].
fn ending<T: Serialize>(
    id: &RequestId,
    is_listen: bool,
    cancellation: &Cancellation,
    out: Result<T, BoxError>,
) -> (Ending, Outcome) {
    if let Some(reason) = cancellation.reason().filter(|r| cancelled_by_transport(r)) {
        let outcome = Outcome::from_reason(reason);
        if is_listen && *reason == CancelReason::Shutdown {
            tracing::debug!(request_id = %id, "server shutting down: subscriptions/listen ended gracefully");
            return (
                respond(id, Ok(listen_result(id, serde_json::json!({})))),
                outcome,
            );
        }
        tracing::debug!(request_id = %id, %reason, "request cancelled; nothing written for it");
        return (Ending::Silent(reason.clone()), outcome);
    }
    let outcome = Outcome::of(&out);
    let ending = match out {
        Ok(result) if is_listen => match serde_json::to_value(&result) {
            Ok(value) => respond(id, Ok(listen_result(id, value))),
            Err(e) => {
                let err = internal(format!("result not serializable: {e}"));
                return (respond::<()>(id, Err(err)), error_outcome());
            }
        },
        Ok(result) => respond(id, Ok(result)),
        Err(e) if is_listen && e.is::<Cancelled>() => {
            // The server tore the stream down without a result: the one case
            // in which a server sends notifications/cancelled.
            let reason = e
                .downcast_ref::<Cancelled>()
                .map(|c| c.reason().to_string())
                .unwrap_or_default();
            tracing::debug!(request_id = %id, reason = %reason, "subscription torn down by the server");
            Ending::TearDown(reason)
        }
        Err(e) => {
            if e.is::<Panicked>() {
                tracing::error!(request_id = %id, "handler panicked");
            }
            let err = ErrorObject::of_error(&*e);
            let code = err.code;
            let ending = respond::<()>(id, Err(err));
            // What the peer is told: an error with this code (a `Cancelled`
            // nobody asked for, or a panic, is answered -32603).
            let outcome = match outcome {
                Outcome::TimedOut(_) => outcome,
                _ => Outcome::Error { code: Some(code) },
            };
            return (ending, outcome);
        }
    };
    (ending, outcome)
}

fn error_outcome() -> Outcome {
    Outcome::Error {
        code: Some(ErrorObject::INTERNAL_ERROR),
    }
}

fn respond<T: Serialize>(id: &RequestId, outcome: Result<T, ErrorObject>) -> Ending {
    let error_code = outcome.as_ref().err().map(|e| e.code);
    let bytes = match &outcome {
        Ok(result) => jsonrpc::encode_response(Some(id), Ok(result)),
        Err(err) => jsonrpc::encode_response::<()>(Some(id), Err(err)),
    };
    Ending::Respond { bytes, error_code }
}

fn internal(message: String) -> ErrorObject {
    ErrorObject::new(ErrorObject::INTERNAL_ERROR, message)
}

/// The result a server sends when a `subscriptions/listen` stream ends:
/// the handler's `result` (an object; anything else becomes `{}`) with
/// `resultType: "complete"` and
/// `_meta["io.modelcontextprotocol/subscriptionId"] = id` added when absent.
fn listen_result(id: &RequestId, result: serde_json::Value) -> serde_json::Value {
    let mut obj = match result {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    obj.entry("resultType")
        .or_insert_with(|| serde_json::Value::from("complete"));
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = serde_json::Value::Object(Default::default());
    }
    if let serde_json::Value::Object(meta) = meta {
        meta.entry(jsonrpc::SUBSCRIPTION_ID_META)
            .or_insert_with(|| serde_json::to_value(id).unwrap_or_default());
    }
    serde_json::Value::Object(obj)
}

/// Encodes an error response without an `id`: for a message whose id could
/// not be read, and for one whose id belongs to another request in flight
/// (answering with it would look like that request's answer). The
/// 2026-07-28 schema makes `id` optional on error responses.
pub(crate) fn encode_error_without_id(error: &ErrorObject) -> Vec<u8> {
    jsonrpc::encode_response::<()>(None, Err(error))
}
