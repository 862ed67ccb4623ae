//! The example tools written with tower-mcp (`ToolBuilder` tools on an
//! `McpRouter`, as tower-mcp's docs show them), served by this crate's
//! stdio server through `McpRouterService` (a cancel drops the handler's
//! future, even right behind its request; no progress after the answer),
//! under `TimeoutLayer` (and `ProgressResetLayer` with `--idle-ms`):
//! `echo {text}`, `slow {seconds = 10, interval_ms = 100}` (never checks
//! its token; reports progress each step when asked), `spawned {seconds,
//! interval_ms}` (works in a spawned task that stops on its token).
//!
//! ```sh
//! cargo run -p tower-mcp-cancel-tower-mcp --features tasks --example tower_mcp_server -- --events
//! cargo run -p tower-mcp-cancel-tower-mcp --features tasks --example tower_mcp_server -- --listen 127.0.0.1:8080 --tasks
//! ```
//!
//! Stdio by default; `--listen ADDR` serves the same stack with this
//! crate's Streamable HTTP transport at `/mcp` instead (stateless
//! 2026-07-28; `Mcp-Name` checked).
//!
//! `--tasks` adds the conformance suite's task fixture tools under this
//! crate's `TasksLayer` (the `io.modelcontextprotocol/tasks` extension),
//! as the root package's `http_server --tasks` does (see
//! `tower_mcp_server/tasks.rs`); `--task-ttl DURATION` sets a task's time
//! to live (default 1 h).
//!
//! Flags: `--events` prints `STARTED <id> <ns>`, `DROPPED`, `DONE` and
//! `TOKEN` lines to stderr, as `stdio_server` does; `--timeout-ms N` sets
//! the `tools/call` deadline (default 600 s, 60 s for other methods);
//! `--idle-ms N` adds a progress idle limit (hard maximum 10 × N);
//! `--plain` serves the router with tower-mcp alone (its own
//! `StdioTransport::run()`, or its stateless `HttpTransport` with
//! `--listen`), for contrast — with `--tasks` the fixture tools are then
//! plain tools; `--help` lists them, and an unknown flag or a malformed
//! value is refused with a usage line and exit status 2.

use std::time::Duration;

use tower::ServiceBuilder;
use tower_mcp::extract::{Context, Json, State};
use tower_mcp::schemars::JsonSchema;
use tower_mcp::{CallToolResult, HttpTransport, McpRouter, StdioTransport, ToolBuilder};
use tower_mcp_cancel::tasks::TasksLayer;
use tower_mcp_cancel::transport::http::{OriginPolicy, StreamableHttpService};
use tower_mcp_cancel::transport::stdio::{process_streams, StdioServer};
use tower_mcp_cancel::transport::McpService;
use tower_mcp_cancel::CancelOnDisconnectLayer;
use tower_mcp_cancel_tower_mcp::McpRouterService;

#[path = "../../../examples/common/cli.rs"]
mod cli;
#[path = "../../../examples/common/sdk_server.rs"]
mod sdk_server;
#[cfg(feature = "tasks")]
#[path = "tower_mcp_server/tasks.rs"]
mod tasks;

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
/// stdio, served by this crate's stdio server through McpRouterService so
/// that a cancel, a deadline or the idle limit drops the handler's future.
#[derive(clap::Parser, Debug)]
#[command(name = "tower_mcp_server")]
struct Cli {
    #[command(flatten)]
    flags: sdk_server::Flags,
    /// Add the conformance suite's task fixture tools (`greet`,
    /// `slow_compute`, `failing_job`, `protocol_error_job`,
    /// `confirm_delete`, `multi_input`, `test_tool_with_task`), run as
    /// tasks for clients that declare the tasks extension (needs this
    /// package's `tasks` feature).
    #[arg(long)]
    tasks: bool,
    /// A task's time to live (`500ms`, `30s`, `5m`, `1h`, or seconds)
    /// [default: 1 h].
    #[arg(long, value_name = "DURATION", value_parser = cli::duration, requires = "tasks")]
    task_ttl: Option<Duration>,
}

/// tower-mcp alone: its own transports, as its docs serve a router.
async fn serve_plain(
    router: McpRouter,
    listen: Option<std::net::SocketAddr>,
) -> Result<(), String> {
    match listen {
        Some(addr) => {
            let transport =
                HttpTransport::new(router).stateless(tower_mcp::stateless::StatelessConfig::new());
            let app = transport.into_router_at("/mcp");
            let (listener, shutdown) = sdk_server::listen(addr).await?;
            tower_mcp_cancel::transport::http::serve(listener, app, shutdown).await;
            Ok(())
        }
        None => StdioTransport::new(router)
            .run()
            .await
            .map_err(|e| e.to_string()),
    }
}

/// The router through McpRouterService under this crate's layers (and
/// the tasks layer), served by this crate's transports.
async fn serve(
    router: McpRouter,
    flags: &sdk_server::Flags,
    tasks: Option<TasksLayer>,
) -> Result<(), String> {
    let service = McpRouterService::new(router);
    let layers = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        // Outside the tasks layer: bounds plain calls, and a task's
        // creating request (not its work, which its TTL bounds).
        .layer(flags.timeout())
        .option_layer(flags.progress());
    match tasks {
        Some(tasks) => {
            let stack = layers.layer(tasks).service(service.clone());
            serve_stack(stack, &service, flags.listen).await
        }
        None => serve_stack(layers.service(service.clone()), &service, flags.listen).await,
    }
}

/// Serves `stack` over stdio, its input routed to `service`'s router, or
/// over Streamable HTTP at `/mcp` of `listen`.
async fn serve_stack<S: McpService + Sync>(
    stack: S,
    service: &McpRouterService,
    listen: Option<std::net::SocketAddr>,
) -> Result<(), String> {
    match listen {
        Some(addr) => {
            let (listener, shutdown) = sdk_server::listen(addr).await?;
            let mcp = StreamableHttpService::new(stack)
                .origin_policy(OriginPolicy::Localhost)
                .shutdown(shutdown.clone());
            let app = axum::Router::new().route_service("/mcp", mcp);
            tower_mcp_cancel::transport::http::serve(listener, app, shutdown).await;
            Ok(())
        }
        None => {
            let (input, output) = process_streams();
            StdioServer::new()
                .serve(stack, service.route_notifications(input), output)
                .await
                .map_err(|e| e.to_string())
        }
    }
}

#[tokio::main]
async fn main() {
    let cli = cli::parse::<Cli>();
    sdk_server::init_tracing();
    let router = router(Events(cli.flags.events));
    #[cfg(not(feature = "tasks"))]
    if cli.tasks {
        eprintln!("--tasks: this binary was built without the `tasks` feature (--features tasks)");
        std::process::exit(2);
    }
    #[cfg(feature = "tasks")]
    let router = if cli.tasks {
        tasks::tools(router)
    } else {
        router
    };
    let result = if cli.flags.plain {
        serve_plain(router, cli.flags.listen).await
    } else {
        #[cfg(feature = "tasks")]
        let layer = cli.tasks.then(|| tasks::layer(cli.task_ttl));
        #[cfg(not(feature = "tasks"))]
        let layer = None;
        serve(router, &cli.flags, layer).await
    };
    sdk_server::exit(result, "tower-mcp server");
}
