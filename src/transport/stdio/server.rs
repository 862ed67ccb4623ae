//! The stdio server driver: [`StdioServer`], [`serve_stdio`].

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::framing::{Envelope, Frame, Id, LineReader};
use super::schedule::{give_way, Batch, HandlerLoad, Hold, ReaderTurn};
use super::writer::write_loop;
use crate::cancel::InFlight;
use crate::jsonrpc::{
    self, ErrorObject, Message, ParamsView, RawNotification, RawRequest, RequestId,
};
use crate::notify::outbox::{Outgoing, Scope};
use crate::observe::Transport;
use crate::policy::MethodPolicy;
use crate::timeout::BudgetKey;
use crate::transport::call::server::{self as call, encode_error_without_id, McpService};
use crate::CancelReason;

mod config;
mod drain;
mod request;

pub use config::StdioServer;
#[cfg(all(test, feature = "http"))]
pub(crate) use config::DEFAULT_MAX_IN_FLIGHT;
pub(crate) use config::{DEFAULT_MAX_LINE_BYTES, DEFAULT_WRITE_QUEUE};
use drain::DrainPlan;
use request::{count_grace, finish_request, last_message, run_grace, InGrace};

impl StdioServer {
    /// Serves `service` over `reader`/`writer` until `reader` ends (EOF),
    /// the writer fails, or the [`shutdown`](Self::shutdown) token fires.
    /// At EOF every in-flight request is cancelled with
    /// [`CancelReason::TransportClosed`] and nothing more is written for it
    /// (after the [`drain_grace`](Self::drain_grace), if one is set).
    ///
    /// The driver registers each request in the connection's [`InFlight`]
    /// registry, runs it in its own task, and races it against its
    /// [`Cancellation`](crate::Cancellation): a `notifications/cancelled`
    /// drops the service future at once (even without a
    /// [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) in the
    /// stack), fires its token, and nothing is written for that id
    /// afterwards. `serve` returns once the tasks of the cancelled requests
    /// ended.
    pub async fn serve<S, R, W>(self, mut service: S, reader: R, writer: W) -> io::Result<()>
    where
        S: McpService,
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Outgoing>(self.write_queue);
        let close = CancellationToken::new();
        let load = Arc::new(HandlerLoad::new(self.first_poll_on_reader));
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
            budget_key: self.budget_key.clone(),
            grace: self.grace.clone(),
            in_grace: InGrace::default(),
            shutdown: self.shutdown.clone(),
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
                    Ok(Some(Frame::TooLong { len, envelope })) => {
                        conn.on_too_long(len, &envelope, self.max_line_bytes).await;
                    }
                    Ok(Some(Frame::Line(line))) => conn.on_line(&line, &mut service, &mut tasks).await,
                },
            }
            conn.after_line(&mut turn, lines.line_buffered()).await;
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
    /// [`serve`](Self::serve) does over any pair: those of
    /// [`process_streams`](super::process_streams), read and written through
    /// the runtime's reactor when they are pipes or Unix sockets (on Unix;
    /// what an MCP host gives its server), not on tokio's blocking thread
    /// pool, without changing the flags of this process's own descriptors
    /// (write nothing else to stdout meanwhile: it would corrupt the
    /// protocol).
    pub async fn serve_stdio<S>(self, service: S) -> io::Result<()>
    where
        S: McpService,
    {
        let (stdin, stdout) = super::process_streams();
        self.serve(service, stdin, stdout).await
    }
}

struct Connection {
    in_flight: InFlight,
    max_in_flight: usize,
    tx: mpsc::Sender<Outgoing>,
    /// Shutting down: new requests are refused.
    draining: AtomicBool,
    load: Arc<HandlerLoad>,
    batch: Batch,
    /// The writer's hold, which the reader and the request tasks end once
    /// it is due.
    hold: Arc<Hold>,
    /// The `_meta` key of a client's budget to honour, if any.
    budget_key: Option<BudgetKey>,
    /// The cooperative grace of cancelled requests, by method.
    grace: MethodPolicy<Duration>,
    /// The requests in their grace: they count toward `max_in_flight`.
    in_grace: InGrace,
    /// The server's shutdown token, for the tasks its requests create.
    shutdown: Option<CancellationToken>,
}

impl Connection {
    /// Queues a message that belongs to no request (or must be written
    /// regardless of its request's state).
    async fn send(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(Outgoing::unscoped(bytes)).await;
    }

    /// Queues the [`Batch`] of answers, then releases their registry
    /// entries.
    async fn flush_batch(&self) {
        let Some((bytes, guards)) = self.batch.take() else {
            return;
        };
        if !bytes.is_empty() {
            let _ = self.tx.send(Outgoing::lines(bytes)).await;
        }
        drop(guards);
    }

    /// The reader's part in the schedule after each line (see
    /// [`schedule`](super::schedule)). Answers of requests that ended here
    /// wait for the writer until the reader would wait for input (no
    /// complete line `buffered`). The reader too keeps its worker busy, so
    /// it ends a due hold of the writer's, and gives the writer its turn
    /// once something has waited long enough in its queue.
    async fn after_line(&self, turn: &mut ReaderTurn, buffered: bool) {
        if !buffered {
            self.flush_batch().await;
        }
        self.hold.check();
        if turn.due(&self.tx) {
            self.flush_batch().await;
            self.hold.reader_gives_way();
            give_way().await;
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
        let budget_key = self.budget_key.as_ref().map(BudgetKey::as_str);
        match Message::decode_viewed_with(line, budget_key) {
            Ok((Message::Request(raw), view)) => self.on_request(raw, view, service, tasks).await,
            Ok((Message::Notification(n), _)) => self.on_notification(n),
            Ok((Message::Response(r), _)) => {
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

    /// A line over the limit, skipped: answered with `-32600` naming the
    /// limit, carrying the request's id when its envelope showed a request
    /// (a method and an id) whose id is not in flight, so that the client's
    /// call ends; without an id otherwise.
    async fn on_too_long(&self, len: usize, envelope: &Envelope, max: usize) {
        tracing::warn!(len, max, id = ?envelope.id, "oversize line discarded");
        let err = ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            format!("Invalid Request: message of {len} bytes exceeds the limit of {max} bytes"),
        );
        match &envelope.id {
            Id::Found(id) if envelope.method => self.refuse(id, &err).await,
            _ => self.send(encode_error_without_id(&err)).await,
        }
    }

    fn on_notification(&self, n: RawNotification) {
        let Some((id, reason)) = n.cancel_request() else {
            return;
        };
        if self.in_flight.cancel(&id, reason.clone()) {
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

    /// `view`: the fields of its params read with it, for its span.
    async fn on_request<S>(
        &self,
        raw: RawRequest,
        view: ParamsView<'_>,
        service: &mut S,
        tasks: &mut JoinSet<()>,
    ) where
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
        // At the bound (requests in their grace count); a duplicate id
        // gets its own answer below.
        if self.in_flight.len() + self.in_grace.len() >= self.max_in_flight
            && !self.in_flight.contains(&id)
        {
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
            Some(g) => g,
            None => {
                tracing::warn!(request_id = %id, "request with an id already in flight answered without an id");
                let err = ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    format!("Invalid Request: a request with id {id} is already in flight"),
                );
                self.send(encode_error_without_id(&err)).await;
                return;
            }
        };
        let is_listen = raw.method == jsonrpc::SUBSCRIPTIONS_LISTEN;
        let scope = Scope::new(guard.cancellation().clone());
        let mut req = call::prepare(
            raw,
            &view,
            &scope,
            Some(self.tx.clone()),
            self.shutdown.as_ref(),
        );
        let grace = call::grace_of(&self.grace, &req);
        crate::timeout::inherit_budget(&mut req, view.budget);
        let call = call::run(
            service.clone(),
            req,
            view,
            id,
            scope.cancellation().clone(),
            is_listen,
            Transport::Stdio,
            None,
            grace,
        );
        let mut call = Box::pin(call);
        if let Some(ending) = self.load.first_poll(call.as_mut()) {
            let counted = count_grace(&call, &self.in_grace);
            let answer = last_message(ending, &guard);
            scope.end();
            if counted.is_some() {
                tasks.spawn(run_grace(call, counted));
            }
            if self.batch.add(answer, guard) {
                self.flush_batch().await;
            }
            return;
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
            self.in_grace.clone(),
        ));
    }
}
