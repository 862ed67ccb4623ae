//! The stdio client service: [`StdioClient`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tower::Service;

use super::framing::{write_line, Frame, LineReader};
use super::server::{DEFAULT_MAX_LINE_BYTES, DEFAULT_WRITE_QUEUE};
use crate::cancel::current_drop_reason;
use crate::error::BoxError;
use crate::jsonrpc::{
    self, CancelledParams, ErrorObject, Message, ProgressParams, ProgressToken, RawNotification,
    RequestId,
};
use crate::transport::outbound::Outbound;
use crate::{CancelReason, Cancelled, McpRequest, ProgressTap};

/// The default time a child gets to exit after its stdin was closed.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long by default the id of a cancelled request stays reserved while
/// its late response may still come (see [`StdioClient`]).
pub const DEFAULT_CANCELLED_ID_RESERVATION: Duration = Duration::from_secs(60);

/// How many ids of cancelled requests are reserved at most by default; past
/// it, the oldest reservation ends early (see [`StdioClient`]).
pub const DEFAULT_MAX_RESERVED_IDS: usize = 1024;

/// A callback for server notifications that are not progress (log messages,
/// `subscriptions/listen` notifications, …).
type NotificationSink = Arc<dyn Fn(&RawNotification) + Send + Sync>;

/// Configuration of a [`StdioClient`].
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::transport::stdio::StdioClient;
/// let builder = StdioClient::builder()
///     .max_line_bytes(1 << 20)
///     .write_queue(8)
///     .shutdown_grace(Duration::from_secs(1))
///     .on_notification(|n| eprintln!("server says {}", n.method));
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct StdioClientBuilder {
    max_line_bytes: usize,
    write_queue: usize,
    grace: Duration,
    sink: Option<NotificationSink>,
    reservation: Duration,
    max_reserved: usize,
    own_process_group: bool,
}

impl fmt::Debug for StdioClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioClientBuilder")
            .field("max_line_bytes", &self.max_line_bytes)
            .field("write_queue", &self.write_queue)
            .field("grace", &self.grace)
            .field("reservation", &self.reservation)
            .field("max_reserved", &self.max_reserved)
            .field("own_process_group", &self.own_process_group)
            .finish()
    }
}

impl Default for StdioClientBuilder {
    fn default() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            write_queue: DEFAULT_WRITE_QUEUE,
            grace: DEFAULT_SHUTDOWN_GRACE,
            sink: None,
            reservation: DEFAULT_CANCELLED_ID_RESERVATION,
            max_reserved: DEFAULT_MAX_RESERVED_IDS,
            own_process_group: true,
        }
    }
}

impl StdioClientBuilder {
    /// The largest incoming line accepted; longer ones are skipped.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
    }

    /// How many requests may wait for the writer (callers wait when full).
    /// Cancellations do not count: they are never blocked nor lost.
    pub fn write_queue(mut self, requests: usize) -> Self {
        self.write_queue = requests.max(1);
        self
    }

    /// How long a child process gets to exit after its stdin was closed,
    /// before it is sent SIGTERM (Unix), and again after that before it is
    /// killed (SIGKILL), as the stdio transport asks.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long the id of a request cancelled after it was written stays
    /// reserved (its late response may still come), and how many such ids
    /// are reserved at most (past that, the oldest reservation ends early).
    /// A call with a reserved id fails at once. Default
    /// [`DEFAULT_CANCELLED_ID_RESERVATION`], [`DEFAULT_MAX_RESERVED_IDS`];
    /// a zero duration or count reserves nothing.
    pub fn reserve_cancelled_ids(mut self, for_at_most: Duration, max_ids: usize) -> Self {
        self.reservation = for_at_most;
        self.max_reserved = max_ids;
        self
    }

    /// Whether [`spawn`](Self::spawn) puts the child in a process group of
    /// its own (Unix; default: yes), so that a terminal's Ctrl-C (SIGINT
    /// to the foreground process group) reaches the client, which cancels,
    /// and not the server, which would die with the work in flight. Turn it
    /// off to keep a process group set on the command, or the caller's (a
    /// child that must read the terminal or change its settings needs the
    /// foreground group; the piped stdin and stdout do not).
    pub fn own_process_group(mut self, own: bool) -> Self {
        self.own_process_group = own;
        self
    }

    /// Calls `f` with every server notification other than
    /// `notifications/progress` and `notifications/cancelled`.
    pub fn on_notification(mut self, f: impl Fn(&RawNotification) + Send + Sync + 'static) -> Self {
        self.sink = Some(Arc::new(f));
        self
    }

    /// A client over a reader (the server's output) and a writer (its input).
    ///
    /// Spawns the reader and writer tasks: call it inside a tokio runtime.
    pub fn connect<R, W>(self, reader: R, writer: W) -> StdioClient
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.build(reader, writer, None)
    }

    /// Spawns `command` with piped stdin/stdout (stderr as configured on the
    /// command; inherited by default) and returns a client talking to it.
    /// On Unix the child gets a process group of its own (see
    /// [`own_process_group`](Self::own_process_group)).
    pub fn spawn(self, mut command: Command) -> io::Result<StdioClient> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        #[cfg(unix)]
        if self.own_process_group {
            command.process_group(0);
        }
        let mut child = command.spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("child has no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("child has no stdout"))?;
        Ok(self.build(stdout, stdin, Some(child)))
    }

    fn build<R, W>(self, reader: R, writer: W, child: Option<Child>) -> StdioClient
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let (req_tx, req_rx) = mpsc::channel(self.write_queue);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: HashMap::new(),
                taps: HashMap::new(),
                reserved: Reserved::new(self.reservation, self.max_reserved),
            }),
            ctl: ctl_tx,
            closed: AtomicBool::new(false),
            outbound: Outbound::new(),
            sink: self.sink,
        });
        tokio::spawn(write_loop(writer, req_rx, ctl_rx));
        tokio::spawn(read_loop(
            LineReader::new(BufReader::new(reader), self.max_line_bytes),
            shared.clone(),
        ));
        StdioClient {
            shared,
            handle: Arc::new(Handle {
                requests: req_tx,
                child: Mutex::new(child),
                grace: self.grace,
            }),
        }
    }
}

/// A `tower::Service` that sends MCP requests over a newline-delimited
/// JSON-RPC stream (a child's stdin/stdout, or any reader/writer pair) and
/// resolves to the `result` of each response.
///
/// * Requests without an id get one, unique among the requests in flight
///   and the reserved ids (below); a request with an id or progress token
///   already in flight, or with a reserved id, fails at once.
/// * The request's `wire_params()` are written, so a progress token that
///   [`ProgressResetLayer`](crate::ProgressResetLayer) assigned is on the
///   wire; `notifications/progress` for it are recorded in the request's
///   [`ProgressTap`] (or, without one, shown to its
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
///   passed (default [`DEFAULT_CANCELLED_ID_RESERVATION`]). A call with a
///   reserved id (a caller's own id, [`McpRequest::new`]) fails at once with
///   an `-32600` [`ErrorObject`] and is not sent; ids the client assigns skip
///   reserved ones. At most [`DEFAULT_MAX_RESERVED_IDS`] ids are reserved;
///   past that the oldest reservation ends early (only a caller reusing that
///   very id could then be answered by its late response). Both bounds:
///   [`StdioClientBuilder::reserve_cancelled_ids`].
/// * An error response resolves to `Err` holding the [`ErrorObject`]; a
///   `notifications/cancelled` from the server to `Err` holding
///   [`Cancelled`] — only for a `subscriptions/listen` (the server tore it
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
}

type Outcome = Result<Box<RawValue>, BoxError>;

struct State {
    pending: HashMap<RequestId, Pending>,
    taps: HashMap<ProgressToken, ProgressTap>,
    reserved: Reserved,
}

struct Pending {
    tx: oneshot::Sender<Outcome>,
    /// The token of the request's progress route, when it has one.
    token: Option<ProgressToken>,
    /// A `subscriptions/listen`: the one request a server may cancel.
    listen: bool,
}

impl State {
    /// Removes a pending request and its progress route.
    fn take(&mut self, id: &RequestId) -> Option<Pending> {
        let p = self.pending.remove(id)?;
        if let Some(t) = &p.token {
            self.taps.remove(t);
        }
        Some(p)
    }
}

/// Ids of requests cancelled after they were written, whose late responses
/// may still come: reserved until then, for at most `ttl`, at most `max`.
struct Reserved {
    ttl: Duration,
    max: usize,
    until: HashMap<RequestId, Instant>,
    /// In reservation order, so expiry is in order too; an entry whose id
    /// was released or reserved again since is stale and skipped.
    order: VecDeque<(RequestId, Instant)>,
}

impl Reserved {
    fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max,
            until: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn reserve(&mut self, id: RequestId) {
        if self.ttl.is_zero() || self.max == 0 {
            return;
        }
        let now = Instant::now();
        self.expire(now);
        // A duration the clock cannot add is as good as a year.
        let until = now
            .checked_add(self.ttl)
            .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
            .unwrap_or(now);
        self.until.insert(id.clone(), until);
        self.order.push_back((id, until));
        while self.until.len() > self.max {
            self.pop_oldest();
        }
        // Released ids leave stale entries behind: drop them now and then,
        // so the queue stays within twice the bound.
        if self.order.len() > self.max.saturating_mul(2) {
            let until = &self.until;
            self.order.retain(|(id, u)| until.get(id) == Some(u));
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((id, until)) = self.order.pop_front() {
            if self.until.get(&id) == Some(&until) {
                self.until.remove(&id);
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, until)| *until <= now) {
            self.pop_oldest();
        }
    }

    /// Whether `id` is reserved (as of the last [`expire`](Self::expire)).
    fn contains(&self, id: &RequestId) -> bool {
        self.until.contains_key(id)
    }

    /// Ends `id`'s reservation (its late response came); whether it had one.
    fn release(&mut self, id: &RequestId) -> bool {
        self.until.remove(id).is_some()
    }

    fn clear(&mut self) {
        self.until.clear();
        self.order.clear();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self, why: &str) {
        self.closed.store(true, Ordering::Release);
        let pending: Vec<_> = {
            let mut st = self.lock();
            st.taps.clear();
            st.reserved.clear();
            st.pending.drain().collect()
        };
        if !pending.is_empty() {
            tracing::info!(
                requests = pending.len(),
                why,
                "stdio client connection closed; failing in-flight requests"
            );
        }
        for (_, p) in pending {
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

struct Handle {
    requests: mpsc::Sender<Queued>,
    child: Mutex<Option<Child>>,
    grace: Duration,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut child) = child {
            // Our stdin end closes with the writer task; give the child its grace.
            let grace = self.grace;
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        let _ = reap(&mut child, grace).await;
                    });
                }
                Err(_) => {
                    let _ = child.start_kill();
                }
            }
        }
    }
}

/// The stdio transport's shutdown: stdin is already closed; wait `grace`
/// for the child to exit, then SIGTERM (Unix) and wait `grace` again, then
/// SIGKILL.
async fn reap(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status;
    }
    let grace_ms = grace.as_millis() as u64;
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        tracing::warn!(
            grace_ms,
            "child did not exit after its stdin closed; sending SIGTERM"
        );
        match terminate(pid) {
            Ok(()) => {
                if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
                    return status;
                }
            }
            Err(e) => tracing::warn!(error = %e, "SIGTERM failed"),
        }
    }
    tracing::warn!(grace_ms, "child still running; killing it");
    child.kill().await?;
    child.wait().await
}

#[cfg(unix)]
fn terminate(pid: u32) -> io::Result<()> {
    use rustix::process::{kill_process, Pid, Signal};
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("child pid out of range"))?;
    kill_process(pid, Signal::TERM).map_err(io::Error::from)
}

enum Control {
    /// A notification line (a cancellation, or one the caller sends):
    /// written before any request queued after it, never blocked.
    Line(Vec<u8>),
    Close,
}

const QUEUED: u8 = 0;
const WRITTEN: u8 = 1;
const ABANDONED: u8 = 2;

struct Queued {
    bytes: Vec<u8>,
    state: Arc<AtomicU8>,
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
    ) -> Result<(Guard, oneshot::Receiver<Outcome>, Vec<u8>), BoxError> {
        if self.is_closed() {
            return Err(closed_error("client is closed"));
        }
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = self.shared.lock();
            let st = &mut *st;
            st.reserved.expire(Instant::now());
            let id = match req.id() {
                Some(id) if st.pending.contains_key(id) => {
                    return Err(Box::new(ErrorObject::new(
                        ErrorObject::INVALID_REQUEST,
                        format!("a request with id {id} is already in flight"),
                    )));
                }
                Some(id) if st.reserved.contains(id) => {
                    return Err(Box::new(ErrorObject::new(
                        ErrorObject::INVALID_REQUEST,
                        format!(
                            "request id {id} is reserved: a cancelled request with this id may still be answered"
                        ),
                    )));
                }
                Some(id) => id.clone(),
                None => self
                    .shared
                    .outbound
                    .next_id(|id| st.pending.contains_key(id) || st.reserved.contains(id)),
            };
            let tap = self
                .shared
                .outbound
                .progress_route(&mut req, |t| st.taps.contains_key(t));
            let mut routed = None;
            if let Some(t) = req.progress_token() {
                if st.taps.contains_key(t) {
                    return Err(Box::new(ErrorObject::new(
                        ErrorObject::INVALID_REQUEST,
                        format!("progress token {t} is already in use by a request in flight"),
                    )));
                }
                if let Some(tap) = tap {
                    st.taps.insert(t.clone(), tap);
                    routed = Some(t.clone());
                }
            }
            st.pending.insert(
                id.clone(),
                Pending {
                    tx,
                    token: routed,
                    listen: req.method() == jsonrpc::SUBSCRIPTIONS_LISTEN,
                },
            );
            id
        };
        req.set_id(id.clone());
        let guard = Guard {
            shared: self.shared.clone(),
            id: id.clone(),
            state: Arc::new(AtomicU8::new(QUEUED)),
            done: false,
        };
        let params = req.wire_params()?;
        let bytes = jsonrpc::encode_request(&id, req.method(), params.as_deref())?;
        Ok((guard, rx, bytes))
    }
}

/// Cancels its request when dropped before the response arrived.
struct Guard {
    shared: Arc<Shared>,
    id: RequestId,
    state: Arc<AtomicU8>,
    done: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        {
            // One lock for both: no other request can take the id between
            // its removal and its reservation.
            let mut st = self.shared.lock();
            if st.take(&self.id).is_none() {
                // Answered (or the connection closed): nothing to cancel.
                return;
            }
            if self
                .state
                .compare_exchange(QUEUED, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                drop(st);
                tracing::debug!(request_id = %self.id, "request dropped before it was written; not sent");
                return;
            }
            // Written: its answer may still come; keep it from a later request.
            st.reserved.reserve(self.id.clone());
        }
        let reason = current_drop_reason().unwrap_or(CancelReason::CallerDropped);
        tracing::info!(request_id = %self.id, %reason, "request abandoned; sending notifications/cancelled");
        let line = jsonrpc::encode_notification(
            jsonrpc::CANCELLED,
            &CancelledParams {
                request_id: self.id.clone(),
                reason: Some(reason.to_string()),
            },
        );
        // An id and a string: the encoding cannot fail.
        let Ok(line) = line else { return };
        if self.shared.ctl.send(Control::Line(line)).is_err() {
            tracing::debug!(request_id = %self.id, "connection gone; cancellation not sent");
        }
    }
}

/// The response future of [`StdioClient`].
pub struct ResponseFuture {
    inner: Pin<Box<dyn Future<Output = Result<serde_json::Value, BoxError>> + Send>>,
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdio::ResponseFuture")
    }
}

impl Future for ResponseFuture {
    type Output = Result<serde_json::Value, BoxError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl Service<McpRequest> for StdioClient {
    type Response = serde_json::Value;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> ResponseFuture {
        let started = self.start(req);
        let requests = self.handle.requests.clone();
        ResponseFuture {
            inner: Box::pin(async move {
                let (mut guard, rx, bytes) = started?;
                let queued = Queued {
                    bytes,
                    state: guard.state.clone(),
                };
                if requests.send(queued).await.is_err() {
                    return Err(closed_error("writer stopped"));
                }
                let out = rx.await;
                guard.done = true;
                match out {
                    Ok(Ok(raw)) => Ok(serde_json::from_str(raw.get())?),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(closed_error("connection dropped")),
                }
            }),
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut requests: mpsc::Receiver<Queued>,
    mut ctl: mpsc::UnboundedReceiver<Control>,
) {
    let mut w = BufWriter::new(writer);
    let res: io::Result<()> = async {
        loop {
            tokio::select! {
                biased;
                c = ctl.recv() => match c {
                    Some(Control::Line(line)) => write_line(&mut w, &line).await?,
                    Some(Control::Close) | None => break,
                },
                r = requests.recv() => match r {
                    Some(q) => {
                        if q.state.compare_exchange(QUEUED, WRITTEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                            write_line(&mut w, &q.bytes).await?;
                        }
                    }
                    None => break,
                },
            }
            if ctl.is_empty() && requests.is_empty() {
                w.flush().await?;
            }
        }
        // Cancellations are never lost: write what is left of them.
        while let Ok(c) = ctl.try_recv() {
            if let Control::Line(line) = c {
                write_line(&mut w, &line).await?;
            }
        }
        w.flush().await?;
        w.shutdown().await
    }
    .await;
    if let Err(e) = res {
        tracing::debug!(error = %e, "stdio client writer stopped");
    }
}

async fn read_loop<R: tokio::io::AsyncBufRead + Unpin>(
    mut lines: LineReader<R>,
    shared: Arc<Shared>,
) {
    let why = loop {
        match lines.next().await {
            Ok(Some(Frame::Line(line))) => on_message(&shared, &line),
            Ok(Some(Frame::TooLong { len })) => {
                tracing::warn!(len, "oversize line from the server skipped");
            }
            Ok(None) => break "server closed its output".to_owned(),
            Err(e) => break format!("read error: {e}"),
        }
    };
    shared.close(&why);
}

fn on_message(shared: &Shared, line: &[u8]) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match Message::decode(line) {
        Ok(Message::Response(r)) => match r.id {
            Some(id) => {
                let (p, late) = {
                    let mut st = shared.lock();
                    match st.take(&id) {
                        Some(p) => (Some(p), false),
                        // The late answer came: the id is free again.
                        None => (None, st.reserved.release(&id)),
                    }
                };
                match p {
                    Some(p) => {
                        let out = r.outcome.map_err(|e| Box::new(e) as BoxError);
                        let _ = p.tx.send(out);
                    }
                    None if late => {
                        tracing::debug!(request_id = %id, "late response to a cancelled request ignored");
                    }
                    None => {
                        tracing::debug!(request_id = %id, "response for no request in flight ignored");
                    }
                }
            }
            None => match r.outcome {
                Err(e) => {
                    tracing::warn!(code = e.code, message = ?e.message, "server reported an error about a message it could not read")
                }
                Ok(_) => tracing::debug!("result without id ignored"),
            },
        },
        Ok(Message::Notification(n)) if n.method == jsonrpc::PROGRESS => {
            let Some(params) = n
                .params
                .as_deref()
                .and_then(|p| serde_json::from_str::<ProgressParams>(p.get()).ok())
            else {
                tracing::debug!("malformed notifications/progress ignored");
                return;
            };
            let tap = shared.lock().taps.get(&params.progress_token).cloned();
            match tap {
                Some(tap) => {
                    tap.record_params(params);
                }
                None => {
                    tracing::debug!(progress_token = %params.progress_token, "progress for no request in flight ignored")
                }
            }
        }
        Ok(Message::Notification(n)) if n.method == jsonrpc::CANCELLED => {
            let Some(params) = n
                .params
                .as_deref()
                .and_then(|p| serde_json::from_str::<CancelledParams>(p.get()).ok())
            else {
                tracing::debug!("malformed notifications/cancelled ignored");
                return;
            };
            // The spec lets a server cancel only a subscriptions/listen.
            let taken = {
                let mut st = shared.lock();
                match st.pending.get(&params.request_id).map(|p| p.listen) {
                    Some(true) => Ok(st.take(&params.request_id)),
                    Some(false) => Err(()),
                    None => Ok(None),
                }
            };
            let reason = CancelReason::peer(params.reason.as_deref());
            match taken {
                Ok(Some(p)) => {
                    tracing::info!(request_id = %params.request_id, %reason, "server ended the request (subscription torn down)");
                    let _ = p.tx.send(Err(Box::new(Cancelled::new(reason))));
                }
                Err(()) => {
                    tracing::warn!(request_id = %params.request_id, %reason, "server sent notifications/cancelled for a request that is not a subscriptions/listen; ignored (the call goes on)");
                }
                Ok(None) => {
                    tracing::debug!(request_id = %params.request_id, "notifications/cancelled for no request in flight ignored")
                }
            }
        }
        Ok(Message::Notification(n)) => match &shared.sink {
            Some(sink) => sink(&n),
            None => tracing::debug!(method = ?n.method, "server notification ignored"),
        },
        Ok(Message::Request(r)) => {
            tracing::warn!(request_id = %r.id, method = ?r.method, "request from the server ignored (stdio servers send none)");
        }
        Err(e) => tracing::warn!(error = %e, "malformed line from the server ignored"),
    }
}
