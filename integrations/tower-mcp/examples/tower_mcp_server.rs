//! The example tools written with tower-mcp (`ToolBuilder` tools on an
//! `McpRouter`, as tower-mcp's docs show them), served by tower-mcp's own
//! `StdioTransport` with `.layer(RouterLayer::new()…)` so that a cancel
//! drops the handler's future, its input read through `CheckedInput`
//! (`tower_mcp_cancel_tower_mcp::stdio()`) so that a malformed
//! notification is ignored, not answered: `echo {text}`, `slow {seconds =
//! 10, interval_ms = 100}` (never checks its token; reports progress each step
//! when asked), `spawned {seconds, interval_ms}` (works in a spawned task
//! that stops on its token).
//!
//! ```sh
//! cargo run -p tower-mcp-cancel-tower-mcp --example tower_mcp_server -- --events
//! cargo run -p tower-mcp-cancel-tower-mcp --example tower_mcp_server -- --listen 127.0.0.1:8080 --events
//! ```
//!
//! Stdio by default; `--listen ADDR` serves tower-mcp's own Streamable HTTP
//! transport at `/mcp` instead, stateless (`HttpTransport::stateless`, its
//! configuration for 2026-07-28 servers without sessions), the layer given
//! to it the same way.
//!
//! Flags: `--events` prints `STARTED <id> <ns>`, `DROPPED`, `DONE` and
//! `TOKEN` lines to stderr, as `stdio_server` does; `--timeout-ms N` sets
//! the `tools/call` deadline (default 600 s, 60 s for other methods);
//! `--idle-ms N` adds a progress idle limit (hard maximum 10 × N);
//! `--plain` serves the router with tower-mcp alone (its own `run()`,
//! without `CheckedInput`), for contrast; `--help` lists them, and an
//! unknown flag or a malformed value is refused with a usage line and exit
//! status 2.

use std::time::Duration;

use tower_mcp::extract::{Context, Json, State};
use tower_mcp::schemars::JsonSchema;
use tower_mcp::{CallToolResult, HttpTransport, McpRouter, StdioTransport, ToolBuilder};
use tower_mcp_cancel_tower_mcp::RouterLayer;

#[path = "../../../examples/common/cli.rs"]
mod cli;
#[path = "../../../examples/common/sdk_server.rs"]
mod sdk_server;

use sdk_server::{Events, Probe};

/// The request's id as JSON, as `--events` prints it.
fn request_id(ctx: &Context) -> String {
    serde_json::to_string(ctx.request_id()).unwrap_or_default()
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct EchoArgs {
    /// The text to return.
    text: String,
}

#[derive(serde::Deserialize, JsonSchema)]
#[schemars(crate = "tower_mcp::schemars")]
struct WorkArgs {
    /// How long to work, in seconds (default 10).
    seconds: Option<f64>,
    /// The step length, in milliseconds (default 100).
    interval_ms: Option<f64>,
}

impl WorkArgs {
    /// (number of steps, step length).
    fn steps(&self) -> (u64, Duration) {
        sdk_server::steps(self.seconds, self.interval_ms)
    }
}

/// The router: `echo`, `slow` and `spawned`, each reporting its events.
fn router(events: Events) -> McpRouter {
    let echo = ToolBuilder::new("echo")
        .description("Returns its `text` argument.")
        .extractor_handler(
            events.clone(),
            |State(events): State<Events>, ctx: Context, Json(args): Json<EchoArgs>| async move {
                Probe::start(request_id(&ctx), &events).finish();
                Ok(CallToolResult::text(args.text))
            },
        )
        .build();
    let slow = ToolBuilder::new("slow")
        .description(
            "Sleeps `seconds` in steps of `interval_ms`, reporting progress each step when asked; never checks its cancellation token.",
        )
        .extractor_handler(
            events.clone(),
            |State(events): State<Events>, ctx: Context, Json(args): Json<WorkArgs>| async move {
                let probe = Probe::start(request_id(&ctx), &events);
                let (steps, interval) = args.steps();
                for i in 1..=steps {
                    tokio::time::sleep(interval).await;
                    // A no-op when the request carries no progress token.
                    let message = format!("step {i}/{steps}");
                    ctx.report_progress(i as f64, Some(steps as f64), Some(&message))
                        .await;
                }
                probe.finish();
                Ok(CallToolResult::text(format!(
                    "slept {steps} steps of {interval:?}"
                )))
            },
        )
        .build();
    let spawned = ToolBuilder::new("spawned")
        .description(
            "Works `seconds` in a spawned task that stops when the request's cancellation token fires.",
        )
        .extractor_handler(
            events,
            |State(events): State<Events>, ctx: Context, Json(args): Json<WorkArgs>| async move {
                let probe = Probe::start(request_id(&ctx), &events);
                let (steps, interval) = args.steps();
                let (token, id) = (ctx.cancellation_token(), probe.id.clone());
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    for _ in 1..=steps {
                        tokio::select! {
                            () = token.cancelled() => {
                                tracing::info!(request_id = %id, "spawned task saw its token fire; stopping");
                                events.emit("TOKEN", &id);
                                return;
                            }
                            () = tokio::time::sleep(interval) => {}
                        }
                    }
                    let _ = tx.send(steps);
                });
                let out = match rx.await {
                    Ok(n) => Ok(CallToolResult::text(format!(
                        "spawned task finished {n} steps of {interval:?}"
                    ))),
                    Err(_) => Ok(CallToolResult::error("spawned task stopped")),
                };
                probe.finish();
                out
            },
        )
        .build();
    McpRouter::new()
        .server_info("tower_mcp_server", env!("CARGO_PKG_VERSION"))
        .tool(echo)
        .tool(slow)
        .tool(spawned)
}

/// The example tools as a tower-mcp server (echo, slow, spawned) over
/// stdio, its router under RouterLayer so that a cancel, a deadline or the
/// idle limit drops the handler's future.
#[derive(clap::Parser, Debug)]
#[command(name = "tower_mcp_server")]
struct Cli {
    #[command(flatten)]
    flags: sdk_server::Flags,
}

/// Serves `router` (under `layer`, if any) with tower-mcp's stateless
/// Streamable HTTP transport at `/mcp`, until Ctrl-C.
async fn serve_http(
    addr: std::net::SocketAddr,
    router: McpRouter,
    layer: Option<RouterLayer>,
) -> Result<(), String> {
    let mut transport =
        HttpTransport::new(router).stateless(tower_mcp::stateless::StatelessConfig::new());
    if let Some(layer) = layer {
        transport = transport.layer(layer);
    }
    let app = transport.into_router_at("/mcp");
    let (listener, shutdown) = sdk_server::listen(addr).await?;
    tower_mcp_cancel::transport::http::serve(listener, app, shutdown).await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let cli = cli::parse::<Cli>();
    sdk_server::init_tracing();
    let router = router(Events(cli.flags.events));
    let layer = (!cli.flags.plain).then(|| {
        let layer = RouterLayer::new().timeout(cli.flags.timeout());
        match cli.flags.progress() {
            Some(progress) => layer.progress(progress),
            None => layer,
        }
    });

    let result = match cli.flags.listen {
        Some(addr) => serve_http(addr, router, layer).await,
        None => {
            let transport = StdioTransport::new(router);
            let run = match layer {
                // tower-mcp alone, as its docs serve it: the contrast.
                None => {
                    let mut transport = transport;
                    transport.run().await
                }
                // Inside the runtime: the layer starts its progress relay
                // here. The input is read through CheckedInput: a
                // notification the layered transport would answer (a
                // malformed cancel) is ignored instead.
                Some(layer) => {
                    let (input, output) = tower_mcp_cancel_tower_mcp::stdio();
                    transport.layer(layer).run_with_streams(input, output).await
                }
            };
            run.map_err(|e| e.to_string())
        }
    };
    sdk_server::exit(result, "tower-mcp server");
}
