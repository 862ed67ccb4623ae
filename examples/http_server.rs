//! The example MCP server over Streamable HTTP — 2026-07-28, and the
//! 2025 revisions with sessions for clients that `initialize` — with axum
//! (served by `transport::http::serve`):
//! the same tools as the stdio example server (`echo`, `slow`, `spawned`, `cleanup`, …;
//! `server/discover`, `tools/list`, `initialize`, `ping`), behind the same
//! server stack (`CancelOnDisconnectLayer`, `TimeoutLayer` 60 s /
//! `tools/call` 600 s), mounted at `/mcp`.
//!
//! ```sh
//! cargo run --features http --example http_server -- --listen 127.0.0.1:8080 --events
//! cargo run --features stdio,http --example mcp_call -- --url http://127.0.0.1:8080/mcp slow '{"seconds": 3}'
//! ```
//!
//! It logs to stderr (`RUST_LOG` overrides `info`); with `--events` it also
//! prints `STARTED <id> <ns>`, `DROPPED <id> <ns>`, `DONE <id> <ns>` and
//! `TOKEN <id> <ns>` lines there. A client that closes its response stream — Ctrl-C in `mcp_call`,
//! a client timeout — makes the server log the handler future being dropped
//! and the token firing with "client disconnected". A 2025-era client (the
//! TypeScript SDK v1, most MCP hosts) initializes a session instead; its
//! `notifications/cancelled` (a timeout, the user's cancel) drops the
//! handler the same way, with "cancelled by peer: <its reason>".
//!
//! `--timeout DURATION` sets the deadline of every MCP request (default:
//! 60 s, `tools/call` 600 s); `--budget` honours the remaining budget a
//! client sends in `_meta` (`mcp_call --budget`): a request then gets
//! `min(--timeout, budget)`. The tool `deadline {}` returns
//! `{"remainingMs": N}`, what its handler sees of that deadline.
//!
//! `--grace DURATION` gives a cancelled request a cooperative grace: its
//! token fires at once (and the client sees what it sees without one), its
//! handler future is dropped only after that long. The tool
//! `cleanup {ms}` waits for its token, then spends `ms` on its cleanup;
//! with `--events` it prints `CLEANED <id> <ns>` once that finished.
//!
//! # How it is stacked
//!
//! ```text
//! axum::Router
//!   ├─ /mcp   StreamableHttpService ─ CancelOnDisconnectLayer ─ TimeoutLayer ─ handler
//!   ├─ /work  HandleErrorLayer ─ TimeoutLayer (by Mcp-Method) ─ CancelOnDisconnectLayer::http() ─ axum handler
//!   └─ (all)  tower-http TraceLayer ─ RequestBodyLimitLayer
//! ```
//!
//! `/work` shows the layers around a plain HTTP handler, no MCP body
//! parsing involved: `CancelOnDisconnectLayer::http()` puts a `Cancellation`
//! in the request extensions (read with axum's `Extension` extractor) and
//! fires it when the response is dropped before its end, so the work the
//! handler spawned stops when the client goes away:
//!
//! ```sh
//! curl -X POST http://127.0.0.1:8080/work   # then Ctrl-C: the server logs "spawned work stopped"
//! ```
//!
//! `TimeoutLayer` over `http::Request` reads the method from the
//! `Mcp-Method` header, so a gateway can apply per-method deadlines without
//! parsing the body: here `tools/call` gets 5 s, everything else 20 s:
//!
//! ```sh
//! curl -X POST -H 'Mcp-Method: tools/call' http://127.0.0.1:8080/work  # times out after 5 s
//! ```
//!
//! Ctrl-C (or SIGTERM) stops the server: open `subscriptions/listen`
//! streams get their graceful result, other requests in flight may finish
//! within `--drain-grace SECONDS` (default: none, cancelled at once), then
//! the server waits for connections to close. `--listen 127.0.0.1:0` picks a
//! free port: the address bound is printed on stdout
//! (`listening on http://127.0.0.1:PORT/mcp`).
//!
//! `--help` lists the flags; an unknown flag or a malformed value is
//! refused with a usage line and exit status 2.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::post;
use tokio_util::sync::CancellationToken;
use tower::BoxError;
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;
use tower_mcp_cancel::transport::http::{
    serve, OriginPolicy, SessionLimits, StreamableHttpService,
};
use tower_mcp_cancel::{CancelOnDisconnectLayer, Cancellation, TimeoutLayer};

/// A plain axum handler that spawns work and lets the token stop it.
async fn work(Extension(cancellation): Extension<Cancellation>) -> String {
    let token = cancellation.token();
    let job = tokio::spawn(async move {
        for tick in 1..=40u32 {
            tokio::select! {
                _ = token.cancelled() => {
                    tracing::info!(tick, reason = ?cancellation.reason().map(ToString::to_string), "spawned work stopped: token fired");
                    return format!("stopped at tick {tick}\n");
                }
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
        "finished 40 ticks\n".to_owned()
    });
    job.await.unwrap_or_else(|e| format!("work failed: {e}\n"))
}

/// The example MCP server over Streamable HTTP at /mcp (2026-07-28, and
/// 2025 sessions for clients that initialize), with the example tools
/// (echo, slow, spawned, cleanup, deadline, gated, release) behind
/// CancelOnDisconnectLayer and TimeoutLayer, and a plain axum route /work.
/// Logs to stderr (RUST_LOG overrides `info`); prints
/// `listening on http://ADDR/mcp` on stdout; Ctrl-C / SIGTERM stops it.
#[derive(clap::Parser, Debug)]
#[command(name = "http_server")]
struct Cli {
    /// The address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    server: common::ServerFlags,
}

/// The largest request body, for the MCP endpoint and the whole router.
const MAX_BODY_BYTES: usize = 4 << 20;

#[tokio::main]
async fn main() {
    let Cli {
        listen: addr,
        server: flags,
    } = common::cli::parse();
    common::init_tracing();
    let shutdown = CancellationToken::new();
    let opts = common::Options::from_flags(&flags, &shutdown);

    let mut mcp = StreamableHttpService::new(common::server_stack(opts.clone()))
        .origin_policy(OriginPolicy::Localhost)
        .keep_alive(Some(Duration::from_secs(15)))
        .max_body_bytes(MAX_BODY_BYTES)
        // 2025-era clients (the TypeScript SDK v1, most MCP hosts) too:
        // initialize opens a session whose notifications/cancelled cancel.
        .stateful_sessions(SessionLimits::new())
        .shutdown(shutdown.clone())
        .drain_grace(flags.drain_grace)
        // `--grace DURATION`: a cancelled request's token fires at once,
        // its handler is dropped only after this long (default: at once).
        .grace(tower_mcp_cancel::MethodPolicy::new(flags.grace));
    if flags.budget {
        mcp = mcp
            .budget_key(common::BUDGET_KEY)
            .expect("a budget key outside the reserved prefixes");
    }

    let work_route = post(work).layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(|e: BoxError| async move {
                (StatusCode::GATEWAY_TIMEOUT, format!("{e}\n"))
            }))
            .layer(
                TimeoutLayer::new(Duration::from_secs(20))
                    .method("tools/call", Duration::from_secs(5)),
            )
            .layer(CancelOnDisconnectLayer::http()),
    );

    let app = axum::Router::new()
        .route_service("/mcp", mcp)
        .route("/work", work_route)
        .layer(
            ServiceBuilder::new()
                .layer(TraceLayer::new_for_http())
                .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES)),
        );

    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    // The address actually bound (`--listen 127.0.0.1:0` picks a free port):
    // logged, and printed alone on stdout for scripts and tests.
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "MCP endpoint at http://{bound}/mcp");
    println!("listening on http://{bound}/mcp");
    let signal = shutdown.clone();
    tokio::spawn(async move {
        common::stop_signal().await;
        tracing::info!("shutting down");
        signal.cancel();
    });
    // TCP_NODELAY, an HTTP/2 reset allowance for clients that cancel, a
    // header read timeout; returns once the connections have drained.
    serve(listener, app, shutdown).await;
    // `--tasks`: running tasks stop after the drain grace too.
    opts.tasks_drained().await;
}
