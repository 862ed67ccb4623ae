//! The response future of [`Tasks`](super::Tasks), and the race that turns
//! a call into a task.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use serde::Serialize;
use serde_json::Value;

use super::context::{Phase, TaskCore};
use super::executor::{catching_panics, to_value, RecordSeed};
use super::record::EXTENSION;
use super::shared::Shared;
use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::ErrorObject;
use crate::{CancelReason, Cancellation};

/// What a [`Tasks`](super::Tasks) service answers: the inner service's response, or an
/// answer of its own (a `CreateTaskResult`, a `tasks/*` result, a
/// `server/discover` result with the extension added). Serializes as the
/// one it holds.
#[derive(Clone, Debug, PartialEq)]
pub enum TasksResponse<R> {
    /// The inner service's response, untouched.
    Inner(R),
    /// An answer of the tasks layer.
    Tasks(Value),
}

impl<R: Serialize> Serialize for TasksResponse<R> {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        match self {
            Self::Inner(r) => r.serialize(s),
            Self::Tasks(v) => v.serialize(s),
        }
    }
}

pin_project! {
    /// The response future of [`Tasks`](super::Tasks).
    pub struct ResponseFuture<F, R> {
        #[pin]
        kind: Kind<F, R>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, R> {
        // Passed through.
        Inner { #[pin] fut: F },
        // `server/discover`: the extension added to the answer.
        Discover { #[pin] fut: F },
        // An answer of the layer's own, or a call that may become a task.
        Boxed { fut: BoxFuture<'static, Result<TasksResponse<R>, BoxError>> },
        Error { error: Option<ErrorObject>, _r: PhantomData<fn() -> R> },
    }
}

impl<F, R> ResponseFuture<F, R> {
    pub(crate) fn inner(fut: F) -> Self {
        Self {
            kind: Kind::Inner { fut },
        }
    }

    pub(crate) fn discover(fut: F) -> Self {
        Self {
            kind: Kind::Discover { fut },
        }
    }

    pub(crate) fn error(error: ErrorObject) -> Self {
        Self {
            kind: Kind::Error {
                error: Some(error),
                _r: PhantomData,
            },
        }
    }

    pub(crate) fn boxed<T>(fut: impl Future<Output = Result<T, BoxError>> + Send + 'static) -> Self
    where
        T: Into<TasksResponse<R>>,
    {
        Self {
            kind: Kind::Boxed {
                fut: Box::pin(async move { fut.await.map(Into::into) }),
            },
        }
    }
}

impl<R> From<Value> for TasksResponse<R> {
    fn from(v: Value) -> Self {
        TasksResponse::Tasks(v)
    }
}

impl<F, R, E> Future for ResponseFuture<F, R>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
    R: Serialize,
{
    type Output = Result<TasksResponse<R>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { fut } => fut
                .poll(cx)
                .map(|out| out.map(TasksResponse::Inner).map_err(Into::into)),
            KindProj::Discover { fut } => {
                let out = ready!(fut.poll(cx)).map_err(Into::into)?;
                Poll::Ready(Ok(TasksResponse::Tasks(advertise(&out)?)))
            }
            KindProj::Boxed { fut } => fut.as_mut().poll(cx),
            KindProj::Error { error, .. } => Poll::Ready(Err(error
                .take()
                .map_or_else(|| "polled after completion".into(), Into::into))),
        }
    }
}

/// A `server/discover` result with the extension in its capabilities.
fn advertise<R: Serialize>(result: &R) -> Result<Value, BoxError> {
    let mut value = serde_json::to_value(result)?;
    if let Some(obj) = value.as_object_mut() {
        let caps = obj
            .entry("capabilities")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(caps) = caps.as_object_mut() {
            let ext = caps
                .entry("extensions")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(ext) = ext.as_object_mut() {
                ext.entry(EXTENSION)
                    .or_insert_with(|| Value::Object(Default::default()));
            }
        }
    }
    Ok(value)
}

/// Cancels the work when the creating request's future is dropped before
/// the task was announced: before promotion with the request's own reason
/// (or a disconnect), after it (the client will never learn the task's
/// id) likewise.
struct CallGuard {
    core: Arc<TaskCore>,
    outer: Option<Cancellation>,
    armed: bool,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let reason = self
            .outer
            .as_ref()
            .and_then(|c| c.reason().cloned())
            .unwrap_or(CancelReason::ClientDisconnected);
        self.core.cancellation.cancel(reason);
        if self.core.phase() == Phase::Request {
            self.core.set_phase(Phase::Gone);
        }
    }
}

/// Runs a call that may become a task: the handler runs at once; if it
/// ends within the policy's delay it is answered as a plain request, else
/// (or as soon as it asks for input) its future goes to the executor and
/// the call is answered with the `CreateTaskResult` once the task's record
/// exists.
///
/// The task is announced only if the creating request is still wanted
/// then: a cancel of the creating request at any instant before (during
/// the delay, during the record's write — also while a transport polls
/// this future through its grace) cancels the task, whose work is dropped
/// and whose record, if written, ends `cancelled`.
pub(crate) async fn promote<F, R, E>(
    layer: Shared,
    core: Arc<TaskCore>,
    outer: Option<Cancellation>,
    work: F,
    after: Duration,
    seed: RecordSeed,
) -> Result<TasksResponse<R>, BoxError>
where
    F: Future<Output = Result<R, E>> + Send + 'static,
    E: Into<BoxError>,
    R: Serialize + Send + 'static,
{
    let mut guard = CallGuard {
        core: core.clone(),
        outer: outer.clone(),
        armed: true,
    };
    let mut work = catching_panics(async move { to_value(work.await.map_err(Into::into)) });
    let timer = tokio::time::sleep(after);
    tokio::pin!(timer);
    let mut outer_cancelled = false;
    loop {
        let outer_cancel = async {
            match &outer {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            out = work.as_mut() => {
                guard.armed = false;
                core.cancellation.complete();
                core.set_phase(Phase::Gone);
                return out.map(TasksResponse::Tasks);
            }
            // Cancelled before it became a task: the work's token fires too,
            // and whoever cancelled drops this future (after its grace).
            reason = outer_cancel, if !outer_cancelled => {
                outer_cancelled = true;
                core.cancellation.cancel(reason);
            }
            () = &mut timer, if !outer_cancelled => break,
            () = core.promote.notified(), if !outer_cancelled => break,
        }
    }
    let created = layer
        .executor
        .spawn(core.clone(), work, seed, &layer.config.run)?;
    let outer_cancel = async {
        match &outer {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let record = tokio::select! {
        biased;
        // Cancelled while the record is written (a transport polling this
        // future through its grace would never write the answer): the
        // runner ends the task `cancelled` and drops its work.
        reason = outer_cancel => {
            core.cancellation.cancel(reason.clone());
            return Err(Cancelled::new(reason).into());
        }
        created = created => created,
    };
    let record = record
        .map_err(|_| ErrorObject::new(ErrorObject::INTERNAL_ERROR, "task runner ended"))?
        .map_err(|e| ErrorObject::new(ErrorObject::INTERNAL_ERROR, e.to_string()))?;
    // A cancel that landed as the record was answered: the answer would
    // not be written either.
    if let Some(reason) = outer.as_ref().and_then(|c| c.reason().cloned()) {
        core.cancellation.cancel(reason.clone());
        return Err(Cancelled::new(reason).into());
    }
    guard.armed = false;
    Ok(TasksResponse::Tasks(record.to_json(Some("task"))))
}
