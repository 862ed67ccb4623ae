//! The end of a request: what it writes, and when its id is free again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::cancel::InFlightGuard;
use crate::error::BoxError;
use crate::jsonrpc;
use crate::notify::outbox::{Outgoing, Scope};
use crate::transport::call::server::{Ending, ServerCall};
use crate::transport::stdio::schedule::{Hold, Running};

/// How many of a connection's requests are in their cooperative grace:
/// answered (their ids free again), their handlers still polled. They
/// count toward the connection's in-flight bound.
#[derive(Clone, Debug, Default)]
pub(super) struct InGrace(Arc<AtomicUsize>);

impl InGrace {
    pub(super) fn len(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// Counts one request in its grace until the guard is dropped.
    fn enter(&self) -> InGraceGuard {
        self.0.fetch_add(1, Ordering::AcqRel);
        InGraceGuard(self.0.clone())
    }
}

pub(super) struct InGraceGuard(Arc<AtomicUsize>);

impl Drop for InGraceGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's call, boxed once for its task.
pub(super) type Call<F, T> = Pin<Box<ServerCall<F, T>>>;

/// Drives the cooperative grace of a request whose ending was written
/// (see [`ServerCall`]), counted in `in_grace` meanwhile.
pub(super) async fn run_grace<F, T>(mut call: Call<F, T>, counted: Option<InGraceGuard>)
where
    F: Future<Output = Result<T, BoxError>>,
    T: Serialize,
{
    std::future::poll_fn(|cx| call.as_mut().poll_grace(cx)).await;
    drop(counted);
}

/// Counts `call` in `in_grace` if it is in its grace (before its id is let
/// go, so that it never counts toward neither).
pub(super) fn count_grace<F, T>(call: &Call<F, T>, in_grace: &InGrace) -> Option<InGraceGuard>
where
    F: Future<Output = Result<T, BoxError>>,
    T: Serialize,
{
    call.in_grace().then(|| in_grace.enter())
}

/// Awaits one request's end and writes it: its response (or the teardown
/// of a listen stream) closes the request's scope as it is queued, so
/// nothing of the request can follow it; a request the transport cancelled
/// gets nothing. The registry entry goes last, so that the id cannot be
/// reused before its answer is queued; the request counts as `running`
/// until then. After each poll of the request it ends the writer's hold
/// if that is due: handlers that keep computing must not keep a held
/// answer waiting (see [`Hold`]).
///
/// A request cancelled with a cooperative grace is then driven through it
/// here, counted in `in_grace`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn finish_request<F, T>(
    mut call: Call<F, T>,
    scope: Scope,
    guard: InFlightGuard,
    tx: mpsc::Sender<Outgoing>,
    running: Running,
    hold: Arc<Hold>,
    in_grace: InGrace,
) where
    F: Future<Output = Result<T, BoxError>>,
    T: Serialize,
{
    let ending = hold.checked(call.as_mut()).await;
    let counted = count_grace(&call, &in_grace);
    end_request(ending, scope, guard, &tx).await;
    if counted.is_some() {
        run_grace(call, counted).await;
    }
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
