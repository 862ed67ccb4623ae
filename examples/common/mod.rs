//! A small hand-written MCP server shared by the example servers (stdio and
//! Streamable HTTP): a `service_fn` over [`McpRequest`] matching on method
//! names, and the full server stack around it.
//!
//! * `server/discover` (2026-07-28 `DiscoverResult`), `tools/list`,
//!   `tools/call`, `ping`, and the 2025-11-25 `initialize` handshake so that
//!   older clients connect. Anything else is `-32601`.
//! * Tools: `echo {text}`; `slow {seconds = 10, interval_ms = 100}` sleeps in
//!   steps and reports progress each step when the request carries a progress
//!   token — it never looks at its cancellation token, so only a drop of its
//!   future stops it; `spawned {seconds = 10, interval_ms = 100}` does its
//!   work in a `tokio::spawn`ed task that stops through the request's token;
//!   `gated {steps = 3}` reports progress step by step, each step after a
//!   `release` call (`release {}` lets one waiting step go), so a test can
//!   tell whether each progress event reached it before the next was made.
//! * Logs: the crate's one `info` line per request (method, id, outcome,
//!   duration; target `tower_mcp_cancel::request`), nothing per progress
//!   notification above `debug`, no colour codes unless stderr is a
//!   terminal.
//! * Events: one `tracing` event when a handler future is dropped by
//!   cancellation and one when it completes, each with the request id; with
//!   [`Options::events`] also a machine-readable stderr line each:
//!   `DROPPED <id as JSON> <unix-epoch-ns>`, `DONE <id as JSON> <ns>`,
//!   `STARTED <id as JSON> <ns>` when a handler begins, and
//!   `TOKEN <id as JSON> <ns>` when a `spawned` task sees its token fire.
//!
//! Nothing here is process-global: the options travel with the service.
// Shared by the example binaries; `pub` for them, not an API.
#![allow(dead_code, unreachable_pub, missing_debug_implementations)]

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, TimeoutLayer};

/// The modern protocol versions this server speaks.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28"];
/// The legacy versions answered through `initialize`.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// The `_meta` key of the protocol version every 2026-07-28 request carries.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The server's name in `serverInfo`.
pub const SERVER_NAME: &str = "tower-mcp-cancel-example";

/// Default deadline for every method but `tools/call`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline for `tools/call`.
pub const TOOLS_CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// How the example server reports what happens to its handlers.
#[derive(Clone, Debug)]
pub struct Options {
    /// Also print `STARTED`/`DROPPED`/`DONE`/`TOKEN` lines to stderr.
    pub events: bool,
    /// The steps of `gated` calls wait for permits that `release` adds.
    gate: Arc<tokio::sync::Semaphore>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            events: false,
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Options {
    /// Options from the command line: `--events` turns on the stderr lines.
    pub fn from_args() -> Self {
        Self {
            events: std::env::args().any(|a| a == "--events"),
            ..Self::default()
        }
    }

    fn emit(&self, kind: &str, id: &RequestId) {
        if self.events {
            // One write, so that a line is never split by another process
            // writing to the same stderr (a client that spawned us).
            let line = format!("{kind} {id} {}\n", now_ns());
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    }
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The value after `name` on the command line (`--listen 127.0.0.1:0`).
pub fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// `--drain-grace SECONDS`: how long requests in flight may finish at
/// shutdown (default: none, cancelled at once). Exits with a message on a
/// value that is not a number of seconds.
pub fn drain_grace() -> Duration {
    let Some(text) = arg_value("--drain-grace") else {
        return Duration::ZERO;
    };
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Duration::from_secs_f64(s),
        _ => {
            eprintln!("bad --drain-grace {text:?}: expected seconds between 0 and 86400");
            std::process::exit(2)
        }
    }
}

/// Ctrl-C, or (on Unix) SIGTERM, which orchestrators and `kill` send.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Logs to stderr (stdout is the protocol channel on stdio), with colour
/// codes only when stderr is a terminal. `RUST_LOG` overrides the default
/// `info`: one line per request (the crate's `request ended`, in the
/// request's span: method, id, transport; outcome, duration).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init();
}

/// The handler future's drop probe: reports `DROPPED` if the future is
/// dropped before it finished, `DONE` when it finished.
struct Probe {
    id: Option<RequestId>,
    method: String,
    opts: Options,
    done: bool,
}

impl Probe {
    fn finish(mut self) {
        self.done = true;
        if let Some(id) = &self.id {
            tracing::debug!(request_id = %id, method = %self.method, "handler completed");
            self.opts.emit("DONE", id);
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(id) = &self.id {
            tracing::debug!(request_id = %id, method = %self.method, "handler future dropped by cancellation");
            self.opts.emit("DROPPED", id);
        }
    }
}

/// The full server stack: [`CancelOnDisconnectLayer`] outermost, then a
/// [`TimeoutLayer`] (60 s, `tools/call` 600 s), then [`handler`].
pub fn server_stack(opts: Options) -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .layer(TimeoutLayer::new(DEFAULT_TIMEOUT).method("tools/call", TOOLS_CALL_TIMEOUT))
            .service(handler(opts)),
    )
}

/// The bare handler as a service, without layers.
pub fn handler(opts: Options) -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(service_fn(move |req: McpRequest| {
        let opts = opts.clone();
        async move { handle(req, opts).await }
    }))
}

/// Answers one request.
pub async fn handle(req: McpRequest, opts: Options) -> Result<Value, BoxError> {
    if let Some(id) = req.id() {
        opts.emit("STARTED", id);
    }
    let probe = Probe {
        id: req.id().cloned(),
        method: req.method().to_owned(),
        opts: opts.clone(),
        done: false,
    };
    let out = dispatch(&req, &opts).await;
    probe.finish();
    out.map_err(|e| Box::new(e) as BoxError)
}

async fn dispatch(req: &McpRequest, opts: &Options) -> Result<Value, ErrorObject> {
    match req.method() {
        "initialize" => Ok(initialize(req)),
        "ping" => Ok(json!({})),
        "server/discover" => {
            check_version(req)?;
            Ok(discover())
        }
        "tools/list" => {
            check_version(req)?;
            Ok(tools_list())
        }
        "tools/call" => {
            check_version(req)?;
            tools_call(req, opts).await
        }
        other => Err(ErrorObject::new(
            ErrorObject::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

fn server_info() -> Value {
    json!({ "name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION") })
}

/// A request that names a protocol version must name one we speak.
fn check_version(req: &McpRequest) -> Result<(), ErrorObject> {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    let Some(v) = params["_meta"].get(PROTOCOL_VERSION_META) else {
        return Ok(()); // a legacy (initialize-era) request
    };
    match v.as_str() {
        Some(s) if SUPPORTED_VERSIONS.contains(&s) => Ok(()),
        _ => Err(ErrorObject::new(
            ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
        )
        .with_data(json!({
            "supported": SUPPORTED_VERSIONS.iter().chain(LEGACY_VERSIONS.first()).collect::<Vec<_>>(),
            "requested": v,
        }))),
    }
}

fn initialize(req: &McpRequest) -> Value {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let version = if LEGACY_VERSIONS.contains(&asked) {
        asked
    } else {
        LEGACY_VERSIONS[0]
    };
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": {} },
        "serverInfo": server_info(),
    })
}

fn discover() -> Value {
    json!({
        "resultType": "complete",
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": { "tools": {} },
        "_meta": { "io.modelcontextprotocol/serverInfo": server_info() },
        "instructions": "Example tools: echo returns its text; slow sleeps and reports progress; spawned works in a spawned task that stops on cancel.",
        "ttlMs": 3_600_000,
        "cacheScope": "public",
    })
}

fn tools_list() -> Value {
    json!({
        "resultType": "complete",
        "tools": [
            {
                "name": "echo",
                "description": "Returns its `text` argument.",
                "inputSchema": {
                    "type": "object",
                    "properties": { "text": { "type": "string" } },
                    "required": ["text"],
                },
            },
            {
                "name": "slow",
                "description": "Sleeps `seconds` in steps of `interval_ms`, reporting progress each step when asked; never checks its cancellation token.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "seconds": { "type": "number", "default": 10 },
                        "interval_ms": { "type": "number", "default": 100 },
                    },
                },
            },
            {
                "name": "gated",
                "description": "Reports progress step by step; each step after the next `release` call.",
                "inputSchema": {
                    "type": "object",
                    "properties": { "steps": { "type": "number", "default": 3 } },
                },
            },
            {
                "name": "release",
                "description": "Lets one waiting `gated` step go.",
                "inputSchema": { "type": "object" },
            },
            {
                "name": "spawned",
                "description": "Works `seconds` in a spawned task that stops when the request's cancellation token fires.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "seconds": { "type": "number", "default": 10 },
                        "interval_ms": { "type": "number", "default": 100 },
                    },
                },
            },
        ],
        "ttlMs": 60_000,
        "cacheScope": "public",
    })
}

fn text_result(text: String) -> Value {
    json!({
        "resultType": "complete",
        "content": [{ "type": "text", "text": text }],
        "isError": false,
    })
}

/// `seconds` and `interval_ms` → (number of steps, step length).
fn steps_of(args: &Value) -> (u64, Duration) {
    let seconds = args["seconds"]
        .as_f64()
        .unwrap_or(10.0)
        .clamp(0.0, 86_400.0);
    let interval_ms = args["interval_ms"]
        .as_f64()
        .unwrap_or(100.0)
        .clamp(1.0, 3_600_000.0);
    let steps = ((seconds * 1000.0) / interval_ms).ceil().max(1.0) as u64;
    (steps, Duration::from_secs_f64(interval_ms / 1000.0))
}

async fn tools_call(req: &McpRequest, opts: &Options) -> Result<Value, ErrorObject> {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    let args = &params["arguments"];
    let ctx = RequestContext::of(req);
    match params["name"].as_str() {
        Some("echo") => match args["text"].as_str() {
            Some(text) => Ok(text_result(text.to_owned())),
            None => Err(ErrorObject::new(
                ErrorObject::INVALID_PARAMS,
                "echo needs a string argument `text`",
            )),
        },
        Some("slow") => {
            let (steps, interval) = steps_of(args);
            for i in 1..=steps {
                tokio::time::sleep(interval).await;
                ctx.progress(
                    i as f64,
                    Some(steps as f64),
                    Some(format!("step {i}/{steps}")),
                )
                .await;
            }
            Ok(text_result(format!("slept {steps} steps of {interval:?}")))
        }
        Some("spawned") => {
            let (steps, interval) = steps_of(args);
            let token = ctx.token();
            let id = req.id().cloned();
            let opts = opts.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                for _ in 1..=steps {
                    tokio::select! {
                        _ = token.cancelled() => {
                            if let Some(id) = &id {
                                tracing::debug!(request_id = %id, "spawned task saw its token fire; stopping");
                                opts.emit("TOKEN", id);
                            }
                            return;
                        }
                        _ = tokio::time::sleep(interval) => {}
                    }
                }
                let _ = tx.send(steps);
            });
            match rx.await {
                Ok(n) => Ok(text_result(format!(
                    "spawned task finished {n} steps of {interval:?}"
                ))),
                Err(_) => Err(ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    "spawned task stopped",
                )),
            }
        }
        Some("gated") => {
            let steps = args["steps"].as_u64().unwrap_or(3).clamp(1, 1000);
            for i in 1..=steps {
                ctx.progress(
                    i as f64,
                    Some(steps as f64),
                    Some(format!("step {i}/{steps}")),
                )
                .await;
                // The next step waits for a `release` call.
                match opts.gate.acquire().await {
                    Ok(permit) => permit.forget(),
                    Err(_) => break,
                }
            }
            Ok(text_result(format!("{steps} gated steps")))
        }
        Some("release") => {
            opts.gate.add_permits(1);
            Ok(text_result("released one step".to_owned()))
        }
        Some(other) => Err(ErrorObject::new(
            ErrorObject::INVALID_PARAMS,
            format!("Unknown tool: {other}"),
        )),
        None => Err(ErrorObject::new(
            ErrorObject::INVALID_PARAMS,
            "tools/call needs a `name`",
        )),
    }
}
