//! A Streamable HTTP MCP server for the checker's own tests: this crate's
//! server stack with a `slow` tool (progress when asked) and a CPU-bound
//! `spin {seconds}`, which works in a blocking thread that stops when the
//! request's cancellation token fires. `--break cpu-after-cancel` makes
//! that thread ignore the token: the request's future is dropped when the
//! client closes its stream, nothing more is sent, but the core keeps
//! burning (only the server's CPU time shows it).
//!
//! `--legacy` makes it look like a 2025-only server: a 2026-07-28 request
//! outside a session gets a plain `400` (no JSON-RPC error), so a client
//! falls back to `initialize` and a session, whose POSTed
//! `notifications/cancelled` then cancel.
//!
//! `--break ignore-cancels` (with `--legacy`, the server of an SDK that
//! ignores `notifications/cancelled`): a POSTed cancel is accepted (`202`)
//! and goes no further, so the call's progress and its result still come
//! on its stream.
//!
//! ```text
//! fixture_http [--legacy] [--break cpu-after-cancel | ignore-cancels]    # prints "listening on http://127.0.0.1:PORT/mcp"
//! ```

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::http::{serve, SessionLimits, StreamableHttpService};
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, RequestContext};

#[tokio::main]
async fn main() {
    let broken = std::env::args().any(|a| a == "cpu-after-cancel");
    let stack = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |req: McpRequest| handle(req, broken)));
    let legacy = std::env::args().any(|a| a == "--legacy");
    let ignore_cancels = std::env::args().any(|a| a == "ignore-cancels");
    let shutdown = CancellationToken::new();
    let mcp = StreamableHttpService::new(stack)
        .stateful_sessions(SessionLimits::new())
        .shutdown(shutdown.clone());
    // The 2025-only face: a modern request outside a session is refused
    // the way a 2025 server refuses it (no modern JSON-RPC error).
    let front = service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let mcp = mcp.clone();
        async move {
            let modern = req
                .headers()
                .get("mcp-protocol-version")
                .is_some_and(|v| v == "2026-07-28");
            if legacy && modern && req.headers().get("mcp-session-id").is_none() {
                let refused = http::Response::builder()
                    .status(400)
                    .body(Either::Right(Full::new(Bytes::from_static(
                        b"Bad Request: no session",
                    ))))
                    .expect("a static response");
                return Ok::<_, BoxError>(refused);
            }
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            if ignore_cancels && body.windows(23).any(|w| w == b"notifications/cancelled") {
                let accepted = http::Response::builder()
                    .status(202)
                    .body(Either::Right(Full::new(Bytes::new())))
                    .expect("a static response");
                return Ok(accepted);
            }
            let req = http::Request::from_parts(parts, Full::new(body));
            // The adapter never fails: its errors are HTTP responses.
            let response = mcp.oneshot(req).await.unwrap_or_else(|e| match e {});
            Ok(response.map(Either::Left))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("the bound address");
    println!("listening on http://{addr}/mcp");
    serve(listener, front, shutdown).await;
}

async fn handle(req: McpRequest, broken: bool) -> Result<Value, BoxError> {
    match req.method() {
        "server/discover" => Ok(json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "fixture-http", "version": "0" },
        })),
        "initialize" => Ok(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "fixture-http", "version": "0" },
        })),
        "ping" => Ok(json!({ "resultType": "complete" })),
        "tools/list" => Ok(json!({ "resultType": "complete", "tools": [
            { "name": "slow", "inputSchema": { "type": "object" } },
            { "name": "spin", "inputSchema": { "type": "object" } },
        ]})),
        "tools/call" => call(req, broken).await,
        other => Err(ErrorObject::new(ErrorObject::METHOD_NOT_FOUND, format!("no {other}")).into()),
    }
}

async fn call(req: McpRequest, broken: bool) -> Result<Value, BoxError> {
    let params: Value = req.params_as().unwrap_or_default();
    let args = &params["arguments"];
    let seconds = args["seconds"].as_f64().unwrap_or(1.0).clamp(0.0, 600.0);
    let ctx = RequestContext::of(&req);
    match params["name"].as_str() {
        Some("slow") => {
            let interval = args["interval_ms"]
                .as_f64()
                .unwrap_or(100.0)
                .clamp(1.0, 60_000.0);
            let steps = ((seconds * 1000.0 / interval).ceil() as u64).max(1);
            for i in 1..=steps {
                tokio::time::sleep(Duration::from_secs_f64(interval / 1000.0)).await;
                ctx.progress(i as f64, Some(steps as f64), None).await;
            }
        }
        Some("spin") => {
            let token = ctx.token();
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            tokio::task::spawn_blocking(move || {
                let mut x: u64 = 1;
                while Instant::now() < end && (broken || !token.is_cancelled()) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
            .await?;
        }
        _ => return Err(ErrorObject::new(ErrorObject::INVALID_PARAMS, "unknown tool").into()),
    }
    Ok(json!({
        "resultType": "complete",
        "content": [{ "type": "text", "text": "done" }],
        "isError": false,
    }))
}
