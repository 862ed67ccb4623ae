//! `StreamableHttpService` mounted in an axum `Router` next to other routes.
//! A client that closes its response stream (or its connection) drops the
//! handler's future: that is how Streamable HTTP cancels.
//!
//! ```sh
//! cargo run --features http --example axum_router            # or: -- 127.0.0.1:8080
//! curl -s localhost:3000/healthz
//! curl -s localhost:3000/mcp -H 'content-type: application/json' \
//!     -H 'accept: application/json, text/event-stream' \
//!     -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: wait' \
//!     -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait","arguments":{"secs":30},
//!          "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
//! # press Ctrl-C on curl: the server logs that the handler was dropped
//! ```

use std::time::Duration;

use axum::{routing::get, Router};
use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, Parser};
use serde_json::{json, Value};
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::transport::http::StreamableHttpService;
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, TimeoutLayer};

/// Logs when the future holding it is dropped before it finished.
struct LogIfDropped(&'static str);

impl Drop for LogIfDropped {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            eprintln!("{}: handler dropped before it finished", self.0);
        }
    }
}

async fn handle(req: McpRequest) -> Result<Value, BoxError> {
    match req.method() {
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "axum-router", "version": "0.1.0" },
        })),
        "tools/call" => {
            let args: Value = req.params_as().unwrap_or_default();
            let secs = args["arguments"]["secs"].as_u64().unwrap_or(1);
            let mut guard = LogIfDropped("wait");
            tokio::time::sleep(Duration::from_secs(secs)).await;
            guard.0 = "";
            Ok(json!({
                "resultType": "complete",
                "content": [{ "type": "text", "text": format!("waited {secs} s") }],
            }))
        }
        other => Err(format!("method not found: {other}").into()),
    }
}

/// StreamableHttpService mounted in an axum Router at /mcp, next to
/// /healthz; one tool, `wait {secs}`. A client that closes its response
/// stream drops the handler's future.
#[derive(Parser, Debug)]
#[command(name = "axum_router")]
struct Cli {
    /// The address to listen on.
    #[arg(value_name = "ADDR", default_value = "127.0.0.1:3000")]
    addr: std::net::SocketAddr,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // `--help`, or a refusal (exit status 2) of an unknown flag or of an
    // address that does not parse; clap prints no usage line for the
    // latter, so it is added.
    let Cli { addr } = Cli::try_parse().unwrap_or_else(|mut e| {
        if e.use_stderr() && e.get(ContextKind::Usage).is_none() {
            let usage = Cli::command().render_usage();
            e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
        }
        e.exit()
    });
    let mcp = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(120)))
        .service(service_fn(handle));
    // The MCP endpoint is one route among others; POST only (no GET stream).
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route_service("/mcp", StreamableHttpService::new(mcp));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, app).await
}
