//! The example MCP server over stdio: `server/discover`, `tools/list`,
//! `tools/call` (`echo`, `slow`, `spawned`, `cleanup`, …), `initialize`, `ping`, behind the
//! full server stack (`CancelOnDisconnectLayer`, `TimeoutLayer`).
//!
//! ```sh
//! cargo run --features stdio --example stdio_server -- --events
//! ```
//!
//! It logs to stderr; with `--events` it also prints `STARTED <id> <ns>`,
//! `DROPPED <id> <ns>`, `DONE <id> <ns>` and `TOKEN <id> <ns>` lines there.
//! It exits when its stdin closes, or on Ctrl-C / SIGTERM (requests in
//! flight may finish within `--drain-grace SECONDS`; default: none).
//!
//! `--timeout DURATION` sets the deadline of every request (default: 60 s,
//! `tools/call` 600 s); `--budget` honours the remaining budget a client
//! sends in `_meta` (`mcp_call --budget`): a request then gets
//! `min(--timeout, budget)`. The tool `deadline {}` returns
//! `{"remainingMs": N}`, what its handler sees of that deadline.
//!
//! `--grace DURATION` gives a cancelled request a cooperative grace: its
//! token fires at once (and the client sees what it sees without one), its
//! handler future is dropped only after that long. The tool
//! `cleanup {ms}` waits for its token, then spends `ms` on its cleanup;
//! with `--events` it prints `CLEANED <id> <ns>` once that finished.
//!
//! `--help` lists the flags; an unknown flag or a malformed value is
//! refused with a usage line and exit status 2.

mod common;

/// The example MCP server over stdio (the example tools: echo, slow,
/// spawned, cleanup, deadline, gated, release), behind CancelOnDisconnectLayer
/// and TimeoutLayer. Logs to stderr (RUST_LOG overrides `info`); exits when
/// stdin closes, or on Ctrl-C / SIGTERM.
#[derive(clap::Parser, Debug)]
#[command(name = "stdio_server")]
struct Cli {
    #[command(flatten)]
    server: common::ServerFlags,
}

#[tokio::main]
async fn main() {
    let cli: Cli = common::cli::parse();
    common::init_tracing();
    let flags = cli.server;
    // Ctrl-C / SIGTERM: listen streams end gracefully, requests in flight
    // may finish within `--drain-grace SECONDS` (default: none).
    let shutdown = tokio_util::sync::CancellationToken::new();
    let opts = common::Options::from_flags(&flags, &shutdown);
    let service = common::server_stack(opts.clone());
    let signal = shutdown.clone();
    tokio::spawn(async move {
        common::stop_signal().await;
        signal.cancel();
    });
    let mut server = tower_mcp_cancel::transport::stdio::StdioServer::new()
        .shutdown(shutdown.clone())
        .drain_grace(flags.drain_grace)
        // `--grace DURATION`: a cancelled request's token fires at once,
        // its handler is dropped only after this long (default: at once).
        .grace(tower_mcp_cancel::MethodPolicy::new(flags.grace));
    if flags.budget {
        server = server
            .budget_key(common::BUDGET_KEY)
            .expect("a budget key outside the reserved prefixes");
    }
    // Non-blocking stdin/stdout through the reactor when they are pipes or
    // sockets (what an MCP host gives its server).
    let served = server.serve_stdio(service).await;
    // `--tasks`: with stdin closed no client can reach a task again; running
    // tasks stop after the drain grace, as at a shutdown.
    shutdown.cancel();
    opts.tasks_drained().await;
    let code = match served {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "stdio server stopped");
            1
        }
    };
    // On a terminal, stdin's reader thread may still be blocked in a read:
    // do not wait for it.
    std::process::exit(code);
}
