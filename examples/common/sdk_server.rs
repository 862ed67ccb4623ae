//! What the SDK packages' example servers share (`rmcp_server` in
//! `integrations/rmcp`, `tower_mcp_server` in `integrations/tower-mcp`),
//! included by `#[path]`: the `--events` lines, the probe that reports a
//! handler's end or drop, and the work tools' steps. (The root's example
//! servers report on this crate's request ids, in `common/mod.rs`.)
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `--events` prints, and where.
#[derive(Clone, Debug, Default)]
pub(crate) struct Events(pub(crate) bool);

impl Events {
    /// `<kind> <id> <unix-ns>` on stderr, when `--events` was given.
    pub(crate) fn emit(&self, kind: &str, id: &str) {
        if self.0 {
            let ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            // One write, so that a line is never split by another writer.
            let line = format!("{kind} {id} {ns}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    }
}

/// Reports `STARTED` when made, `DROPPED` if the handler's future is
/// dropped before it finished, `DONE` when it finished.
pub(crate) struct Probe {
    /// The request id, as JSON.
    pub(crate) id: String,
    events: Events,
    done: bool,
}

impl Probe {
    /// The handler of the request `id` (as JSON) started.
    pub(crate) fn start(id: String, events: &Events) -> Self {
        events.emit("STARTED", &id);
        Probe {
            id,
            events: events.clone(),
            done: false,
        }
    }

    /// The handler finished.
    pub(crate) fn finish(mut self) {
        self.done = true;
        tracing::info!(request_id = %self.id, "handler completed");
        self.events.emit("DONE", &self.id);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.done {
            tracing::info!(request_id = %self.id, "handler future dropped by cancellation");
            self.events.emit("DROPPED", &self.id);
        }
    }
}

/// The work tools' `seconds` (default 10) and `interval_ms` (default 100):
/// the number of steps and a step's length, bounded so that no value
/// panics or overflows.
pub(crate) fn steps(seconds: Option<f64>, interval_ms: Option<f64>) -> (u64, Duration) {
    let seconds = seconds.unwrap_or(10.0).clamp(0.0, 86_400.0);
    let interval_ms = interval_ms.unwrap_or(100.0).clamp(1.0, 3_600_000.0);
    let steps = ((seconds * 1000.0) / interval_ms).ceil().max(1.0) as u64;
    (steps, Duration::from_secs_f64(interval_ms / 1000.0))
}

/// The flags both servers take (clap's `#[command(flatten)]`).
#[derive(clap::Args, Debug)]
pub(crate) struct Flags {
    /// Print `STARTED`, `DROPPED`, `DONE` and `TOKEN` lines
    /// (`<kind> <id> <unix-ns>`) to stderr, as stdio_server does.
    #[arg(long)]
    pub(crate) events: bool,
    /// The tools/call deadline in milliseconds (other methods: 60 s).
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    pub(crate) timeout_ms: u64,
    /// A progress idle limit in milliseconds (hard maximum: 10 times it).
    #[arg(long, value_name = "MS")]
    pub(crate) idle_ms: Option<u64>,
    /// Serve with the SDK alone, without the layers, for contrast.
    #[arg(long)]
    pub(crate) plain: bool,
    /// Serve the SDK's Streamable HTTP transport (stateless) at
    /// http://ADDR/mcp instead of stdio (port 0 picks a free one, printed
    /// on stdout).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
}

impl Flags {
    /// The deadlines: `--timeout-ms` for `tools/call`, 60 s for the rest.
    pub(crate) fn timeout(&self) -> tower_mcp_cancel::TimeoutLayer {
        let call = Duration::from_millis(self.timeout_ms);
        tower_mcp_cancel::TimeoutLayer::new(Duration::from_secs(60)).method("tools/call", call)
    }

    /// The progress idle limit of `--idle-ms`, if given.
    pub(crate) fn progress(&self) -> Option<tower_mcp_cancel::ProgressResetLayer> {
        self.idle_ms
            .map(|ms| tower_mcp_cancel::ProgressResetLayer::new(Duration::from_millis(ms)))
    }
}

/// Logs to stderr (stdout is the protocol's, over stdio), at `RUST_LOG`'s
/// level or `info`.
pub(crate) fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .try_init();
}

/// Binds `addr` and prints the endpoint the address actually bound
/// (`--listen 127.0.0.1:0` picks a port) on stdout, as `http_server`
/// prints it; the token fires at Ctrl-C, to end the server.
pub(crate) async fn listen(
    addr: std::net::SocketAddr,
) -> Result<(tokio::net::TcpListener, tokio_util::sync::CancellationToken), String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(%bound, "MCP endpoint at http://{bound}/mcp");
    println!("listening on http://{bound}/mcp");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        signal.cancel();
    });
    Ok((listener, shutdown))
}

/// Ends the process with the server's outcome: 0, or 1 with the error
/// logged. Without waiting: stdin's reader may still be blocked in a read.
pub(crate) fn exit(result: Result<(), String>, server: &str) -> ! {
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "{server} stopped");
            1
        }
    };
    std::process::exit(code)
}
