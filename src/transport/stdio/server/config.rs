//! [`StdioServer`]: the stdio server's configuration.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::cancel::InFlight;
use crate::policy::MethodPolicy;
use crate::timeout::BudgetKey;
use crate::transport::DEFAULT_DRAIN_GRACE;

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
/// ```
#[derive(Clone, Debug)]
pub struct StdioServer {
    pub(super) max_line_bytes: usize,
    pub(super) write_queue: usize,
    pub(super) max_in_flight: usize,
    pub(super) registry: Option<InFlight>,
    pub(super) shutdown: Option<CancellationToken>,
    pub(super) drain_grace: Duration,
    pub(super) first_poll_on_reader: bool,
    pub(super) budget_key: Option<BudgetKey>,
    pub(super) grace: MethodPolicy<Duration>,
}

impl Default for StdioServer {
    fn default() -> Self {
        Self::new()
    }
}

impl StdioServer {
    /// Defaults: lines up to 4 MiB, a writer queue of 64 messages, 1024
    /// requests in flight, no drain grace, the
    /// [first poll on the reader](Self::first_poll_on_reader) on.
    pub fn new() -> Self {
        Self {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            write_queue: DEFAULT_WRITE_QUEUE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            registry: None,
            shutdown: None,
            drain_grace: DEFAULT_DRAIN_GRACE,
            first_poll_on_reader: true,
            budget_key: None,
            grace: MethodPolicy::new(Duration::ZERO),
        }
    }

    /// Honours a client's remaining budget, read from each request's
    /// `_meta[key]` (a JSON integer of milliseconds, as a client transport
    /// with the same key writes it): the request's timer layers enforce
    /// `min(own policy, budget)`, as a gRPC server does with
    /// `grpc-timeout`, and its handler sees the budget as its
    /// [deadline](crate::RequestContext::deadline). A missing, malformed or
    /// negative value is ignored, a huge one clamped; a budget never
    /// lengthens a deadline. Off by default. See the
    /// [timeout module](crate::timeout#on-the-wire-an-opt-in-budget-in-_meta).
    ///
    /// # Errors
    ///
    /// [`InvalidBudgetKey`](crate::timeout::InvalidBudgetKey) if `key` is
    /// empty or under a `_meta` prefix MCP reserves
    /// (`io.modelcontextprotocol/`, `dev.mcp/`, …; it defines no budget
    /// key); the setting is then left as it was.
    pub fn budget_key(
        mut self,
        key: impl Into<String>,
    ) -> Result<Self, crate::timeout::InvalidBudgetKey> {
        self.budget_key = Some(BudgetKey::new(key)?);
        Ok(self)
    }

    /// The largest incoming line accepted (default 4 MiB; at least 1); a
    /// longer one is skipped up to its newline without being held and
    /// answered with `-32600` naming the limit, carrying the request's id
    /// (read as the line went by) so that the client's call ends; without
    /// an id when none could be read or it is in flight.
    #[must_use]
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
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

    /// How many requests the connection may have in flight (default
    /// 1024; at least 1). A request beyond it is answered at once
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
    /// flight is cancelled with
    /// [`CancelReason::Shutdown`](crate::CancelReason::Shutdown) (its
    /// handler future dropped, its token fired): each open `subscriptions/listen`
    /// gets its graceful result, nothing else is answered, reading stops,
    /// and [`serve`](Self::serve) returns once the request tasks ended and
    /// the writer flushed what was queued. A token fired before `serve`
    /// starts ends it at once. The same token can stop an HTTP endpoint
    /// ([`StreamableHttpService::shutdown`]) and any number of connections.
    ///
    #[cfg_attr(
        feature = "http",
        doc = "[`StreamableHttpService::shutdown`]: crate::transport::http::StreamableHttpService::shutdown"
    )]
    #[cfg_attr(
        not(feature = "http"),
        doc = "[`StreamableHttpService::shutdown`]: crate::transport"
    )]
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
    /// when the grace is over are cancelled —
    /// [`CancelReason::Shutdown`](crate::CancelReason::Shutdown) after a
    /// shutdown,
    /// [`CancelReason::TransportClosed`](crate::CancelReason::TransportClosed)
    /// after the end of input — their handler futures dropped, their tokens fired, nothing
    /// written for them. [`serve`](Self::serve) returns as soon as nothing
    /// is in flight. A shutdown during the grace that followed the end of
    /// input ends that grace at once.
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = grace;
        self
    }

    /// The cooperative grace of cancelled requests, by method, and by tool
    /// for a `tools/call` (a [tool entry](MethodPolicy::tool) comes before the
    /// `tools/call` entry; default
    /// zero for every method: none, a cancel drops the handler future at
    /// once; an entry of
    /// [`method_unlimited`](MethodPolicy::method_unlimited) also means
    /// none; a `subscriptions/listen` never gets one). A request's own
    /// [`Cancellation::set_grace`](crate::Cancellation::set_grace)
    /// overrides it.
    ///
    /// On a cancel — the client's `notifications/cancelled`, the end of
    /// input, a `TimeoutLayer` or `ProgressResetLayer` expiry in the
    /// stack, the shutdown — the request's token fires at once and the
    /// wire sees what it sees without a grace, at the same moment; the
    /// handler future is then polled for up to the grace, so that a
    /// handler that waits on its token can finish its cleanup, and
    /// dropped. Nothing it sends meanwhile is written, and its id can be
    /// reused at once; it still counts toward
    /// [`max_in_flight`](Self::max_in_flight), and [`serve`](Self::serve)
    /// returns only once it ended. See the
    /// [transport docs](crate::transport#cooperative-grace-then-drop).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_mcp_cancel::transport::stdio::StdioServer;
    /// use tower_mcp_cancel::MethodPolicy;
    ///
    /// let server = StdioServer::new().grace(
    ///     MethodPolicy::new(Duration::from_millis(500))
    ///         .method("tools/call", Duration::from_secs(5))
    ///         .tool("export", Duration::from_secs(30)),
    /// );
    /// ```
    #[must_use]
    pub fn grace(mut self, policy: MethodPolicy<Duration>) -> Self {
        self.grace = policy;
        self
    }

    /// Whether the connection's reader polls each new request once itself
    /// before giving it a task of its own (default `true`).
    ///
    /// On, a request whose handler is ready at that first poll is answered
    /// without a task — no spawn, no hand-off between threads — and its
    /// answer shares a write with the others read in the same go: on a
    /// pipelined load of quick handlers that spares much of the server's
    /// CPU per request (BENCHMARKS.md, figure 3). The price is where that
    /// first poll runs: on the reader's task, not the request's. A handler
    /// that reads [`tokio::task::id()`] (or anything keyed by the current
    /// task) sees the reader's task until its first `.await` that waits,
    /// and its own task afterwards; and until then the reader waits for it.
    ///
    /// Off, every request's handler runs only inside its own spawned task,
    /// from its first poll on. Each request then costs a spawn and its
    /// hand-offs, its answer is written on its own (answers still share a
    /// write when the writer finds several queued), and the writer never
    /// holds an answer for company, since what tells it that handlers
    /// compute is how long their first polls on the reader took.
    #[must_use]
    pub fn first_poll_on_reader(mut self, on: bool) -> Self {
        self.first_poll_on_reader = on;
        self
    }
}
