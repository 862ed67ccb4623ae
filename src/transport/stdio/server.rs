//! The stdio server driver: [`StdioServer`], [`serve`], [`serve_stdio`].

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::framing::{Frame, LineReader};
use super::writer::{give_way, write_loop, Hold, ReaderTurn};
use crate::cancel::InFlight;
use crate::cancel::{CancelOutcome, InFlightGuard};
use crate::jsonrpc::{self, ErrorObject, Message, RawNotification, RawRequest, RequestId};
use crate::notify::outbox::{Outgoing, Scope};
use crate::observe::Transport;
use crate::transport::call::server::{self as call, encode_error_without_id, Ending, McpService};
use crate::transport::DEFAULT_DRAIN_GRACE;
use crate::CancelReason;

/// The default maximum size of one incoming line: 4 MiB.
pub(crate) const DEFAULT_MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// The default capacity of the writer queue, in messages.
pub(crate) const DEFAULT_WRITE_QUEUE: usize = 64;
/// The default number of requests one connection may have in flight.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// Configuration of the stdio server driver.
///
/// ```
/// use tower_mcp_cancel::transport::stdio::StdioServer;
/// let server = StdioServer::new().max_line_bytes(1 << 20).write_queue(16);
/// assert_eq!(server.line_limit(), 1 << 20);
/// ```
#[derive(Clone, Debug)]
pub struct StdioServer {
    max_line_bytes: usize,
    write_queue: usize,
    max_in_flight: usize,
    registry: Option<InFlight>,
    shutdown: Option<CancellationToken>,
    drain_grace: Duration,
}

impl Default for StdioServer {
    fn default() -> Self {
        Self::new()
    }
}

impl StdioServer {
    /// Defaults: lines up to 4 MiB, a writer queue of 64 messages, 1024
    /// requests in flight, no drain grace.
    pub fn new() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            write_queue: DEFAULT_WRITE_QUEUE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            registry: None,
            shutdown: None,
            drain_grace: DEFAULT_DRAIN_GRACE,
        }
    }

    /// The largest incoming line accepted (default 4 MiB; at least 1); a
    /// longer one is answered with `-32600` (no id) and skipped up to its
    /// newline.
    #[must_use]
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
    }

    /// The largest incoming line accepted, in bytes (see
    /// [`max_line_bytes`](Self::max_line_bytes)).
    pub fn line_limit(&self) -> usize {
        self.max_line_bytes
    }

    /// How many outgoing messages may wait for the writer (default 64; at
    /// least 1). When the queue is
    /// full, handlers sending progress (and the reader answering malformed
    /// lines) wait: a peer that stops reading slows the server down instead
    /// of growing its memory.
    #[must_use]
    pub fn write_queue(mut self, messages: usize) -> Self {
        // A tokio channel holds at most `Semaphore::MAX_PERMITS`.
        self.write_queue = messages.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// How many requests the connection may have in flight (default 1024;
    /// at least 1). A request beyond it is answered at once
    /// with `-32603` ("too many requests in flight") instead of being run,
    /// and reading goes on, so cancellations still get through. With the
    /// bounded writer queue this bounds what a peer that sends without
    /// reading can make the server hold: once the queue is full the reader
    /// waits to queue the next answer and stops reading.
    #[must_use]
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests.max(1);
        self
    }

    /// Uses `registry` as the connection's [`InFlight`] registry instead of a
    /// fresh one, so that it can be observed from outside (its `len()` as an
    /// in-flight gauge, in tests or metrics). Ids are only meaningful within
    /// one connection: give each served connection its own registry.
    #[must_use]
    pub fn in_flight(mut self, registry: InFlight) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Sets the server's shutdown token. When it fires, every request in
    /// flight is cancelled with [`CancelReason::Shutdown`] (its handler
    /// future dropped, its token fired): each open `subscriptions/listen`
    /// gets its graceful result, nothing else is answered, reading stops,
    /// and [`serve`](Self::serve) returns once the request tasks ended and
    /// the writer flushed what was queued. A token fired before `serve`
    /// starts ends it at once. The same token can stop an HTTP endpoint
    /// ([`StreamableHttpService::shutdown`](crate::transport::http::StreamableHttpService::shutdown))
    /// and any number of connections.
    #[must_use]
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// How long requests in flight may go on when the
    /// [`shutdown`](Self::shutdown) token fires or the input ends (default
    /// zero: none, they are cancelled at once).
    ///
    /// During the grace: open `subscriptions/listen` streams get their
    /// graceful result at once (they would never end on their own); other
    /// requests may finish and are answered; after a shutdown the input is
    /// still read, so a new request is answered at once with `-32603`
    /// ("server shutting down") without reaching the service, and the
    /// peer's `notifications/cancelled` still cancel. Requests still running
    /// when the grace is over are cancelled — [`CancelReason::Shutdown`]
    /// after a shutdown, [`CancelReason::TransportClosed`] after the end of
    /// input — their handler futures dropped, their tokens fired, nothing
    /// written for them. [`serve`](Self::serve) returns as soon as nothing
    /// is in flight. A shutdown during the grace that followed the end of
    /// input ends that grace at once.
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = grace;
        self
    }

    /// Serves `service` over `reader`/`writer` until `reader` ends (EOF),
    /// the writer fails, or the [`shutdown`](Self::shutdown) token fires.
    /// At EOF every in-flight request is cancelled with
    /// [`CancelReason::TransportClosed`] and nothing more is written for it
    /// (after the [`drain_grace`](Self::drain_grace), if one is set).
    pub async fn serve<S, R, W>(self, mut service: S, reader: R, writer: W) -> io::Result<()>
    where
        S: McpService,
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Outgoing>(self.write_queue);
        let close = CancellationToken::new();
        let load = Arc::new(HandlerLoad::default());
        let backlog = load.clone();
        let hold = Arc::new(Hold::new());
        let mut writer_task = tokio::spawn(write_loop(
            writer,
            rx,
            close.clone(),
            move || backlog.backlogged(),
            hold.clone(),
        ));
        let conn = Connection {
            hold,
            in_flight: self.registry.clone().unwrap_or_default(),
            max_in_flight: self.max_in_flight,
            tx,
            draining: AtomicBool::new(false),
            load,
            batch: Default::default(),
        };
        let mut tasks = JoinSet::new();
        let mut lines = LineReader::new(BufReader::new(reader), self.max_line_bytes);
        let shutdown = self.shutdown.clone().unwrap_or_default();
        let mut turn = ReaderTurn::default();

        let end = loop {
            while tasks.try_join_next().is_some() {}
            tokio::select! {
                biased;
                res = &mut writer_task => break End::Writer(flatten(res)),
                () = shutdown.cancelled() => break End::Shutdown,
                frame = lines.next() => match frame {
                    Ok(None) => break End::Eof,
                    Err(e) => break End::Read(e),
                    Ok(Some(Frame::TooLong { len })) => {
                        tracing::warn!(len, max = self.max_line_bytes, "oversize line discarded");
                        let err = ErrorObject::new(
                            ErrorObject::INVALID_REQUEST,
                            format!(
                                "Invalid Request: message of {len} bytes exceeds the limit of {} bytes",
                                self.max_line_bytes
                            ),
                        );
                        conn.send(encode_error_without_id(&err)).await;
                    }
                    Ok(Some(Frame::Line(line))) => conn.on_line(&line, &mut service, &mut tasks).await,
                },
            }
            // Answers of requests that ended here wait for the writer until
            // the reader would wait for input.
            if !lines.line_buffered() {
                conn.flush_batch().await;
            }
            // The reader too keeps its worker busy (first polls of requests).
            conn.hold.check();
            conn.give_way_if_due(&mut turn).await;
        };
        conn.flush_batch().await;

        let reason = match &end {
            End::Shutdown => CancelReason::Shutdown,
            _ => CancelReason::TransportClosed,
        };
        let end = match end {
            End::Shutdown | End::Eof if !self.drain_grace.is_zero() => {
                let reading = matches!(end, End::Shutdown);
                // After the end of input, a shutdown ends the grace early.
                let stop = (!reading).then_some(&shutdown);
                let plan = DrainPlan {
                    grace: self.drain_grace,
                    stop,
                    reading,
                };
                let drained = conn
                    .drain(plan, &mut lines, &mut service, &mut tasks, &mut writer_task)
                    .await;
                drained.unwrap_or(end)
            }
            end => end,
        };
        let n = conn.in_flight.cancel_all(reason.clone());
        tracing::info!(cancelled = n, %reason, "stdio connection ending");
        while tasks.join_next().await.is_some() {}
        drop(conn);
        close.cancel();
        match end {
            End::Writer(res) => res,
            End::Read(e) => {
                let _ = writer_task.await;
                Err(e)
            }
            End::Eof | End::Shutdown => flatten(writer_task.await),
        }
    }
}

enum End {
    Eof,
    Shutdown,
    Read(io::Error),
    Writer(io::Result<()>),
}

fn flatten(res: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
    res.unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// Serves `service` over any reader/writer pair with the default
/// configuration, until the reader ends.
///
/// The driver registers each request in the connection's [`InFlight`]
/// registry, runs it in its own task, and races it against its
/// [`Cancellation`](crate::Cancellation): a `notifications/cancelled` drops
/// the service future at once (even without a
/// [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) in the
/// stack), fires its token, and nothing is written for that id afterwards.
/// At end of input every in-flight request is cancelled with
/// [`CancelReason::TransportClosed`] and `serve` returns once their tasks
/// ended.
pub async fn serve<S, R, W>(service: S, reader: R, writer: W) -> io::Result<()>
where
    S: McpService,
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    StdioServer::new().serve(service, reader, writer).await
}

/// Serves `service` over this process's stdin and stdout with the default
/// configuration (see [`StdioServer::serve_stdio`]).
pub async fn serve_stdio<S>(service: S) -> io::Result<()>
where
    S: McpService,
{
    StdioServer::new().serve_stdio(service).await
}

impl StdioServer {
    /// Serves `service` over this process's stdin and stdout, as
    /// [`serve`](Self::serve) does over any pair.
    ///
    /// On Unix, a stdin or stdout that is a pipe or a Unix socket (what an
    /// MCP host gives its server) is read and written non-blocking through
    /// the runtime's reactor, not on tokio's blocking thread pool as
    /// `tokio::io::stdin()`/`stdout()` are: no thread hand-off per read and
    /// per write. While the server runs, those descriptors are in
    /// non-blocking mode (a property shared by the whole process: write
    /// nothing else to stdout meanwhile, it would corrupt the protocol
    /// anyway); blocking mode is restored when it ends. A terminal or a
    /// file keeps tokio's handles.
    pub async fn serve_stdio<S>(self, service: S) -> io::Result<()>
    where
        S: McpService,
    {
        #[cfg(unix)]
        {
            let mut restore = super::std_io::NonBlocking::default();
            let (stdin, stdout) = super::std_io::open(&mut restore);
            let served = self.serve(service, stdin, stdout).await;
            drop(restore);
            served
        }
        #[cfg(not(unix))]
        {
            self.serve(service, tokio::io::stdin(), tokio::io::stdout())
                .await
        }
    }
}

struct Connection {
    in_flight: InFlight,
    max_in_flight: usize,
    tx: mpsc::Sender<Outgoing>,
    /// Shutting down: new requests are refused.
    draining: AtomicBool,
    load: Arc<HandlerLoad>,
    batch: std::sync::Mutex<Batch>,
    /// The writer's hold, which the reader and the request tasks end once
    /// it is due.
    hold: Arc<Hold>,
}

/// How a drain goes: its grace, what ends it early (a shutdown after the
/// end of input), whether the input is still read.
struct DrainPlan<'a> {
    grace: Duration,
    stop: Option<&'a CancellationToken>,
    reading: bool,
}

/// What the drain loop saw.
enum DrainStep {
    Writer(io::Result<()>),
    GraceOver,
    TaskEnded,
    Frame(io::Result<Option<Frame>>),
}

impl Connection {
    /// Queues a message that belongs to no request (or must be written
    /// regardless of its request's state).
    async fn send(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(Outgoing::unscoped(bytes)).await;
    }

    fn lock_batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        // Only the reader locks it, never across an await.
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the [`Batch`] of answers, then releases their registry
    /// entries.
    async fn flush_batch(&self) {
        let (bytes, guards) = {
            let mut batch = self.lock_batch();
            if batch.guards.is_empty() && batch.bytes.is_empty() {
                return;
            }
            (
                std::mem::take(&mut batch.bytes),
                std::mem::take(&mut batch.guards),
            )
        };
        if !bytes.is_empty() {
            let _ = self.tx.send(Outgoing::lines(bytes)).await;
        }
        drop(guards);
    }

    /// Gives the writer its turn if what waits in its queue has waited
    /// long enough (see [`ReaderTurn`]), with the answers batched so far.
    async fn give_way_if_due(&self, turn: &mut ReaderTurn) {
        if turn.due(&self.tx) {
            self.flush_batch().await;
            self.hold.reader_gives_way();
            give_way().await;
        }
    }

    /// The drain: listen streams get their graceful result, the others may
    /// finish within `grace`; meanwhile (when `reading`) the input is read
    /// on, new requests refused. Returns the end of the writer, if it ended.
    async fn drain<S, R>(
        &self,
        plan: DrainPlan<'_>,
        lines: &mut LineReader<R>,
        service: &mut S,
        tasks: &mut JoinSet<()>,
        writer_task: &mut tokio::task::JoinHandle<io::Result<()>>,
    ) -> Option<End>
    where
        S: McpService,
        R: tokio::io::AsyncBufRead + Unpin,
    {
        let DrainPlan {
            grace,
            stop,
            mut reading,
        } = plan;
        self.draining.store(true, Ordering::Release);
        let mut turn = ReaderTurn::default();
        let listens = self
            .in_flight
            .cancel_method(jsonrpc::SUBSCRIPTIONS_LISTEN, CancelReason::Shutdown);
        tracing::info!(
            in_flight = self.in_flight.len(),
            listen_streams_ended = listens,
            grace_ms = grace.as_millis() as u64,
            "stdio server draining: requests in flight may finish within the grace"
        );
        let over = tokio::time::sleep(grace);
        tokio::pin!(over);
        let stop = async {
            match stop {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stop);
        loop {
            while tasks.try_join_next().is_some() {}
            if tasks.is_empty() {
                return None;
            }
            let step = tokio::select! {
                biased;
                res = &mut *writer_task => DrainStep::Writer(flatten(res)),
                () = &mut over => DrainStep::GraceOver,
                () = &mut stop => DrainStep::GraceOver,
                Some(_) = tasks.join_next() => DrainStep::TaskEnded,
                frame = lines.next(), if reading => DrainStep::Frame(frame),
            };
            match step {
                DrainStep::Writer(res) => return Some(End::Writer(res)),
                DrainStep::GraceOver => return None,
                DrainStep::TaskEnded => {}
                DrainStep::Frame(Ok(Some(Frame::Line(line)))) => {
                    self.on_line(&line, service, tasks).await;
                    self.flush_batch().await;
                    self.hold.check();
                    self.give_way_if_due(&mut turn).await;
                }
                // An oversize line during the drain is skipped unanswered.
                DrainStep::Frame(Ok(Some(Frame::TooLong { .. }))) => {}
                DrainStep::Frame(Ok(None) | Err(_)) => reading = false,
            }
        }
    }

    async fn on_line<S>(&self, line: &[u8], service: &mut S, tasks: &mut JoinSet<()>)
    where
        S: McpService,
    {
        if line.iter().all(u8::is_ascii_whitespace) {
            tracing::debug!("blank line ignored");
            return;
        }
        match Message::decode(line) {
            Ok(Message::Request(raw)) => self.on_request(raw, service, tasks).await,
            Ok(Message::Notification(n)) => self.on_notification(n),
            Ok(Message::Response(r)) => {
                tracing::debug!(request_id = ?r.id, "response from the client ignored (the server sends no requests)");
            }
            Err(e) => {
                tracing::debug!(error = %e, "malformed message answered with an error");
                let err = e.to_error_object();
                // An id that is in flight belongs to a running request: do not
                // answer "for" it; answer without an id instead.
                let bytes = match &e.id {
                    Some(id) if !self.in_flight.contains(id) => {
                        jsonrpc::encode_response::<()>(Some(id), Err(&err))
                    }
                    _ => encode_error_without_id(&err),
                };
                self.send(bytes).await;
            }
        }
    }

    fn on_notification(&self, n: RawNotification) {
        let Some((id, reason)) = n.cancel_request() else {
            return;
        };
        if self.in_flight.cancel(&id, reason.clone()) == CancelOutcome::Cancelled {
            tracing::debug!(request_id = %id, %reason, "request cancelled by the client");
        }
    }

    /// Refuses request `id` with `err`: answered with its id, unless that
    /// id is in flight, where an answer carrying it would look like the
    /// running request's answer; then without one.
    async fn refuse(&self, id: &RequestId, err: &ErrorObject) {
        let bytes = if self.in_flight.contains(id) {
            encode_error_without_id(err)
        } else {
            jsonrpc::encode_response::<()>(Some(id), Err(err))
        };
        self.send(bytes).await;
    }

    async fn on_request<S>(&self, raw: RawRequest, service: &mut S, tasks: &mut JoinSet<()>)
    where
        S: McpService,
    {
        let id = raw.id.clone();
        if self.draining.load(Ordering::Acquire) {
            tracing::debug!(request_id = %id, "request refused: server shutting down");
            let err = ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                "Internal error: server shutting down; request not accepted",
            );
            self.refuse(&id, &err).await;
            return;
        }
        // At the bound; a duplicate id gets its own answer below.
        if self.in_flight.len() >= self.max_in_flight && !self.in_flight.contains(&id) {
            tracing::debug!(request_id = %id, max = self.max_in_flight, "request refused: too many in flight");
            let err = ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                format!(
                    "Internal error: too many requests in flight on this connection (limit {})",
                    self.max_in_flight
                ),
            );
            self.refuse(&id, &err).await;
            return;
        }
        let guard = match self
            .in_flight
            .register(id.clone(), Some(raw.method.clone()))
        {
            Ok(g) => g,
            Err(dup) => {
                tracing::warn!(request_id = %id, "request with an id already in flight answered without an id");
                let err = ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    format!("Invalid Request: {dup}"),
                );
                self.send(encode_error_without_id(&err)).await;
                return;
            }
        };
        let is_listen = raw.method == jsonrpc::SUBSCRIPTIONS_LISTEN;
        let scope = Scope::new(guard.cancellation().clone());
        let req = call::prepare(raw, &scope, self.tx.clone());
        let call = call::run(
            service.clone(),
            req,
            id,
            scope.cancellation().clone(),
            is_listen,
            Transport::Stdio,
            None,
        );
        let mut call = Box::pin(call);
        if self.load.inline_allowed() {
            // Most requests are ready at their first poll: finishing them
            // here spares a task and two thread hand-offs (reader → task →
            // writer). The waker is a no-op: a request still pending is
            // spawned, and its task polls it again at once.
            let started = std::time::Instant::now();
            let first = call
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()));
            self.load.first_poll_took(started.elapsed());
            if let Poll::Ready(ending) = first {
                let last = last_message(ending, &guard);
                scope.end();
                let full = {
                    let mut batch = self.lock_batch();
                    if let Some(bytes) = last {
                        batch.bytes.extend_from_slice(&bytes);
                        batch.bytes.push(b'\n');
                    }
                    batch.guards.push(guard);
                    batch.is_full()
                };
                if full {
                    self.flush_batch().await;
                }
                return;
            }
        }
        let running = self.load.spawned();
        let hold = self.hold.clone();
        tasks.spawn(finish_request(
            call,
            scope,
            guard,
            self.tx.clone(),
            running,
            hold,
        ));
    }
}

/// What the reader knows of its handlers' cost, shared with the writer.
///
/// * Whether the reader polls a new request once itself before spawning
///   it ([`inline_allowed`](Self::inline_allowed)). A handler that
///   computes for long before its first `.await` would hold up the reader
///   (and keep the other workers idle): after a first poll longer than
///   [`SLOW`](Self::SLOW), the next [`BACK_OFF`](Self::BACK_OFF) requests
///   are spawned at once, to run in parallel.
/// * Whether answers are coming one after another
///   ([`backlogged`](Self::backlogged)), so that the writer lets a few
///   share a flush.
#[derive(Default)]
struct HandlerLoad {
    /// Requests still to spawn without a first poll here.
    skip: AtomicU32,
    /// The last first poll longer than [`SLOW`](Self::SLOW), in µs.
    slow_poll_us: AtomicU32,
    /// Spawned requests not yet ended.
    running: AtomicUsize,
}

/// Counts a spawned request as running until dropped.
struct Running(Arc<HandlerLoad>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

impl HandlerLoad {
    const SLOW: Duration = Duration::from_micros(20);
    const BACK_OFF: u32 = 64;
    /// Spawned requests running from which, while handlers compute, more
    /// answers are taken to be on their way.
    const BACKLOG: usize = 4;
    /// Handlers whose first poll computes longer than this are answered
    /// at once: holding an answer for the next would cost up to a
    /// handler's run.
    const SHORT: Duration = Duration::from_millis(1);

    fn inline_allowed(&self) -> bool {
        let skip = self.skip.load(Ordering::Relaxed);
        if skip == 0 {
            return true;
        }
        self.skip.store(skip - 1, Ordering::Relaxed);
        false
    }

    fn first_poll_took(&self, first_poll: Duration) {
        if first_poll > Self::SLOW {
            self.skip.store(Self::BACK_OFF, Ordering::Relaxed);
            let us = u32::try_from(first_poll.as_micros()).unwrap_or(u32::MAX);
            self.slow_poll_us.store(us, Ordering::Relaxed);
        }
    }

    fn spawned(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::Relaxed);
        Running(self.clone())
    }

    /// Whether handlers were seen to compute briefly (a first poll
    /// between [`SLOW`](Self::SLOW) and [`SHORT`](Self::SHORT), the last
    /// slow one among the last [`BACK_OFF`](Self::BACK_OFF) requests) and
    /// at least [`BACKLOG`](Self::BACKLOG) spawned requests run: then
    /// answers come one after another, a short run apart, and the writer
    /// holds one for the next few (see `write_loop`).
    fn backlogged(&self) -> bool {
        let short_us = Self::SHORT.as_micros() as u32;
        self.skip.load(Ordering::Relaxed) > 0
            && self.slow_poll_us.load(Ordering::Relaxed) <= short_us
            && self.running.load(Ordering::Relaxed) >= Self::BACKLOG
    }
}

/// Awaits one request's end and writes it: its response (or the teardown
/// of a listen stream) closes the request's scope as it is queued, so
/// nothing of the request can follow it; a request the transport cancelled
/// gets nothing. The registry entry goes last, so that the id cannot be
/// reused before its answer is queued; the request counts as `running`
/// until then. After each poll of the request it ends the writer's hold
/// if that is due: handlers that keep computing must not keep a held
/// answer waiting (see [`Hold`]).
async fn finish_request(
    call: impl Future<Output = Ending>,
    scope: Scope,
    guard: InFlightGuard,
    tx: mpsc::Sender<Outgoing>,
    running: Running,
    hold: Arc<Hold>,
) {
    let mut call = std::pin::pin!(call);
    let ending = std::future::poll_fn(|cx| {
        let polled = call.as_mut().poll(cx);
        hold.check();
        polled
    })
    .await;
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
fn last_message(ending: Ending, guard: &InFlightGuard) -> Option<Vec<u8>> {
    match ending {
        Ending::Respond { bytes, .. } => Some(bytes),
        Ending::TearDown(reason) => jsonrpc::encode_cancelled(guard.id(), reason).ok(),
        Ending::Silent(_) => None,
    }
}

/// The answers of requests that ended in the reader, queued as one message
/// when the reader has no complete line left to read (or the batch is
/// full): one wake of the writer and one write for many answers.
///
/// Each answer's request scope is closed when its answer joins the batch,
/// so nothing of the request can be queued after it; its registry entry is
/// held until the batch is queued, so that its id cannot be reused before.
#[derive(Default)]
struct Batch {
    /// The answers, each followed by a newline.
    bytes: Vec<u8>,
    guards: Vec<InFlightGuard>,
}

impl Batch {
    const MAX_ANSWERS: usize = 64;
    const MAX_BYTES: usize = 64 * 1024;

    fn is_full(&self) -> bool {
        self.guards.len() >= Self::MAX_ANSWERS || self.bytes.len() >= Self::MAX_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_first_poll_spawns_the_next_requests_at_once() {
        let load = HandlerLoad::default();
        assert!(load.inline_allowed());
        load.first_poll_took(HandlerLoad::SLOW / 2);
        assert!(load.inline_allowed());
        load.first_poll_took(HandlerLoad::SLOW * 2);
        for i in 0..HandlerLoad::BACK_OFF {
            assert!(!load.inline_allowed(), "request {i} after the slow one");
        }
        assert!(load.inline_allowed(), "polled in the reader again");
    }

    #[test]
    fn backlogged_only_while_handlers_compute_briefly_and_enough_run() {
        let load = Arc::new(HandlerLoad::default());
        let mut running: Vec<_> = (0..HandlerLoad::BACKLOG).map(|_| load.spawned()).collect();
        assert!(!load.backlogged(), "handlers not seen to compute");
        load.first_poll_took(HandlerLoad::SLOW * 2);
        assert!(load.backlogged());
        running.pop();
        assert!(!load.backlogged(), "too few running");
        running.push(load.spawned());
        assert!(load.backlogged());
        load.first_poll_took(HandlerLoad::SHORT * 2);
        assert!(!load.backlogged(), "handlers that compute long");
        load.first_poll_took(HandlerLoad::SHORT);
        assert!(load.backlogged());
        for _ in 0..HandlerLoad::BACK_OFF {
            load.inline_allowed();
        }
        assert!(
            !load.backlogged(),
            "no slow first poll among the last requests"
        );
    }
}
