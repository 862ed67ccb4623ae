//! A stdio MCP server from a plain `service_fn`, under the server stack:
//! a `notifications/cancelled` from the client, a deadline, or stdin closing
//! drops the handler's future, and fires its token for what it spawned.
//!
//! ```sh
//! cargo run --features stdio --example stdio_service_fn
//! {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"count","arguments":{"to":3},"_meta":{"progressToken":"p"}}}
//! ```
//!
//! Paste the request line: progress comes each second, then the result. Send
//! `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
//! before the end, or close stdin (Ctrl-D): the handler is dropped and
//! nothing more is written for it. `examples/client_progress.rs` drives it
//! from a client stack.

use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::transport::stdio::serve_stdio;
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, RequestContext, TimeoutLayer};

/// One handler for every method: match on the name, answer with a result.
async fn handle(req: McpRequest) -> Result<Value, BoxError> {
    match req.method() {
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "stdio-service-fn", "version": "0.1.0" },
        })),
        "tools/list" => Ok(json!({
            "resultType": "complete",
            "tools": [{
                "name": "count",
                "description": "Counts to `to`, one step a second, reporting progress",
                "inputSchema": { "type": "object", "properties": { "to": { "type": "integer" } } },
            }],
        })),
        "tools/call" => count(req).await,
        other => Err(format!("method not found: {other}").into()),
    }
}

/// A tool that takes a while. It never checks for cancellation itself: the
/// stack drops this future when the client cancels or the deadline passes.
/// Work it spawns watches the request's token instead.
async fn count(req: McpRequest) -> Result<Value, BoxError> {
    let args: Value = req.params_as().unwrap_or_default();
    let to = args["arguments"]["to"].as_u64().unwrap_or(5);
    let ctx = RequestContext::of(&req);

    // Spawned work does not die with the future: it stops on the token.
    let token = ctx.token();
    tokio::spawn(async move {
        token.cancelled().await;
        eprintln!("count: cancelled, background work stopped");
    });

    for step in 1..=to {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Sent only if the client asked for progress, and only while the
        // request is alive: nothing reaches the wire after its end.
        ctx.progress(step as f64, Some(to as f64), None).await;
    }
    Ok(json!({
        "resultType": "complete",
        "content": [{ "type": "text", "text": format!("counted to {to}") }],
    }))
}

/// A stdio MCP server from a plain service_fn with one tool, `count {to}`
/// (a step a second, with progress), under CancelOnDisconnectLayer and
/// TimeoutLayer. Reads requests from stdin until it closes. Takes no flags.
#[derive(Parser, Debug)]
#[command(name = "stdio_service_fn")]
struct Cli {}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // `--help`, or a refusal of any argument (exit status 2).
    let Cli {} = Cli::parse();
    let server = ServiceBuilder::new()
        // Outermost: turns the transport's cancel signal into a drop.
        .layer(CancelOnDisconnectLayer::new())
        // A deadline for every request; longer for tool calls.
        .layer(
            TimeoutLayer::new(Duration::from_secs(10))
                .method("tools/call", Duration::from_secs(60)),
        )
        .service(service_fn(handle));
    // Reads requests from stdin, writes answers to stdout, until stdin closes.
    serve_stdio(server).await
}
