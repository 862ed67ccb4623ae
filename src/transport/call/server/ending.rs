//! The one decision of what ends a request on the wire (the table in the
//! [parent module's docs](super)), and the bytes of an error that has no id.

use serde::Serialize;

use super::Ending;
use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::{self, ErrorObject, RequestId};
use crate::observe::Outcome;
use crate::{CancelReason, Cancellation};

/// The handler panicked.
#[derive(Debug)]
pub(super) struct Panicked;

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
pub(super) fn ending<T: Serialize>(
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
