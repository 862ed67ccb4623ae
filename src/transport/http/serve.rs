//! [`serve`] and [`Server`]: an MCP endpoint (an axum `Router` or a
//! [`StreamableHttpService`](super::StreamableHttpService)) served on a
//! `TcpListener` with hyper-util (HTTP/1.1 and HTTP/2 with prior knowledge,
//! told apart per connection), with the settings a server whose clients
//! cancel needs.
//!
//! The settings and why they are the defaults are on [`Server`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

use crate::BoxError;

/// Serves `service` on `listener` with [`Server`]'s defaults until
/// `shutdown` fires, then drains gracefully.
///
/// ```no_run
/// use tokio_util::sync::CancellationToken;
/// use tower::service_fn;
/// use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
/// use tower_mcp_cancel::{BoxError, McpRequest};
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
///   ([`DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS`](Server::DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS)
///   = 1024). hyper counts the streams a client resets before the server
///   has accepted them and, past its default of 20, closes the whole
///   connection with `GOAWAY ENHANCE_YOUR_CALM "too_many_resets"`. In MCP a
///   reset stream *is* a cancellation, so a client cancelling a burst of
///   calls on one connection hits that limit and loses its other calls. The
///   limit still exists (it bounds the accept queue against the
///   CVE-2023-44487 "rapid reset" attack), at five times hyper's 200
///   concurrent streams, the same as h2's own limit for locally reset streams.
/// * **HTTP/1 header read timeout**
///   ([`DEFAULT_HEADER_READ_TIMEOUT`](Server::DEFAULT_HEADER_READ_TIMEOUT)
///   = 30 s): a connection that does not finish sending its request head in
///   time is closed, so a slow client cannot hold sockets. hyper only
///   applies it with a timer, which `axum::serve` does not set.
/// * **Graceful shutdown through a `CancellationToken`**, the one the
///   crate's shutdown takes: when it fires the listener is closed, every
///   connection is asked to end gracefully (HTTP/1: after the response in
///   progress; HTTP/2: `GOAWAY`, the streams in flight run to their end),
///   and the future returns once they have all closed. Give the same token
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
///     .max_pending_accept_reset_streams(1024);
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

impl Server {
    /// The default HTTP/1 header read timeout: 30 s (hyper's own default,
    /// which hyper only enforces when a timer is set, as here).
    pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

    /// The default HTTP/2 allowance of streams reset by the client before
    /// they were accepted: 1024 (hyper's default is 20: see
    /// [`Server`]).
    pub const DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 1024;

    /// The defaults: `TCP_NODELAY`, a 30 s header read timeout, 1024
    /// pending reset streams.
    pub fn new() -> Self {
        Server {
            nodelay: true,
            header_read_timeout: Some(Self::DEFAULT_HEADER_READ_TIMEOUT),
            max_pending_accept_reset_streams: Self::DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS,
        }
    }

    /// Sets `TCP_NODELAY` on accepted streams (default `true`).
    pub fn nodelay(mut self, nodelay: bool) -> Self {
        self.nodelay = nodelay;
        self
    }

    /// The HTTP/1 header read timeout; `None` disables it (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`](Self::DEFAULT_HEADER_READ_TIMEOUT)).
    /// One too long for the clock to add (`Duration::MAX`) is none.
    pub fn header_read_timeout(mut self, timeout: Option<Duration>) -> Self {
        // hyper adds it to `Instant::now()` per request head, and panics on
        // overflow; twice the value covers the process's own lifetime.
        self.header_read_timeout = timeout.filter(|t| {
            std::time::Instant::now()
                .checked_add(t.saturating_mul(2))
                .is_some()
        });
        self
    }

    /// How many streams a client may reset before the server accepted them
    /// before hyper closes the HTTP/2 connection (default
    /// [`DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS`](Self::DEFAULT_MAX_PENDING_ACCEPT_RESET_STREAMS)).
    pub fn max_pending_accept_reset_streams(mut self, max: usize) -> Self {
        self.max_pending_accept_reset_streams = max;
        self
    }

    fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
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
            tokio::spawn(connection(
                builder.clone(),
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

/// Serves one connection; on shutdown asks it to end gracefully and waits.
async fn connection<S, B>(
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    service: S,
    shutdown: CancellationToken,
    _open: mpsc::Sender<()>,
) where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let hyper_service = hyper::service::service_fn(move |req| service.clone().oneshot(req));
    let conn = builder.serve_connection(TokioIo::new(stream), hyper_service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    // A client going away mid-request is the normal way to cancel.
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Errors of one incoming connection, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
