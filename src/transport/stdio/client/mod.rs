//! The stdio client service: [`StdioClient`].
//!
//! * `builder`: [`StdioClientBuilder`], and how the client connects.
//! * `tasks`: the writer and reader tasks.
//! * `reserved`: ids of cancelled requests kept from later ones.
//! * `process`: a spawned child's shutdown.

use std::fmt;
use std::io;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tower::Service;
use tracing::Instrument;

use crate::error::BoxError;
use crate::jsonrpc::{self, ErrorObject, RequestId};
use crate::observe::Transport;
use crate::timeout::WireBudget;
use crate::transport::call::client::{outcome, Abandon, CallGuard, Outbound, Pending};
use crate::{CancelReason, McpRequest};

mod builder;
mod process;
mod reserved;
mod tasks;

use builder::NotificationSink;
pub use builder::StdioClientBuilder;
use process::{reap, Handle};
use reserved::Reserved;
use tasks::{Control, Line, Queued, ABANDONED, QUEUED};

/// A `tower::Service` that sends MCP requests over a newline-delimited
/// JSON-RPC stream (a child's stdin/stdout, or any reader/writer pair) and
/// resolves to the `result` of each response.
///
/// * Requests without an id get one, unique among the requests in flight
///   and the reserved ids (below); a request with an id or progress token
///   already in flight (a token counts whether or not anyone listens to its
///   progress), or with a reserved id, fails at once with `-32600`.
/// * The request's `wire_params()` are written, so a progress token that
///   [`ProgressResetLayer`](crate::ProgressResetLayer) assigned is on the
///   wire; `notifications/progress` for it are recorded in the request's
///   [`ProgressTap`](crate::ProgressTap) (or, without one, shown to its
///   [`ProgressObserver`](crate::ProgressObserver)). A request with an
///   observer and no progress token gets one from the client, so an
///   observer sees progress without a `ProgressResetLayer` too.
/// * **Dropping a response future before its response arrived** enqueues
///   `notifications/cancelled` for its id, without blocking, with the reason
///   of the drop: the limit that fired when a
///   [`TimeoutLayer`](crate::TimeoutLayer) or `ProgressResetLayer` above
///   gave up, "caller dropped the request" otherwise. A request that was
///   still queued is simply not written.
/// * **A late response never resolves a later request.** The id of a
///   request cancelled after it was written stays reserved until its late
///   response arrives (which is then dropped, debug log) or, since a server
///   that honours the cancellation sends none, until a bounded time has
///   passed (default 60 s). A call with a
///   reserved id (a caller's own id, [`McpRequest::new`]) fails at once with
///   an `-32600` [`ErrorObject`] and is not sent; ids the client assigns skip
///   reserved ones. At most 1024 ids (by default) are reserved;
///   past that the oldest reservation ends early (only a caller reusing that
///   very id could then be answered by its late response). Both bounds:
///   [`StdioClientBuilder::reserve_cancelled_ids`].
/// * **An answer over the line limit**
///   ([`StdioClientBuilder::max_line_bytes`], 4 MiB by default) is skipped
///   without being held and ends its call at once with an error naming the
///   limit (an [`io::Error`] of kind `InvalidData`); other calls go on. The
///   call is told by the answer's top-level `"id"`, read as the line goes by
///   (at most 1 KiB of it kept). A skipped line whose id cannot be read (not
///   a JSON object, no id, an id that is neither a string nor an integer)
///   ends no call and is logged with a warning: a call it answered then
///   ends by its deadline, so keep a [`TimeoutLayer`](crate::TimeoutLayer)
///   above. An id longer than 1 KiB ends every call in flight whose id is
///   that long. An oversize notification is skipped with a warning.
/// * An error response resolves to `Err` holding the [`ErrorObject`]; a
///   `notifications/cancelled` from the server to `Err` holding
///   [`Cancelled`](crate::Cancelled) — only for a `subscriptions/listen` (the server tore it
///   down), the one request the spec lets a server cancel: one naming any
///   other request is ignored with a warning, and that call goes on. Only
///   an object with a valid `requestId` is a cancellation.
/// * [`spawn`](StdioClientBuilder::spawn) puts the child in a process group
///   of its own on Unix, so a terminal's Ctrl-C reaches the client (which
///   drops its calls, and so cancels them) but not the server.
///
/// Clones share the connection. When the last clone is dropped the
/// connection closes (a child gets EOF on stdin, then is killed after the
/// grace period if it did not exit); [`shutdown`](Self::shutdown) does it
/// explicitly and waits.
#[derive(Clone)]
pub struct StdioClient {
    shared: Arc<Shared>,
    handle: Arc<Handle>,
}

impl fmt::Debug for StdioClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioClient")
            .field("in_flight", &self.shared.lock().pending.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}

struct Shared {
    state: Mutex<State>,
    ctl: mpsc::UnboundedSender<Control>,
    closed: AtomicBool,
    outbound: Outbound,
    sink: Option<NotificationSink>,
    /// The `_meta` key each request's budget is written under, if any.
    budget_key: Option<crate::timeout::BudgetKey>,
}

/// A response (its `result` or error object), or why there is none.
type Outcome = Result<Result<Box<RawValue>, ErrorObject>, BoxError>;

struct State {
    pending: Pending<Waiter>,
    reserved: Reserved,
}

/// What a pending call waits with.
struct Waiter {
    tx: oneshot::Sender<Outcome>,
    /// A `subscriptions/listen`: the one request a server may cancel.
    listen: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self, why: &str) {
        self.closed.store(true, Ordering::Release);
        let pending: Vec<_> = {
            let mut st = self.lock();
            st.reserved.clear();
            st.pending.drain()
        };
        if !pending.is_empty() {
            tracing::info!(
                requests = pending.len(),
                why,
                "stdio client connection closed; failing in-flight requests"
            );
        }
        for p in pending {
            let _ = p.tx.send(Err(closed_error(why)));
        }
    }
}

fn closed_error(why: &str) -> BoxError {
    Box::new(io::Error::new(
        io::ErrorKind::BrokenPipe,
        format!("MCP stdio connection closed: {why}"),
    ))
}

impl StdioClient {
    /// A builder, to configure limits, the shutdown grace and a
    /// notification callback.
    pub fn builder() -> StdioClientBuilder {
        StdioClientBuilder::default()
    }

    /// A client over a reader (the server's output) and a writer (its
    /// input), with the default configuration. Call it inside a tokio
    /// runtime.
    pub fn new<R, W>(reader: R, writer: W) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::builder().connect(reader, writer)
    }

    /// Spawns `command` as the server, with the default configuration.
    pub fn spawn(command: Command) -> io::Result<Self> {
        Self::builder().spawn(command)
    }

    /// Whether the connection is closed (the server's output ended, or
    /// [`shutdown`](Self::shutdown) was called).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The child's stderr, if the command was spawned with
    /// `stderr(Stdio::piped())` and it was not taken yet.
    pub fn take_stderr(&self) -> Option<tokio::process::ChildStderr> {
        self.handle
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|c| c.stderr.take())
    }

    /// Sends a notification to the server (e.g. `notifications/initialized`
    /// after a legacy `initialize` handshake). It is queued without waiting
    /// and written before any request sent after it.
    pub fn notify<P: serde::Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<(), BoxError> {
        if self.is_closed() {
            return Err(closed_error("client is closed"));
        }
        let line = jsonrpc::encode_notification(method, params)?;
        self.shared
            .ctl
            .send(Control::Line(line))
            .map_err(|_| closed_error("writer stopped"))
    }

    /// How many requests are waiting for their response.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// Closes the connection: pending cancellations are written, the
    /// server's input is closed, in-flight calls fail; a child process gets
    /// the grace period to exit, then SIGTERM and the grace period again,
    /// then SIGKILL. Returns the child's
    /// exit status (`None` for a stream pair, or when already shut down).
    pub async fn shutdown(&self) -> io::Result<Option<ExitStatus>> {
        let _ = self.shared.ctl.send(Control::Close);
        self.shared.close("client shut down");
        let child = self
            .handle
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match child {
            Some(mut child) => reap(&mut child, self.handle.grace).await.map(Some),
            None => Ok(None),
        }
    }

    fn start(
        &self,
        mut req: McpRequest,
    ) -> Result<(Call, oneshot::Receiver<Outcome>, Line), BoxError> {
        if self.is_closed() {
            return Err(closed_error("client is closed"));
        }
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            tx,
            listen: req.method() == jsonrpc::SUBSCRIPTIONS_LISTEN,
        };
        let id = {
            let mut st = self.shared.lock();
            let st = &mut *st;
            st.reserved.expire(Instant::now());
            let reserved = &st.reserved;
            st.pending
                .register(
                    &self.shared.outbound,
                    &mut req,
                    |id| reserved.contains(id),
                    waiter,
                )?
                .0
        };
        let cancel = Cancel {
            shared: self.shared.clone(),
            state: Arc::new(AtomicU8::new(QUEUED)),
        };
        let guard = CallGuard::new(id.clone(), &req, cancel, Transport::Stdio, None);
        let budget = WireBudget::of(&req, self.shared.budget_key.as_ref());
        let line = Line::of(id, req.method(), req.wire_params()?, budget)?;
        Ok((guard, rx, line))
    }
}

/// A stdio call, cancelled when dropped before its response arrived.
type Call = CallGuard<Cancel>;

/// Cancelling a stdio call: a call still queued is not written; a written
/// one gets `notifications/cancelled` and its id stays reserved.
struct Cancel {
    shared: Arc<Shared>,
    /// [`QUEUED`], then written or abandoned, whichever comes first.
    state: Arc<AtomicU8>,
}

impl Abandon for Cancel {
    fn abandon(&mut self, id: &RequestId) -> Option<&'static str> {
        // One lock for both: no other request can take the id between its
        // removal and its reservation.
        let mut st = self.shared.lock();
        // None: answered (or the connection closed), nothing to cancel.
        st.pending.take(id)?;
        if self
            .state
            .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            drop(st);
            tracing::debug!(request_id = %id, "request dropped before it was written; not sent");
            return None;
        }
        // Written: its answer may still come; keep it from a later request.
        st.reserved.reserve(id.clone());
        Some("sending notifications/cancelled")
    }

    fn cancel(&mut self, id: &RequestId, reason: CancelReason) {
        let line = jsonrpc::encode_cancelled(id, reason.to_string());
        // An id and a string: the encoding cannot fail.
        let Ok(line) = line else { return };
        if self.shared.ctl.send(Control::Line(line)).is_err() {
            tracing::debug!(request_id = %id, "connection gone; cancellation not sent");
        }
    }
}

impl Service<McpRequest> for StdioClient {
    type Response = serde_json::Value;
    type Error = BoxError;
    /// Boxed; dropping it before it is ready cancels the request.
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<serde_json::Value, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        let started = self.start(req);
        let requests = self.handle.requests.clone();
        let (mut call, rx, line) = match started {
            Ok(started) => started,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let span = call.span();
        Box::pin(
            async move {
                let queued = Queued {
                    line,
                    state: call.abandon().state.clone(),
                };
                let result = if requests.send(queued).await.is_err() {
                    Err(closed_error("writer stopped"))
                } else {
                    match rx.await {
                        Ok(Ok(reply)) => outcome(reply),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(closed_error("connection dropped")),
                    }
                };
                call.finish(&result);
                result
            }
            .instrument(span),
        )
    }
}
