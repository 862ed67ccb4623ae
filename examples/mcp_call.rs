//! `mcp-call`: call one tool on a stdio or Streamable HTTP MCP server, with a
//! progress bar, a deadline, and Ctrl-C that really cancels.
//!
//! ```text
//! mcp-call [--timeout 30s] [--idle 10s] [--max 5m] -- <server command…> <tool> [key=value…]
//! mcp-call [--timeout 30s] [--idle 10s] [--max 5m] --url http(s)://…/mcp [--http2] <tool> [key=value…]
//!
//!   --url URL     call a Streamable HTTP server instead of starting one over stdio
//!   --http2       with --url: HTTP/2 with prior knowledge (default HTTP/1.1)
//!   --timeout D   fixed deadline for the call (default 30s; with --idle, none unless given)
//!   --budget      send the call's remaining time in `_meta` (whole milliseconds, under
//!                 `io.github.tower-mcp-cancel/budgetMs`), for a server that honours it
//!   --idle D      idle limit, restarted by each progress notification
//!   --max D       hard maximum with --idle, which progress does not extend (default 5m)
//!   key=value     tool arguments; a value that parses as JSON is JSON (n=3, b=true), else a string
//! ```
//!
//! Durations: `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds.
//!
//! ```sh
//! cargo run --features stdio,http --example mcp_call -- --idle 2s -- cargo run -q --features stdio --example stdio_server slow seconds=3
//! cargo run --features http --example http_server &   # then:
//! cargo run --features stdio,http --example mcp_call -- --idle 2s --url http://127.0.0.1:8080/mcp slow seconds=3
//! ```
//!
//! It probes with `server/discover` (2026-07-28) and falls back to the
//! `initialize` handshake for older servers on the spec's signals only: over
//! stdio, an error answer that is not a recognized modern error, or no
//! answer in time; over HTTP, the client's own detection (a `400` without a
//! modern error). A connection or TLS failure, or any other HTTP status, is
//! reported as it is. The result is printed as JSON on
//! stdout. Ctrl-C drops the call — over stdio the client sends
//! `notifications/cancelled`, over HTTP it closes the response stream, which
//! is the cancellation there — says so, and exits with status 130; a timeout
//! exits with 124. A terminal sends Ctrl-C's SIGINT to its whole foreground
//! process group: the stdio server runs in a group of its own
//! (`StdioClient::spawn` does that on Unix), so it lives to get the
//! cancellation instead of dying with the work in flight.
//!
//! The call itself ([`call_tool`]) takes any `Service<McpRequest>`, so other
//! transports plug in beside stdio. Built with the `tasks` feature, it
//! declares the tasks extension: a server that answers with a task is
//! polled to the task's end (its status in the bar), and a timeout or
//! Ctrl-C sends `tasks/cancel` before it exits. `--help` lists the flags; an unknown
//! flag or a malformed value is refused with a usage line and exit status 2.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tokio::process::Command;
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::http::{HttpClient, ServerEra};
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{
    CancelReason, Cancellation, Elapsed, McpRequest, ProgressObserver, ProgressResetLayer,
    RequestTimeout, TimeoutLayer,
};

/// The `_meta` key `--budget` sends the remaining time under (MCP defines
/// none; the example servers read this one with `--budget`).
const BUDGET_KEY: &str = "io.github.tower-mcp-cancel/budgetMs";
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// The `_meta` key of the protocol version every 2026-07-28 request carries.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// The limits of one call.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Fixed deadline.
    pub timeout: Option<Duration>,
    /// Idle limit reset by progress (with `max` as the hard cap).
    pub idle: Option<Duration>,
    /// Hard maximum with `idle`.
    pub max: Duration,
}

/// Calls one tool on a stdio or Streamable HTTP MCP server, with a
/// progress bar, a deadline, and Ctrl-C that really cancels. Prints the
/// result as JSON on stdout; exits 124 on a timeout, 130 on Ctrl-C, 2 on a
/// bad command line.
///
/// The words are the server command and its arguments (after `--`; none
/// with --url), then the tool, then its arguments as key=value (a value
/// that parses as JSON is JSON: n=3, b=true; else a string). Durations:
/// 500ms, 30s, 5m, 1h, or seconds.
#[derive(Parser, Debug)]
#[command(
    name = "mcp-call",
    override_usage = "mcp-call [OPTIONS] -- <SERVER COMMAND>... <TOOL> [KEY=VALUE]...\n       mcp-call [OPTIONS] --url <URL> <TOOL> [KEY=VALUE]..."
)]
struct Cli {
    /// Call a Streamable HTTP server (http:// or https://) instead of
    /// starting one over stdio.
    #[arg(long, value_name = "URL")]
    url: Option<http::Uri>,
    /// With --url: HTTP/2 with prior knowledge (default HTTP/1.1).
    #[arg(long, requires = "url")]
    http2: bool,
    /// Fixed deadline for the call [default: 30s; with --idle, none unless
    /// given].
    #[arg(long, value_name = "DURATION", value_parser = cli::duration)]
    timeout: Option<Duration>,
    /// Idle limit, restarted by each progress notification.
    #[arg(long, value_name = "DURATION", value_parser = cli::duration)]
    idle: Option<Duration>,
    /// Hard maximum with --idle, which progress does not extend.
    #[arg(long, value_name = "DURATION", value_parser = cli::duration, default_value = "5m")]
    max: Duration,
    /// Send the call's remaining time in _meta (whole milliseconds, under
    /// io.github.tower-mcp-cancel/budgetMs), for a server that honours it.
    #[arg(long)]
    budget: bool,
    /// With --url: the tool and its key=value arguments.
    #[arg(value_name = "TOOL [KEY=VALUE]")]
    words: Vec<String>,
    /// After `--`: the server command and its arguments, the tool and its
    /// key=value arguments.
    #[arg(last = true, value_name = "SERVER COMMAND, TOOL [KEY=VALUE]")]
    command: Vec<String>,
}

/// The parsed command line.
#[derive(Debug)]
pub struct Args {
    /// The limits.
    pub limits: Limits,
    /// The server command and its arguments (empty with `--url`).
    pub server: Vec<String>,
    /// The Streamable HTTP endpoint, with `--url`.
    pub url: Option<http::Uri>,
    /// HTTP/2 with prior knowledge, with `--http2`.
    pub http2: bool,
    /// Send the remaining budget in `_meta`, with `--budget`.
    pub budget: bool,
    /// The tool name.
    pub tool: String,
    /// The tool arguments.
    pub arguments: serde_json::Map<String, Value>,
}

impl Cli {
    /// The call the words describe; a message for what is missing.
    fn into_args(self) -> Result<Args, String> {
        let rest = match (self.command.is_empty(), self.words.is_empty()) {
            (false, false) => {
                return Err("the tool goes after the server command, behind `--`".into())
            }
            (false, true) => self.command,
            (true, _) if self.url.is_none() => {
                return Err("missing `--` before the server command".into())
            }
            (true, _) => self.words,
        };
        // Without --idle, a 30 s deadline unless --timeout gives one.
        let timeout = match (self.timeout, self.idle) {
            (None, None) => Some(Duration::from_secs(30)),
            (t, _) => t,
        };
        // Trailing key=value words are the arguments; the word before them is the tool.
        let n_args = rest.iter().rev().take_while(|a| a.contains('=')).count();
        let (head, kv) = rest.split_at(rest.len() - n_args);
        let Some((tool, server)) = head.split_last() else {
            return Err("missing tool name".into());
        };
        match (&self.url, server.is_empty()) {
            (None, true) => return Err("missing server command".into()),
            (Some(_), false) => {
                return Err("give either --url or a server command, not both".into())
            }
            _ => {}
        }
        let mut arguments = serde_json::Map::new();
        for pair in kv {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = serde_json::from_str(v).unwrap_or_else(|_| Value::from(v));
            arguments.insert(k.to_owned(), v);
        }
        Ok(Args {
            limits: Limits {
                timeout,
                idle: self.idle,
                max: self.max,
            },
            server: server.to_vec(),
            url: self.url,
            http2: self.http2,
            budget: self.budget,
            tool: tool.clone(),
            arguments,
        })
    }
}

fn meta() -> Value {
    json!({
        PROTOCOL_VERSION_META: MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-call", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// Which protocol era the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: per-request `_meta`.
    Modern,
    /// `initialize` handshake done (2025-11-25 and earlier).
    Legacy,
}

/// Probes with `server/discover`. Over stdio (`http_era` is `None`), a
/// legacy server is one that answers with an error that is not a
/// recognized modern error, or not at all within the probe's timeout: then
/// `initialize` is sent through `svc`, and
/// `notify("notifications/initialized")`. Over HTTP, `HttpClient` falls
/// back to a legacy server's `initialize` session by itself, and
/// `http_era()` tells what it found: a modern server that does not
/// implement `server/discover` is modern all the same. Anything else — a
/// transport, TLS or HTTP failure, a modern error — is the error.
pub async fn negotiate<S>(
    svc: S,
    notify: impl FnOnce(&str) -> Result<(), BoxError>,
    http_era: Option<impl Fn() -> ServerEra>,
) -> Result<Era, BoxError>
where
    S: Service<McpRequest, Response = Value, Error = BoxError> + Clone,
{
    let probe = McpRequest::without_id("server/discover")
        .with_params(json!({ "_meta": meta() }))
        .with_extension(RequestTimeout::after(Duration::from_secs(10)));
    let probed = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(10)))
        .service(svc.clone())
        .oneshot(probe)
        .await;
    if let Some(http_era) = http_era {
        return match (http_era(), probed) {
            (ServerEra::Stateful { .. }, _) => Ok(Era::Legacy),
            (_, Ok(_)) => Ok(Era::Modern),
            // Answered in the modern shape (e.g. -32601: no server/discover).
            (ServerEra::Stateless, Err(e))
                if e.downcast_ref::<ErrorObject>()
                    .is_some_and(|e| !is_modern_error(e)) =>
            {
                Ok(Era::Modern)
            }
            (_, Err(e)) => Err(e),
        };
    }
    match probed {
        Ok(r)
            if r["supportedVersions"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == MODERN)) =>
        {
            return Ok(Era::Modern)
        }
        Ok(r) if r["supportedVersions"].is_array() => {
            let versions = &r["supportedVersions"];
            return Err(format!("the server supports {versions}, not {MODERN}").into());
        }
        Ok(_) => eprintln!("mcp-call: server/discover answered oddly; trying initialize"),
        Err(e) if e.is::<Elapsed>() => {
            eprintln!("mcp-call: no answer to server/discover; trying initialize");
        }
        Err(e) => match e.downcast_ref::<ErrorObject>() {
            Some(o) if !is_modern_error(o) => {
                eprintln!("mcp-call: server/discover refused ({o}); trying initialize");
            }
            _ => return Err(e),
        },
    }
    let init = McpRequest::without_id("initialize").with_params(json!({
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "mcp-call", "version": env!("CARGO_PKG_VERSION")},
    }));
    ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .service(svc)
        .oneshot(init)
        .await?;
    notify("notifications/initialized")?;
    Ok(Era::Legacy)
}

/// The errors by which a modern server says it is one (so no fallback).
fn is_modern_error(e: &ErrorObject) -> bool {
    matches!(
        e.code,
        ErrorObject::HEADER_MISMATCH
            | ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorObject::UNSUPPORTED_PROTOCOL_VERSION
    )
}

/// Calls `tool` with `arguments` over any transport service, under
/// `limits`, drawing progress on `bar`; the request carries `cancellation`,
/// which holds the reason the call is dropped for (a limit's, or the
/// caller's when it cancels it before dropping the call).
// The tasks feature adds the eighth: the layer whose background cancels
// `main` waits for before it exits.
#[allow(clippy::too_many_arguments)]
pub async fn call_tool<S>(
    svc: S,
    era: Era,
    tool: &str,
    arguments: serde_json::Map<String, Value>,
    limits: Limits,
    bar: ProgressBar,
    cancellation: Cancellation,
    #[cfg(feature = "tasks")] tasks: tower_mcp_cancel::tasks::TaskCallLayer,
) -> Result<Value, BoxError>
where
    S: Service<McpRequest, Response = Value, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let mut params = json!({ "name": tool, "arguments": arguments });
    if era == Era::Modern {
        params["_meta"] = meta();
    }
    // The layers cancel `cancellation` with their reason before they drop
    // the call, and so does an interrupt: the client reads it from there.
    let req = McpRequest::without_id("tools/call")
        .with_params(params)
        .with_cancellation(cancellation)
        .with_extension(ProgressObserver::new(move |p| {
            let scale = if p.total.is_some_and(|t| t <= 1.0) {
                100.0
            } else {
                1.0
            };
            if let Some(total) = p.total {
                bar.set_length((total * scale) as u64);
            }
            bar.set_position((p.progress * scale) as u64);
            if let Some(m) = &p.message {
                bar.set_message(m.clone());
            }
        }));
    let mut stack: BoxCloneService<McpRequest, Value, BoxError> = BoxCloneService::new(svc);
    // A server that answers with a task (the tasks extension): polled to
    // its end, shown in the bar; a timeout or Ctrl-C drops the call, which
    // sends `tasks/cancel`.
    #[cfg(feature = "tasks")]
    if era == Era::Modern {
        stack = BoxCloneService::new(ServiceBuilder::new().layer(tasks).service(stack));
    }
    if let Some(idle) = limits.idle {
        stack = BoxCloneService::new(
            ServiceBuilder::new()
                .layer(ProgressResetLayer::new(idle).max(limits.max))
                .service(stack),
        );
    }
    if let Some(t) = limits.timeout {
        stack = BoxCloneService::new(
            ServiceBuilder::new()
                .layer(TimeoutLayer::new(t))
                .service(stack),
        );
    }
    stack.oneshot(req).await
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Ctrl-C, listened for from the moment it is created: on Unix the SIGINT
/// handler is installed right away, so no request goes out before a Ctrl-C
/// is ours to handle (rather than the default, which kills us).
struct Interrupt {
    #[cfg(unix)]
    sigint: Option<tokio::signal::unix::Signal>,
}

impl Interrupt {
    fn new() -> Self {
        Self {
            #[cfg(unix)]
            sigint: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok(),
        }
    }

    /// Waits for Ctrl-C (forever if no handler could be installed).
    async fn recv(&mut self) {
        #[cfg(unix)]
        match &mut self.sigint {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Writes one line to stderr in one write, so that it is not interleaved
/// with a line of the server's (a stdio server shares our stderr).
fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("mcp-call: {line}\n").as_bytes());
}

#[tokio::main]
async fn main() -> ExitCode {
    // A bad command line: a usage line, exit status 2 (clap's own refusals too).
    let args = cli::parse::<Cli>().into_args().unwrap_or_else(|e| {
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, e)
            .exit()
    });
    let mut interrupt = Interrupt::new();
    if let Some(uri) = args.url.clone() {
        let mut builder =
            HttpClient::builder(uri).client_info("mcp-call", env!("CARGO_PKG_VERSION"));
        if args.budget {
            builder = builder
                .budget_key(BUDGET_KEY)
                .expect("a budget key outside the reserved prefixes");
        }
        let client = if args.http2 {
            builder.http2_prior_knowledge().build()
        } else {
            builder.build()
        };
        // A legacy (initialize-era) server is detected by the client, which
        // then keeps its session and posts notifications/cancelled for a
        // dropped call; the session is deleted at the end.
        let how =
            "closed the response stream (and posted notifications/cancelled on a legacy session)";
        let era = client.clone();
        let code = run(
            client.clone(),
            |_| Ok(()),
            Some(move || era.server_era()),
            args,
            how,
            &mut interrupt,
        )
        .await;
        if let Err(e) = client.close().await {
            eprintln!("mcp-call: could not end the session: {e}");
        }
        return code;
    }
    let mut cmd = Command::new(&args.server[0]);
    cmd.args(&args.server[1..]);
    let mut builder = StdioClient::builder();
    if args.budget {
        builder = builder
            .budget_key(BUDGET_KEY)
            .expect("a budget key outside the reserved prefixes");
    }
    let client = match builder.spawn(cmd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-call: cannot start {:?}: {e}", args.server[0]);
            return ExitCode::from(2);
        }
    };
    let how = "sent notifications/cancelled to the server";
    let code = run(
        client.clone(),
        |m| client.notify(m, &json!({})),
        None::<fn() -> ServerEra>,
        args,
        how,
        &mut interrupt,
    )
    .await;
    let _ = client.shutdown().await;
    code
}

async fn run<S>(
    svc: S,
    notify: impl FnOnce(&str) -> Result<(), BoxError>,
    http_era: Option<impl Fn() -> ServerEra>,
    args: Args,
    how: &str,
    interrupt: &mut Interrupt,
) -> ExitCode
where
    S: Service<McpRequest, Response = Value, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let negotiated = tokio::select! {
        r = negotiate(svc.clone(), notify, http_era) => r,
        () = interrupt.recv() => {
            say(&format!("interrupted; {how}"));
            return ExitCode::from(130);
        }
    };
    let era = match negotiated {
        Ok(era) => era,
        Err(e) => {
            eprintln!("mcp-call: could not talk to the server: {e}");
            return ExitCode::from(1);
        }
    };
    let bar = progress_bar();
    let cancellation = Cancellation::new();
    #[cfg(feature = "tasks")]
    let tasks = tower_mcp_cancel::tasks::TaskCallLayer::new();
    let call = call_tool(
        svc,
        era,
        &args.tool,
        args.arguments,
        args.limits,
        bar.clone(),
        cancellation.clone(),
        #[cfg(feature = "tasks")]
        tasks.clone(),
    );
    let mut call = Box::pin(call);
    let outcome = tokio::select! {
        r = &mut call => Some(r),
        () = interrupt.recv() => None,
    };
    bar.finish_and_clear();
    match outcome {
        None => {
            // Dropping the call is the cancellation: the stdio client writes
            // notifications/cancelled with the reason of the request's
            // cancellation, the HTTP client closes the response stream (and,
            // in a legacy session, posts notifications/cancelled; `close`
            // waits for it).
            cancellation.cancel(CancelReason::Other(
                "interrupted by the user (Ctrl-C)".into(),
            ));
            drop(call);
            // A task the call made gets its tasks/cancel before we exit.
            #[cfg(feature = "tasks")]
            tasks.cancels_sent().await;
            say(&format!("interrupted; {how}"));
            ExitCode::from(130)
        }
        Some(Ok(result)) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&result).unwrap_or_default()
            );
            if result["isError"] == true {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Some(Err(e)) if e.is::<Elapsed>() => {
            #[cfg(feature = "tasks")]
            tasks.cancels_sent().await;
            say(&format!("{e}; {how}"));
            ExitCode::from(124)
        }
        Some(Err(e)) => {
            eprintln!("mcp-call: {e}");
            ExitCode::from(1)
        }
    }
}
