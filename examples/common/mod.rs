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
//!   tell whether each progress event reached it before the next was made;
//!   `cleanup {ms = 100}` waits for its cancellation token, then spends
//!   `ms` on its cleanup (an async sleep) and returns — with `--grace` the
//!   server lets that cleanup finish before it drops the handler.
//! * Logs: the crate's one `info` line per request (method, id, outcome,
//!   duration; target `tower_mcp_cancel::request`), nothing per progress
//!   notification above `debug`, no colour codes unless stderr is a
//!   terminal.
//! * Events: one `tracing` event when a handler future is dropped by
//!   cancellation and one when it completes, each with the request id; with
//!   [`Options::events`] also a machine-readable stderr line each:
//!   `DROPPED <id as JSON> <unix-epoch-ns>`, `DONE <id as JSON> <ns>`,
//!   `STARTED <id as JSON> <ns>` when a handler begins, and
//!   `TOKEN <id as JSON> <ns>` when a `spawned` task sees its token fire,
//!   `CLEANED <id as JSON> <ns>` when a `cleanup` call finished its
//!   cleanup.
//!
//! Nothing here is process-global: the options travel with the service.
//!
//! Each request's `params` are read once, into [`Params`], by the methods
//! that look at them: a view that borrows from the request (no
//! `serde_json::Value` tree, no copy); a tool's arguments are read from it
//! by the tool. The common answer, a text result, is a struct serialized as
//! it is written ([`Reply`]).
// Shared by the example binaries; `pub` for them, not an API.
#![allow(dead_code, unreachable_pub, missing_debug_implementations)]

pub mod cli;
#[cfg(feature = "tasks")]
pub mod tasks;

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
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

/// The `_meta` key of the remaining budget (milliseconds) that `mcp_call
/// --budget` sends and the servers honour with `--budget`. MCP defines no
/// such key: this one is the examples' own (a vendor prefix, as the spec
/// asks of keys it does not define).
pub const BUDGET_KEY: &str = "io.github.tower-mcp-cancel/budgetMs";

/// The flags both example servers take (`--help` lists them with these
/// docs). A value that does not parse is refused by clap with a usage line
/// and exit status 2, as is a flag it does not know.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerFlags {
    /// Print `STARTED`, `DROPPED`, `DONE`, `TOKEN` and `CLEANED` lines
    /// (`<kind> <id> <unix-ns>`) to stderr as handlers start, are dropped,
    /// finish, see their token fire, finish their cleanup.
    #[arg(long)]
    pub events: bool,
    /// The deadline of every request (`500ms`, `30s`, `5m`, `1h`, or
    /// seconds) [default: 60 s, `tools/call` 600 s].
    #[arg(long, value_name = "DURATION", value_parser = cli::duration)]
    pub timeout: Option<Duration>,
    /// A cancelled request's cooperative grace: its token fires at once,
    /// its handler future is dropped only after this long (as `--timeout`).
    #[arg(long, value_name = "DURATION", value_parser = cli::duration, default_value = "0s")]
    pub grace: Duration,
    /// Honour the remaining budget a client sends in `_meta` under
    /// `io.github.tower-mcp-cancel/budgetMs` (`mcp_call --budget`): a
    /// request then gets `min(--timeout, budget)`.
    #[arg(long)]
    pub budget: bool,
    /// At shutdown (Ctrl-C, SIGTERM), how long requests in flight may
    /// finish, in seconds (0 to 86400; 0: cancelled at once).
    #[arg(long, value_name = "SECONDS", value_parser = drain_seconds, default_value = "0")]
    pub drain_grace: Duration,
    /// Add the conformance suite's task fixture tools (`greet`,
    /// `slow_compute`, `failing_job`, `protocol_error_job`,
    /// `confirm_delete`, `multi_input`, `test_tool_with_task`), run as tasks
    /// for clients that declare the tasks extension (needs the `tasks`
    /// feature).
    #[arg(long)]
    pub tasks: bool,
    /// A task's time to live (as `--timeout`) [default: 1 h].
    #[arg(long, value_name = "DURATION", value_parser = cli::duration, requires = "tasks")]
    pub task_ttl: Option<Duration>,
}

/// `--drain-grace`: seconds between 0 and 86400.
fn drain_seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err("expected seconds between 0 and 86400".to_owned()),
    }
}

/// How the example server reports what happens to its handlers.
#[derive(Clone, Debug)]
pub struct Options {
    /// Also print `STARTED`/`DROPPED`/`DONE`/`TOKEN`/`CLEANED` lines to stderr.
    pub events: bool,
    /// The steps of `gated` calls wait for permits that `release` adds.
    gate: Arc<tokio::sync::Semaphore>,
    /// `--timeout`: the deadline of every request, instead of the defaults.
    pub timeout: Option<Duration>,
    /// `--tasks`: the tasks layer of the task fixture tools.
    #[cfg(feature = "tasks")]
    pub tasks: Option<tower_mcp_cancel::tasks::TasksLayer>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            events: false,
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            timeout: None,
            #[cfg(feature = "tasks")]
            tasks: None,
        }
    }
}

impl Options {
    /// Options from the servers' flags (`--events`, `--timeout`,
    /// `--tasks`); with `--tasks`, the server's `shutdown` token stops its
    /// tasks after `--drain-grace`.
    pub fn from_flags(flags: &ServerFlags, shutdown: &tokio_util::sync::CancellationToken) -> Self {
        #[cfg(not(feature = "tasks"))]
        if flags.tasks {
            eprintln!("--tasks: this binary was built without the `tasks` feature (cargo run --features tasks,...)");
            std::process::exit(2);
        }
        #[cfg(feature = "tasks")]
        let tasks = flags.tasks.then(|| {
            tasks::layer(flags.task_ttl, flags.grace)
                .shutdown(shutdown.clone())
                .drain_grace(flags.drain_grace)
        });
        #[cfg(not(feature = "tasks"))]
        let _ = shutdown;
        Self {
            events: flags.events,
            timeout: flags.timeout,
            #[cfg(feature = "tasks")]
            tasks,
            ..Self::default()
        }
    }

    /// Resolves once the server's tasks have ended (at once without `--tasks`).
    pub async fn tasks_drained(&self) {
        #[cfg(feature = "tasks")]
        if let Some(tasks) = &self.tasks {
            tasks.handle().drained().await;
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
/// dropped before it finished, `DONE` when it finished. It borrows the
/// request: nothing is copied for a report that is usually not made.
struct Probe<'a> {
    req: &'a McpRequest,
    opts: &'a Options,
    done: bool,
}

impl Probe<'_> {
    fn finish(mut self) {
        self.done = true;
        if let Some(id) = self.req.id() {
            tracing::debug!(request_id = %id, method = %self.req.method(), "handler completed");
            self.opts.emit("DONE", id);
        }
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(id) = self.req.id() {
            tracing::debug!(request_id = %id, method = %self.req.method(), "handler future dropped by cancellation");
            self.opts.emit("DROPPED", id);
        }
    }
}

/// The full server stack: [`CancelOnDisconnectLayer`] outermost, then a
/// [`TimeoutLayer`] (60 s, `tools/call` 600 s; `--timeout` for every
/// request), then [`handler`].
pub fn server_stack(opts: Options) -> BoxCloneSyncService<McpRequest, Reply, BoxError> {
    let timeout = match opts.timeout {
        Some(t) => TimeoutLayer::new(t),
        None => TimeoutLayer::new(DEFAULT_TIMEOUT).method("tools/call", TOOLS_CALL_TIMEOUT),
    };
    #[cfg(feature = "tasks")]
    if let Some(tasks) = opts.tasks.clone() {
        use tower_mcp_cancel::tasks::TasksResponse;
        // The tasks layer between the creating request and the work: the
        // timeout below bounds the work, task or not.
        return BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(CancelOnDisconnectLayer::new())
                .map_response(|r: TasksResponse<Reply>| match r {
                    TasksResponse::Inner(reply) => reply,
                    TasksResponse::Tasks(value) => Reply::Json(value),
                })
                .layer(tasks)
                .layer(timeout)
                .service(handler(opts)),
        );
    }
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .layer(timeout)
            .service(handler(opts)),
    )
}

/// The bare handler as a service, without layers.
pub fn handler(opts: Options) -> BoxCloneSyncService<McpRequest, Reply, BoxError> {
    BoxCloneSyncService::new(service_fn(move |req: McpRequest| {
        let opts = opts.clone();
        async move { handle(req, opts).await }
    }))
}

/// Answers one request.
pub async fn handle(req: McpRequest, opts: Options) -> Result<Reply, BoxError> {
    if let Some(id) = req.id() {
        opts.emit("STARTED", id);
    }
    let probe = Probe {
        req: &req,
        opts: &opts,
        done: false,
    };
    let out = dispatch(&req, &opts).await;
    probe.finish();
    out.map_err(|e| Box::new(e) as BoxError)
}

/// What a handler answers: most often a text result, written from a
/// struct; anything else as a `Value`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// A tool's text result.
    Text(TextResult),
    /// Any other result.
    Json(Value),
}

/// A `tools/call` result of one text item.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TextResult {
    result_type: &'static str,
    content: [TextContent; 1],
    is_error: bool,
}

#[derive(Debug, Serialize)]
struct TextContent {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

/// The fields of `params` the handler reads, borrowed from the request:
/// one parse for the whole dispatch, without a `Value` tree. All absent
/// for params that are not an object, or not readable as one (a repeated
/// field, a `_meta` that is not an object).
#[derive(Default, Deserialize)]
pub struct Params<'a> {
    /// `tools/call`: the tool (a string, or the call is refused).
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    /// `tools/call`: the tool's arguments, read by the tool.
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    /// `initialize`: the version the client asks for.
    #[serde(default, borrow, rename = "protocolVersion")]
    protocol_version: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "_meta")]
    meta: Option<Meta<'a>>,
}

#[derive(Default, Deserialize)]
struct Meta<'a> {
    /// Present (even `null`) on every 2026-07-28 request.
    #[serde(
        default,
        borrow,
        rename = "io.modelcontextprotocol/protocolVersion",
        deserialize_with = "present"
    )]
    protocol_version: Option<&'a RawValue>,
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl<'a> Params<'a> {
    /// The view of `req`'s params.
    pub fn of(req: &'a McpRequest) -> Self {
        req.params()
            .filter(|p| p.get().starts_with('{'))
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default()
    }
}

/// A JSON string as text; `None` for any other value. A string without
/// escapes is the text between its quotes (a `RawValue` is valid JSON), so
/// the common case is borrowed without a second parse.
fn as_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
        _ => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// The params are read only by the methods that look at them.
async fn dispatch(req: &McpRequest, opts: &Options) -> Result<Reply, ErrorObject> {
    match req.method() {
        "initialize" => Ok(Reply::Json(initialize(&Params::of(req)))),
        "ping" => Ok(Reply::Json(json!({}))),
        "server/discover" => {
            check_version(&Params::of(req))?;
            Ok(Reply::Json(discover()))
        }
        "tools/list" => {
            check_version(&Params::of(req))?;
            #[allow(unused_mut)]
            let mut list = tools_list();
            #[cfg(feature = "tasks")]
            if opts.tasks.is_some() {
                if let Some(tools) = list["tools"].as_array_mut() {
                    tools.extend(tasks::tools_list());
                }
            }
            Ok(Reply::Json(list))
        }
        "tools/call" => {
            let params = Params::of(req);
            check_version(&params)?;
            #[cfg(feature = "tasks")]
            if opts.tasks.is_some() {
                let name = params.name.and_then(as_str);
                if let Some(name) = name.filter(|n| tasks::TOOLS.contains(&&**n)) {
                    let tree: Value = req.params_as().unwrap_or_default();
                    if let Some(out) = tasks::call(&name, req, &tree).await {
                        return out;
                    }
                }
            }
            tools_call(req, &params, opts).await
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
fn check_version(params: &Params<'_>) -> Result<(), ErrorObject> {
    let Some(v) = params.meta.as_ref().and_then(|m| m.protocol_version) else {
        return Ok(()); // a legacy (initialize-era) request
    };
    match as_str(v) {
        Some(s) if SUPPORTED_VERSIONS.contains(&&*s) => Ok(()),
        _ => Err(ErrorObject::new(
            ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
        )
        .with_data(json!({
            "supported": SUPPORTED_VERSIONS.iter().chain(LEGACY_VERSIONS.first()).collect::<Vec<_>>(),
            "requested": serde_json::from_str::<Value>(v.get()).unwrap_or_default(),
        }))),
    }
}

fn initialize(params: &Params<'_>) -> Value {
    let asked = params.protocol_version.and_then(as_str);
    let version = match asked.as_deref() {
        Some(v) if LEGACY_VERSIONS.contains(&v) => v,
        _ => LEGACY_VERSIONS[0],
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
                "name": "deadline",
                "description": "Returns {\"remainingMs\": N}: the whole milliseconds left until the request's deadline (its own, or a budget the client sent), or null without one.",
                "inputSchema": { "type": "object" },
            },
            {
                "name": "cleanup",
                "description": "Waits for the request's cancellation token, then spends `ms` milliseconds on its cleanup and returns (see the server's --grace).",
                "inputSchema": {
                    "type": "object",
                    "properties": { "ms": { "type": "number", "default": 100 } },
                },
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

fn text_result(text: String) -> Reply {
    Reply::Text(TextResult {
        result_type: "complete",
        content: [TextContent { kind: "text", text }],
        is_error: false,
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

/// `echo`'s argument.
#[derive(Deserialize)]
struct EchoArgs<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

async fn tools_call(
    req: &McpRequest,
    params: &Params<'_>,
    opts: &Options,
) -> Result<Reply, ErrorObject> {
    // The arguments as a tree, for the tools that look into them at leisure.
    let tree = || {
        params
            .arguments
            .and_then(|a| serde_json::from_str::<Value>(a.get()).ok())
            .unwrap_or(Value::Null)
    };
    // The request's context (its notifier, progress tap and cancellation:
    // reference counts to take and drop), for the tools that use it; `echo`
    // and `release` do not.
    let ctx = || RequestContext::of(req);
    let name = params.name.and_then(as_str);
    match name.as_deref() {
        Some("echo") => match params
            .arguments
            .filter(|a| a.get().starts_with('{'))
            .and_then(|a| serde_json::from_str::<EchoArgs<'_>>(a.get()).ok())
        {
            Some(args) => Ok(text_result(args.text.into_owned())),
            None => Err(ErrorObject::new(
                ErrorObject::INVALID_PARAMS,
                "echo needs a string argument `text`",
            )),
        },
        Some("slow") => {
            let args = &tree();
            let (steps, interval) = steps_of(args);
            let ctx = ctx();
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
            let (steps, interval) = steps_of(&tree());
            let token = ctx().token();
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
            let steps = tree()["steps"].as_u64().unwrap_or(3).clamp(1, 1000);
            let ctx = ctx();
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
        Some("cleanup") => {
            let ms = tree()["ms"]
                .as_f64()
                .unwrap_or(100.0)
                .clamp(0.0, 3_600_000.0);
            ctx().token().cancelled().await;
            // The cleanup (a child to reap, a transaction to roll back):
            // it finishes only within the server's grace.
            tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
            if let Some(id) = req.id() {
                tracing::debug!(request_id = %id, "cleanup finished");
                opts.emit("CLEANED", id);
            }
            Ok(text_result(format!("cleaned up in {ms} ms")))
        }
        Some("release") => {
            opts.gate.add_permits(1);
            Ok(text_result("released one step".to_owned()))
        }
        Some("deadline") => {
            let remaining = ctx().remaining().map(|d| d.as_millis() as u64);
            let body = json!({ "remainingMs": remaining });
            Ok(Reply::Json(json!({
                "resultType": "complete",
                "content": [{ "type": "text", "text": body.to_string() }],
                "structuredContent": body,
                "isError": false,
            })))
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
