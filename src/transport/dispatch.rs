//! The server-side handling every transport shares: turning a decoded
//! request into an [`McpRequest`] with its contracts in the extensions, and a
//! finished call into the bytes to write (or none).

use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{server_answer, BoxError, ServerAnswer};
use crate::jsonrpc::{self, RawRequest, RequestId};
use crate::notify::{Notifier, Outgoing};
use crate::{Cancellation, McpRequest, RequestView};

/// Builds the request the service sees: the [`Cancellation`] (the transport's
/// cancel signal and the handler's token) and a [`Notifier`] in its
/// extensions.
pub fn prepare(
    raw: RawRequest,
    cancellation: Cancellation,
    tx: mpsc::Sender<Outgoing>,
) -> McpRequest {
    let notifier = Notifier::new(tx, raw.progress_token.clone(), cancellation.clone());
    let mut req = McpRequest::from(raw);
    req.set_cancellation(cancellation);
    req.extensions_mut().insert(notifier);
    req
}

/// The encoded answer for a finished call, or `None` when nothing must be
/// written (the request was cancelled).
pub fn answer<T: Serialize>(id: &RequestId, outcome: Result<T, BoxError>) -> Option<Vec<u8>> {
    match outcome {
        Ok(result) => Some(jsonrpc::encode_response(Some(id), Ok(&result))),
        Err(e) => match server_answer(&*e) {
            ServerAnswer::Nothing => None,
            ServerAnswer::Error(err) => Some(jsonrpc::encode_response::<()>(Some(id), Err(&err))),
        },
    }
}

/// Encodes an error response without an `id`, for a message whose id could
/// not be read (unparseable or oversize line). The 2026-07-28 schema makes
/// `id` optional on error responses for exactly this case.
pub fn encode_error_without_id(error: &crate::jsonrpc::ErrorObject) -> Vec<u8> {
    jsonrpc::encode_response::<()>(None, Err(error))
}

/// The result a server sends when it ends a `subscriptions/listen` stream
/// itself: the handler's `result` (an object; anything else becomes `{}`)
/// with `resultType: "complete"` and
/// `_meta["io.modelcontextprotocol/subscriptionId"] = id` added when absent.
pub fn listen_result(id: &RequestId, result: serde_json::Value) -> serde_json::Value {
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
