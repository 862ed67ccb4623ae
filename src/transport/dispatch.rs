//! The server-side handling every transport shares: turning a decoded
//! request into an [`McpRequest`] with its contracts in the extensions, and a
//! finished call into the bytes to write (or none).

use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{server_answer, BoxError, ServerAnswer};
use crate::jsonrpc::{self, RawRequest, RequestId};
use crate::notify::{Notifier, Outgoing};
use crate::{Cancellation, McpRequest};

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
    req.extensions_mut().insert(cancellation);
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
