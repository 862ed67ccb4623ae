//! [`StdioClientBuilder`]: the stdio client's limits, shutdown grace and
//! notification callback, and how it connects (a stream pair, or a spawned
//! child in a process group of its own).

use std::fmt;
use std::io;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::process::Handle;
use super::reserved::Reserved;
use super::tasks::{read_loop, write_loop};
use super::{Shared, State, StdioClient};
use crate::timeout::BudgetKey;
use crate::transport::call::client::{Outbound, Pending};
use crate::transport::stdio::framing::LineReader;
use crate::transport::stdio::{DEFAULT_MAX_LINE_BYTES, DEFAULT_WRITE_QUEUE};
use serde_json::value::RawValue;

/// The default time a child gets to exit after its stdin was closed.
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long by default the id of a cancelled request stays reserved while
/// its late response may still come (see [`StdioClient`]).
const DEFAULT_CANCELLED_ID_RESERVATION: Duration = Duration::from_secs(60);

/// How many ids of cancelled requests are reserved at most by default; past
/// it, the oldest reservation ends early (see [`StdioClient`]).
const DEFAULT_MAX_RESERVED_IDS: usize = 1024;

/// A callback for server notifications that are not progress (log messages,
/// `subscriptions/listen` notifications, …).
pub(super) type NotificationSink = Arc<dyn Fn(&str, Option<&RawValue>) + Send + Sync>;

/// Configuration of a [`StdioClient`].
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::transport::stdio::StdioClient;
/// let builder = StdioClient::builder()
///     .max_line_bytes(1 << 20)
///     .write_queue(8)
///     .shutdown_grace(Duration::from_secs(1))
///     .on_notification(|method, _params| eprintln!("server says {method}"));
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
    budget_key: Option<BudgetKey>,
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
            .field("budget_key", &self.budget_key)
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
            budget_key: None,
        }
    }
}

impl StdioClientBuilder {
    /// The largest incoming line accepted (default 4 MiB; at least 1);
    /// longer ones are skipped without being held, and the call such an
    /// answer was for fails with an error naming the limit (see
    /// [`StdioClient`]).
    #[must_use]
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
    }

    /// How many requests may wait for the writer (default 64; at least 1;
    /// callers wait when full).
    /// Cancellations do not count: they are never blocked nor lost.
    #[must_use]
    pub fn write_queue(mut self, requests: usize) -> Self {
        // A tokio channel holds at most `Semaphore::MAX_PERMITS`.
        self.write_queue = requests.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// How long a child process gets to exit after its stdin was closed,
    /// before it is sent SIGTERM (Unix), and again after that before it is
    /// killed (SIGKILL), as the stdio transport asks (default 5 s).
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long the id of a request cancelled after it was written stays
    /// reserved (its late response may still come), and how many such ids
    /// are reserved at most (past that, the oldest reservation ends early).
    /// A call with a reserved id fails at once. Default: 60 s, 1024 ids;
    /// a zero duration or count reserves nothing.
    #[must_use]
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
    #[must_use]
    pub fn own_process_group(mut self, own: bool) -> Self {
        self.own_process_group = own;
        self
    }

    /// Writes each request's remaining budget into its `_meta[key]`, as a
    /// JSON integer of milliseconds (rounded down), for a server that
    /// honours it with the same key. The budget is the time left until the
    /// request's deadline as its stack knows it: a
    /// [`TimeoutLayer`](crate::TimeoutLayer) above the client (with a
    /// [`Cancellation`](crate::Cancellation) in the request, where it
    /// offers its deadline), an inherited
    /// [`DeadlineCap`](crate::DeadlineCap); a request without one is sent
    /// as it is. Off by default: MCP standardizes no such key; see the
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

    /// Calls `f` with the method and the (undecoded) params of every server
    /// notification other than `notifications/progress` and
    /// `notifications/cancelled`.
    pub fn on_notification(
        mut self,
        f: impl Fn(&str, Option<&RawValue>) + Send + Sync + 'static,
    ) -> Self {
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
                pending: Pending::new(),
                reserved: Reserved::new(self.reservation, self.max_reserved),
            }),
            ctl: ctl_tx,
            closed: AtomicBool::new(false),
            outbound: Outbound::new(),
            sink: self.sink,
            budget_key: self.budget_key,
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
