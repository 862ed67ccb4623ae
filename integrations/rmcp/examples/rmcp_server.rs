//! The example tools written as an rmcp server (macros, as rmcp's docs show
//! them), served through [`Cancellable`] so that a cancel drops the
//! handler's future: `echo {text}`, `slow {seconds = 10, interval_ms = 100}`
//! (never checks its token; reports progress each step when asked),
//! `spawned {seconds, interval_ms}` (works in a spawned task that stops on
//! its token).
//!
//! ```sh
//! cargo run -p tower-mcp-cancel-rmcp --features http --example rmcp_server -- --events
//! cargo run -p tower-mcp-cancel-rmcp --features http --example rmcp_server -- --listen 127.0.0.1:8080 --events
//! ```
//!
//! Flags: `--events` prints `STARTED <id> <ns>`, `DROPPED`, `DONE` and
//! `TOKEN` lines to stderr, as `stdio_server` does; `--timeout-ms N` sets
//! the `tools/call` deadline (default 600 s, 60 s for other methods);
//! `--idle-ms N` adds a progress idle limit (hard maximum 10 × N);
//! `--plain` serves the handler with rmcp alone, for contrast; `--tasks`
//! adds the conformance suite's task fixture tools (as the root package's
//! `http_server --tasks`), run as tasks of [`Cancellable::tasks`] (with
//! `--plain`, on rmcp's own `TaskManager`), `--task-ttl D` their TTL; `--help`
//! lists them, and an unknown flag or a malformed value is refused with a
//! usage line and exit status 2.
//!
//! Stdio by default; `--listen ADDR` serves rmcp's own
//! `StreamableHttpService` at `/mcp` instead: stateless (2026-07-28, and
//! 2025-era clients without sessions), JSON responses unless the handler
//! sends progress first, behind [`CancelOnDisconnectLayer::http`], which
//! gives a client's disconnect its reason (rmcp's own `ct` drops the
//! handler on it too, without one).

use std::time::Duration;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{ProgressNotificationParam, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt,
};
use tower_mcp_cancel::CancelOnDisconnectLayer;
use tower_mcp_cancel_rmcp::Cancellable;

#[path = "../../../examples/common/cli.rs"]
mod cli;
#[path = "../../../examples/common/sdk_server.rs"]
mod sdk_server;
#[path = "rmcp_server/tasks.rs"]
mod tasks;

use sdk_server::{Events, Probe};

/// The request's id as JSON, as `--events` prints it.
fn request_id(context: &RequestContext<RoleServer>) -> String {
    serde_json::to_string(&context.id).unwrap_or_default()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
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

#[derive(Clone)]
struct Tools {
    events: Events,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Tools {
    fn new(events: Events) -> Self {
        Self {
            events,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Returns its `text` argument.")]
    async fn echo(
        &self,
        Parameters(EchoArgs { text }): Parameters<EchoArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        let probe = Probe::start(request_id(&context), &self.events);
        probe.finish();
        text
    }

    #[tool(
        description = "Sleeps `seconds` in steps of `interval_ms`, reporting progress each step when asked; never checks its cancellation token."
    )]
    async fn slow(
        &self,
        Parameters(args): Parameters<WorkArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        let probe = Probe::start(request_id(&context), &self.events);
        let (steps, interval) = args.steps();
        let token = context.meta.get_progress_token();
        for i in 1..=steps {
            tokio::time::sleep(interval).await;
            if let Some(token) = &token {
                let param = ProgressNotificationParam::new(token.clone(), i as f64)
                    .with_total(steps as f64)
                    .with_message(format!("step {i}/{steps}"));
                let _ = context.peer.notify_progress(param).await;
            }
        }
        probe.finish();
        format!("slept {steps} steps of {interval:?}")
    }

    #[tool(
        description = "Works `seconds` in a spawned task that stops when the request's cancellation token fires."
    )]
    async fn spawned(
        &self,
        Parameters(args): Parameters<WorkArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, ErrorData> {
        let probe = Probe::start(request_id(&context), &self.events);
        let (steps, interval) = args.steps();
        let (token, id, events) = (context.ct.clone(), probe.id.clone(), self.events.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            for _ in 1..=steps {
                tokio::select! {
                    _ = token.cancelled() => {
                        tracing::info!(request_id = %id, "spawned task saw its token fire; stopping");
                        events.emit("TOKEN", &id);
                        return;
                    }
                    _ = tokio::time::sleep(interval) => {}
                }
            }
            let _ = tx.send(steps);
        });
        let out = match rx.await {
            Ok(n) => Ok(format!("spawned task finished {n} steps of {interval:?}")),
            Err(_) => Err(ErrorData::internal_error("spawned task stopped", None)),
        };
        probe.finish();
        out
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The example tools as an rmcp server (echo, slow, spawned), served
/// through Cancellable so that a cancel, a deadline or the idle limit drops
/// the handler's future. Over stdio by default; --listen serves rmcp's
/// StreamableHttpService at /mcp instead.
#[derive(clap::Parser, Debug)]
#[command(name = "rmcp_server")]
struct Cli {
    #[command(flatten)]
    flags: sdk_server::Flags,
    /// Add the conformance suite's task fixture tools (`greet`,
    /// `slow_compute`, `failing_job`, `protocol_error_job`,
    /// `confirm_delete`, `multi_input`, `test_tool_with_task`), run as
    /// tasks of the integration's tasks layer for clients that declare the
    /// tasks extension (with `--plain`: on rmcp's own `TaskManager`).
    #[arg(long)]
    tasks: bool,
    /// A task's time to live (`500ms`, `30s`, `5m`, `1h`, or seconds)
    /// [default: 1 h; with `--plain`, rmcp's default, 5 min].
    #[arg(long, value_name = "DURATION", value_parser = cli::duration, requires = "tasks")]
    task_ttl: Option<Duration>,
}

/// Serves `handler` with rmcp's `StreamableHttpService` at `/mcp`, the
/// route wrapped in [`CancelOnDisconnectLayer::http`] and, for a
/// [`Cancellable`], in its progress observer; until Ctrl-C.
async fn serve_http<H: rmcp::ServerHandler + Clone>(
    addr: std::net::SocketAddr,
    handler: H,
    observe: Option<tower_mcp_cancel_rmcp::ObserveHttpLayer>,
) -> Result<(), String> {
    use axum::error_handling::HandleErrorLayer;
    use http::StatusCode;
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use tower::BoxError;
    use tower::ServiceBuilder;

    let (listener, shutdown) = sdk_server::listen(addr).await?;
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    config.cancellation_token = shutdown.child_token();
    // The stack fails only when the exchange's `Cancellation` fires before
    // the response head, which only a layer outside it could do; axum
    // takes no error.
    async fn unavailable(e: BoxError) -> (StatusCode, String) {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
    }
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        std::sync::Arc::new(NeverSessionManager::default()),
        config,
    );
    let stack = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(unavailable))
        .layer(CancelOnDisconnectLayer::http());
    let app = match observe {
        Some(observe) => {
            axum::Router::new().route_service("/mcp", stack.layer(observe).service(mcp))
        }
        None => axum::Router::new().route_service("/mcp", stack.service(mcp)),
    };
    tower_mcp_cancel::transport::http::serve(listener, app, shutdown).await;
    Ok(())
}

/// Serves `handler` over stdio or `--listen`: with rmcp alone (`--plain`),
/// or through [`Cancellable`] (and `tasks`, the tasks layer of `--tasks`).
async fn serve<H: ServerHandler + Clone>(
    handler: H,
    flags: &sdk_server::Flags,
    tasks: Option<tower_mcp_cancel::tasks::TasksLayer>,
) -> Result<(), String> {
    if flags.plain {
        if let Some(addr) = flags.listen {
            return serve_http(addr, handler, None).await;
        }
        return match handler.serve(rmcp::transport::stdio()).await {
            Ok(running) => running.waiting().await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
    }
    let mut server = Cancellable::new(handler).timeout(flags.timeout());
    if let Some(progress) = flags.progress() {
        server = server.progress(progress);
    }
    if let Some(tasks) = tasks {
        server = server.tasks(tasks);
    }
    if let Some(addr) = flags.listen {
        // One expression: the same wrapped handler, rmcp's HTTP service.
        let observe = server.observe_http();
        return serve_http(addr, server, Some(observe)).await;
    }
    match server.serve(tower_mcp_cancel_rmcp::stdio()).await {
        Ok(running) => running.waiting().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::main]
async fn main() {
    let cli = cli::parse::<Cli>();
    sdk_server::init_tracing();
    let tools = Tools::new(Events(cli.flags.events));
    let result = match (cli.tasks, cli.flags.plain) {
        (false, _) => serve(tools, &cli.flags, None).await,
        (true, false) => {
            let layer = tasks::fixture::layer(cli.task_ttl, Duration::ZERO);
            let handler = tasks::WithFixtures {
                inner: tools,
                manager: None,
            };
            serve(handler, &cli.flags, Some(layer)).await
        }
        (true, true) => {
            let manager = rmcp::task_manager::TaskManager::new();
            let handler = tasks::WithFixtures {
                inner: tools,
                manager: Some((manager, cli.task_ttl)),
            };
            serve(handler, &cli.flags, None).await
        }
    };
    sdk_server::exit(result, "rmcp server");
}
