//! [`serve`] and [`Server`]: an MCP endpoint (an axum `Router` or a
//! [`StreamableHttpService`](super::StreamableHttpService)) served on a
//! `TcpListener` with hyper-util (HTTP/1.1 and HTTP/2 with prior knowledge,
//! told apart per connection), with the settings a server whose clients
//! cancel needs.
//!
//! The settings and why they are the defaults are on [`Server`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

mod activity;
mod stream;

use self::activity::{watch, Activity, Busy, End, Tracked};
use self::stream::{first_bytes, is_connection_error, Io};
use crate::error::BoxError;

/// Serves `service` on `listener` with [`Server`]'s defaults until
/// `shutdown` fires, then drains gracefully.
///
/// ```no_run
/// use tokio_util::sync::CancellationToken;
/// use tower::service_fn;
/// use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
/// use tower::BoxError;
/// use tower_mcp_cancel::McpRequest;
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let shutdown = CancellationToken::new();
/// let mcp = service_fn(|req: McpRequest| async move {
///     Ok::<_, BoxError>(serde_json::json!({"resultType": "complete", "echo": req.method()}))
/// });
/// let mcp = StreamableHttpService::new(mcp).shutdown(shutdown.clone());
/// let app = axum::Router::new().route_service("/mcp", mcp);
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let signal = shutdown.clone();
/// tokio::spawn(async move {
///     let _ = tokio::signal::ctrl_c().await;
///     signal.cancel();
/// });
/// serve(listener, app, shutdown).await; // returns after a graceful drain
/// # Ok(()) }
/// ```
pub async fn serve<S, B>(listener: TcpListener, service: S, shutdown: CancellationToken)
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    Server::new().serve(listener, service, shutdown).await
}

/// The settings [`serve`] uses, to change one of them.
///
/// The defaults, and why (copy them into your own hyper/axum server):
///
/// * **`TCP_NODELAY`** on every accepted stream. Without it an HTTP/2 load
///   of 64 streams showed a 48 ms latency tail: Nagle's algorithm holding a
///   small frame back while the peer delays its ACK. (`axum::serve` does not
///   set it.)
/// * **HTTP/2 rapid-reset allowance**
///   (1024, [`max_pending_accept_reset_streams`](Server::max_pending_accept_reset_streams)). hyper counts the streams a client resets before the server
///   has accepted them and, past its default of 20, closes the whole
///   connection with `GOAWAY ENHANCE_YOUR_CALM "too_many_resets"`. In MCP a
///   reset stream *is* a cancellation, so a client cancelling a burst of
///   calls on one connection hits that limit and loses its other calls. The
///   limit still exists (it bounds the accept queue against the
///   CVE-2023-44487 "rapid reset" attack), at five times hyper's 200
///   concurrent streams, the same as h2's own limit for locally reset streams.
/// * **Header read timeout**
///   (30 s, [`header_read_timeout`](Server::header_read_timeout)): a connection that does not finish sending its request head in
///   time is closed, so a slow client cannot hold sockets — from the
///   accept on: a connection that sends nothing, or stops inside the
///   HTTP/2 preface, is closed by it too (hyper-util's auto builder reads
///   the preface without a timer, so `serve` reads it first), and so is an
///   idle HTTP/1 keep-alive connection. On HTTP/1 it bounds the time from
///   the end of the last response (its last byte handed to the
///   connection) to the next complete head; `serve` runs it on one timer
///   per connection, read when it fires, rather than hyper's, which makes
///   and registers a timer for every request. hyper only applies its own
///   with a timer, which `axum::serve` does not set.
/// * **Write timeout**
///   (60 s, [`write_timeout`](Server::write_timeout)): a
///   connection whose peer takes none of the bytes the server has to send
///   for that long — an SSE stream whose reader stopped reading — is
///   closed, which drops (cancels) its requests. A slow reader that takes
///   some bytes is not affected. (HTTP/2 flow control that stalls a single
///   stream while the connection moves is not a stalled write.)
/// * **HTTP/2 keep-alive pings**
///   (every 30 s, answered within 20 s,
///   [`http2_keep_alive`](Server::http2_keep_alive)): an HTTP/2 connection whose peer stops
///   answering — gone without a FIN, or holding the socket — is closed.
/// * **Idle timeout**
///   (60 s, [`idle_timeout`](Server::idle_timeout)): a connection with no
///   request in flight for that long is asked to end gracefully — an
///   HTTP/2 peer that answers pings but opens no stream gets `GOAWAY` and
///   is closed. A request counts until the end of its response, so a long
///   call, an SSE stream or an open `subscriptions/listen` keeps its
///   connection.
/// * **Graceful shutdown through a `CancellationToken`**, the one the
///   crate's shutdown takes: when it fires the listener is closed, every
///   connection is asked to end gracefully (HTTP/1: after the response in
///   progress; HTTP/2: `GOAWAY`, the streams in flight run to their end),
///   and the future returns once they have all closed — and once every
///   request served has ended, also a 2025-era one whose client hung up
///   (its handler runs on detached, see
///   [`StatefulRequests::Serve`](super::StatefulRequests::Serve)). Give the same token
///   to [`StreamableHttpService::shutdown`](super::StreamableHttpService::shutdown):
///   it cancels the MCP requests in flight (reason `Shutdown`) and gives
///   open `subscriptions/listen` streams their graceful result, so the
///   drain does not wait on them. With
///   [`StreamableHttpService::drain_grace`](super::StreamableHttpService::drain_grace)
///   the MCP requests in flight may finish first (up to the grace; new ones
///   get `503`), and `serve` returns once they have. Bound the wait with
///   `tokio::time::timeout` if other routes may run long.
/// * **Accept errors** (`EMFILE` when out of file descriptors, …) are logged
///   and survived: the loop backs off for 100 ms and accepts again.
///
/// The same settings on hyper-util's builder, for a server of your own
/// (and `stream.set_nodelay(true)` on each accepted `TcpStream`):
///
/// ```
/// use std::time::Duration;
/// use hyper_util::rt::{TokioExecutor, TokioTimer};
/// use hyper_util::server::conn::auto::Builder;
///
/// let mut builder = Builder::new(TokioExecutor::new());
/// builder
///     .http1()
///     .timer(TokioTimer::new()) // without a timer hyper skips the timeout
///     .header_read_timeout(Duration::from_secs(30));
/// builder
///     .http2()
///     .timer(TokioTimer::new())
///     .keep_alive_interval(Duration::from_secs(30))
///     .keep_alive_timeout(Duration::from_secs(20))
///     .max_pending_accept_reset_streams(1024);
/// // and a timeout on the first bytes (see `serve`'s source): the auto
/// // builder reads the HTTP/2 preface without one.
/// ```
///
/// To change one of them:
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::transport::http::Server;
///
/// let server = Server::new()
///     .header_read_timeout(Some(Duration::from_secs(10)))
///     .max_pending_accept_reset_streams(4096);
/// # let _ = server;
/// ```
#[derive(Clone, Debug)]
pub struct Server {
    nodelay: bool,
    header_read_timeout: Option<Duration>,
    http2_keep_alive: Option<Duration>,
    write_timeout: Option<Duration>,
    idle_timeout: Option<Duration>,
    max_pending_accept_reset_streams: usize,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

/// How long the accept loop waits after an error such as `EMFILE`, so that
/// it does not spin while the process is out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a peer has to answer an HTTP/2 keep-alive ping (hyper's
/// default).
const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest timer handed to hyper, which adds it to an `Instant` (a
/// `Duration::MAX` would overflow and panic): ten years, "never" in
/// practice.
const MAX_TIMER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Server {
    /// The default HTTP/1 header read timeout: 30 s (hyper's own default,
    /// which hyper only enforces when a timer is set, as here).
    pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

    /// The default HTTP/2 allowance of streams reset by the client before
    /// they were accepted: 1024 (hyper's default is 20: see
    /// [`Server`]).
    pub(crate) const DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 1024;

    /// The default interval of HTTP/2 keep-alive pings: 30 s (hyper sends
    /// none by default); a ping not answered within 20 s closes the
    /// connection.
    pub(crate) const DEFAULT_HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(30);

    /// The default write timeout: 60 s without the peer taking a byte.
    pub(crate) const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

    /// The default idle timeout: 60 s without a request in flight.
    pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

    /// The defaults: `TCP_NODELAY`, a 30 s header read timeout, a 60 s
    /// write timeout, a 60 s idle timeout, HTTP/2 keep-alive pings every
    /// 30 s, 1024 pending reset streams.
    pub fn new() -> Self {
        Server {
            nodelay: true,
            header_read_timeout: Some(Self::DEFAULT_HEADER_READ_TIMEOUT),
            http2_keep_alive: Some(Self::DEFAULT_HTTP2_KEEP_ALIVE),
            write_timeout: Some(Self::DEFAULT_WRITE_TIMEOUT),
            idle_timeout: Some(Self::DEFAULT_IDLE_TIMEOUT),
            max_pending_accept_reset_streams: Self::DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS,
        }
    }

    /// Sets `TCP_NODELAY` on accepted streams (default `true`).
    #[must_use]
    pub fn nodelay(mut self, nodelay: bool) -> Self {
        self.nodelay = nodelay;
        self
    }

    /// The header read timeout; `None` disables it (default 30 s, hyper's
    /// own default, which hyper only enforces when a timer is set, as here).
    /// It bounds the wait for the first bytes of a connection and for the
    /// rest of the HTTP/2 preface, then (HTTP/1) for each request head,
    /// also on an idle keep-alive connection. Any value is accepted (a
    /// huge one is "never").
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.header_read_timeout = timeout.map(|t| t.min(MAX_TIMER));
        self
    }

    /// How long a connection may wait for its peer to take any of the
    /// bytes the server has to send before it is closed, cancelling its
    /// requests; `None` waits forever (default 60 s). Any value is accepted
    /// (a huge one is "never").
    #[must_use]
    pub fn write_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// How long a connection may have no request in flight before it is
    /// asked to end gracefully (HTTP/2: `GOAWAY`, then closed; HTTP/1:
    /// closed); `None` keeps it (default 60 s). A request counts from its
    /// head to the end of its response (an SSE stream, an open
    /// `subscriptions/listen` keep it), so this closes an HTTP/2
    /// connection whose peer answers pings but opens no stream, which no
    /// other timer does. Any value is accepted (a huge one is "never").
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout.map(|t| t.min(MAX_TIMER));
        self
    }

    /// The interval of HTTP/2 keep-alive pings; `None` sends none (default
    /// 30 s; hyper sends none by default). A ping
    /// not answered within 20 s closes the connection. Any value is
    /// accepted (a huge one is "never").
    #[must_use]
    pub fn http2_keep_alive(mut self, interval: Option<Duration>) -> Self {
        self.http2_keep_alive = interval.map(|t| t.min(MAX_TIMER));
        self
    }

    /// How many streams a client may reset before the server accepted them
    /// before hyper closes the HTTP/2 connection (default 1024; hyper's is
    /// 20, see [`Server`]).
    #[must_use]
    pub fn max_pending_accept_reset_streams(mut self, max: usize) -> Self {
        self.max_pending_accept_reset_streams = max;
        self
    }

    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            // The header read timeout is `serve`'s own per-connection timer
            // (see `connection`): hyper's makes and registers a timer for
            // every request head.
            .header_read_timeout(None);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(self.http2_keep_alive)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT)
            .max_pending_accept_reset_streams(self.max_pending_accept_reset_streams);
        builder
    }

    /// Serves `service` on `listener` until `shutdown` fires, then closes
    /// the listener and returns once every connection has ended gracefully.
    pub async fn serve<S, B>(self, listener: TcpListener, service: S, shutdown: CancellationToken)
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let builder = Arc::new(self.builder());
        // Each connection task holds a sender; `recv` returns `None` once
        // they have all ended.
        let (open, mut all_closed) = mpsc::channel::<()>(1);
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "accept failed; retrying in 100 ms");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    }
                }
            };
            if self.nodelay {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                }
            }
            let timers = Timers {
                head: self.header_read_timeout,
                write: self.write_timeout,
                idle: self.idle_timeout,
            };
            tokio::spawn(connection(
                builder.clone(),
                timers,
                stream,
                service.clone(),
                shutdown.clone(),
                open.clone(),
            ));
        }
        drop(listener);
        drop(open);
        let _ = all_closed.recv().await;
    }
}

/// What [`serve`] puts in each request's extensions: `serve` does not
/// return while one lives. The adapter keeps it for as long as the
/// request's call runs — also detached, after its client hung up — so that
/// `serve` returns only once every request it ran has ended.
///
/// It points to its connection's [`Activity`], not to anything the whole
/// server shares: cloning it per request touches one connection's memory,
/// which the worker threads do not contend for.
#[derive(Clone, Debug)]
pub(crate) struct Running {
    _connection: Arc<Activity>,
}

/// The timers `serve` runs itself on each connection.
#[derive(Clone, Copy, Debug)]
struct Timers {
    /// Until the first bytes (then hyper's header read timeout).
    head: Option<Duration>,
    /// A write the peer leaves pending.
    write: Option<Duration>,
    /// No request in flight.
    idle: Option<Duration>,
}

/// Serves one connection; on shutdown asks it to end gracefully and waits.
async fn connection<S, B>(
    builder: Arc<auto::Builder<TokioExecutor>>,
    timers: Timers,
    mut stream: TcpStream,
    service: S,
    shutdown: CancellationToken,
    open: mpsc::Sender<()>,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    // The first bytes, with the head timer hyper-util's auto builder does
    // not run; the shutdown ends the wait too.
    let first = tokio::select! {
        first = first_bytes(&mut stream, timers.head) => first,
        _ = shutdown.cancelled() => return,
    };
    let prefix = match first {
        Ok(Some(prefix)) => prefix,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, "connection closed before its first request");
            return;
        }
    };
    let activity = Arc::new(Activity::new(open));
    // HTTP/2 (the whole preface read): its writes are coalesced.
    let http2 = prefix[..] == stream::H2_PREFACE[..];
    let coalesce = http2.then(|| activity.clone());
    let stream = Io::new(prefix, stream, timers.write, coalesce);
    let requests = activity.clone();
    let hyper_service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Running {
            _connection: requests.clone(),
        });
        // In flight from here to the end (or drop) of its response body.
        let busy = Busy::new(&requests);
        let call = service.clone().oneshot(req);
        async move {
            let res = call.await?;
            Ok::<_, S::Error>(res.map(|body| Tracked { body, _busy: busy }))
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), hyper_service);
    tokio::pin!(conn);
    // The shutdown and the idle timer are waited for on a task of their
    // own, which tells this one: in a `select!` here they were polled at
    // every wake of the connection — the shutdown token's wait locks the
    // token's node, which every connection of the server shares.
    let (ask_end, mut end_asked) = oneshot::channel();
    // HTTP/1: between requests the connection waits for a head, which the
    // header read timeout bounds — the time no request is in flight, from
    // the end of the last response (or from the first bytes) to the next
    // head, read by the same lazy timer as the idle timeout.
    let quiet = if http2 {
        timers.idle
    } else {
        match (timers.idle, timers.head) {
            (Some(idle), Some(head)) => Some(idle.min(head)),
            (idle, head) => idle.or(head),
        }
    };
    tokio::spawn(watch(shutdown, activity.clone(), quiet, ask_end));
    let ended = tokio::select! {
        biased;
        ended = conn.as_mut() => ended,
        Ok(end) = &mut end_asked => {
            // HTTP/1 with no request in flight (this task starts them, so
            // none starts meanwhile): closed at once — a partial head is
            // not a request, and hyper would wait for its end.
            if end == End::Quiet && !http2 && activity.open.load(Ordering::Acquire) == 0 {
                tracing::debug!("no request head within the header read (or idle) timeout; closing the connection");
                return;
            }
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    // A client going away mid-request is the normal way to cancel.
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
