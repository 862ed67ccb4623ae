//! The end of a request: what it writes, and when its id is free again.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::cancel::InFlightGuard;
use crate::jsonrpc;
use crate::notify::outbox::{Outgoing, Scope};
use crate::transport::call::server::Ending;
use crate::transport::stdio::schedule::{Hold, Running};

/// Awaits one request's end and writes it: its response (or the teardown
/// of a listen stream) closes the request's scope as it is queued, so
/// nothing of the request can follow it; a request the transport cancelled
/// gets nothing. The registry entry goes last, so that the id cannot be
/// reused before its answer is queued; the request counts as `running`
/// until then. After each poll of the request it ends the writer's hold
/// if that is due: handlers that keep computing must not keep a held
/// answer waiting (see [`Hold`]).
pub(super) async fn finish_request(
    call: impl Future<Output = Ending>,
    scope: Scope,
    guard: InFlightGuard,
    tx: mpsc::Sender<Outgoing>,
    running: Running,
    hold: Arc<Hold>,
) {
    let ending = hold.checked(call).await;
    end_request(ending, scope, guard, &tx).await;
    drop(running);
}

/// Writes a request's [`Ending`] (see [`finish_request`]).
async fn end_request(
    ending: Ending,
    scope: Scope,
    guard: InFlightGuard,
    tx: &mpsc::Sender<Outgoing>,
) {
    match last_message(ending, &guard) {
        Some(bytes) => scope.end_with(tx.reserve().await.ok(), Some(bytes)),
        None => scope.end(),
    }
    drop(guard);
}

/// What a request's [`Ending`] writes, if anything.
pub(super) fn last_message(ending: Ending, guard: &InFlightGuard) -> Option<Vec<u8>> {
    match ending {
        Ending::Respond { bytes, .. } => Some(bytes),
        Ending::TearDown(reason) => jsonrpc::encode_cancelled(guard.id(), reason).ok(),
        Ending::Silent(_) => None,
    }
}
