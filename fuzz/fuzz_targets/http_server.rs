//! The Streamable HTTP server's request path: `StreamableHttpService` driven
//! in-process (tower `oneshot`, current-thread runtime, paused clock) with
//! arbitrary method, headers, body and body chunking, around a ready MCP
//! service whose behaviour the body's tool name picks (answer, progress,
//! notification, error, cancelled, hang).
//!
//! Input, text-like so seeds are readable:
//!
//! ```text
//! POST chunk=7 max=4096 legacy=serve|cancel|reject assume sse=0 ka=0 err origin=any
//! accept: application/json, text/event-stream
//! mcp-protocol-version: 2026-07-28
//!
//! {"jsonrpc":"2.0",...}
//! ```
//!
//! Checked: nothing panics; the handler only ever sees a modern request
//! whose `Mcp-Method`, `MCP-Protocol-Version`, `Mcp-Name` and (for the
//! annotated tool) `Mcp-Param-Region` headers match the body; the status is
//! one the adapter documents; a JSON body is a JSON-RPC response, 202/204
//! have no body, and every SSE `data` is a JSON-RPC message.
#![no_main]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::__fuzz::{decode_header_value, Message, LEGACY_VERSIONS};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::transport::http::{
    StatefulRequests, OriginPolicy, StreamableHttpService,
};
use tower::BoxError;
use tower_mcp_cancel::{CancelReason, Cancelled, McpRequest};

#[derive(Default)]
struct Opts {
    method: Vec<u8>,
    chunk: usize,
    max: usize,
    legacy: StatefulRequests,
    assume: bool,
    sse_after: Option<Duration>,
    keep_alive: Option<Duration>,
    err: bool,
    origin_any: bool,
}

fn parse_opts(line: &[u8]) -> Opts {
    let mut words = line.split(|b| *b == b' ').filter(|w| !w.is_empty());
    let mut o = Opts {
        method: words.next().unwrap_or(b"POST").to_vec(),
        chunk: 0,
        max: 4096,
        sse_after: Some(Duration::from_secs(10)),
        keep_alive: Some(Duration::from_secs(15)),
        ..Opts::default()
    };
    for w in words {
        let (k, v) = match w.iter().position(|b| *b == b'=') {
            Some(i) => (&w[..i], &w[i + 1..]),
            None => (w, &b""[..]),
        };
        let n = std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let secs = |n: u64| (n > 0).then(|| Duration::from_secs(n.min(3600)));
        match k {
            b"chunk" => o.chunk = n.min(1 << 20) as usize,
            b"max" => o.max = n.min(1 << 20) as usize,
            b"legacy" => {
                o.legacy = match v {
                    b"reject" => StatefulRequests::Reject,
                    b"cancel" => StatefulRequests::ServeCancelOnDisconnect,
                    _ => StatefulRequests::Serve,
                }
            }
            b"assume" => o.assume = true,
            b"sse" => o.sse_after = secs(n),
            b"ka" => o.keep_alive = secs(n),
            b"err" => o.err = true,
            b"origin" => o.origin_any = v == b"any",
            _ => {}
        }
    }
    o
}

/// Checks, inside the handler, that the request passed validation rightly.
fn validation_violation(req: &McpRequest, assume: bool) -> Option<String> {
    let Some(headers) = req.extensions().get::<HeaderMap>() else {
        return Some("no HeaderMap in the request's extensions".into());
    };
    let params: Value = req
        .params()
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    let body_version = params["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str();
    let version = match headers.get("mcp-protocol-version") {
        None if assume && body_version.is_none() => return None, // taken for 2025-03-26
        None => return Some("request without MCP-Protocol-Version reached the handler".into()),
        Some(v) => match v.to_str() {
            Ok(v) => v.trim(),
            Err(_) => return Some("unreadable MCP-Protocol-Version reached the handler".into()),
        },
    };
    if LEGACY_VERSIONS.contains(&version) {
        return None;
    }
    if version != "2026-07-28" {
        return Some(format!(
            "unsupported version {version:?} reached the handler"
        ));
    }
    if body_version != Some(version) {
        return Some(format!(
            "header version {version:?} but body {body_version:?}"
        ));
    }
    let method = headers.get("mcp-method").and_then(|v| v.to_str().ok());
    if method != Some(req.method()) {
        return Some(format!(
            "Mcp-Method {method:?} but body method {:?}",
            req.method()
        ));
    }
    if let Some(field) = name_field(req.method()) {
        let name = headers
            .get("mcp-name")
            .and_then(|v| v.to_str().ok())
            .and_then(decode_header_value);
        if name.as_deref() != params[field].as_str() {
            return Some(format!(
                "Mcp-Name {name:?} but params.{field} {:?}",
                params[field]
            ));
        }
    }
    if req.method() == "tools/call" && params["name"] == "echo" {
        if let Some(region) = params["arguments"]["region"].as_str() {
            let h = headers
                .get("mcp-param-region")
                .and_then(|v| v.to_str().ok())
                .and_then(decode_header_value);
            if h.as_deref() != Some(region) {
                return Some(format!(
                    "Mcp-Param-Region {h:?} but arguments.region {region:?}"
                ));
            }
        }
    }
    None
}

async fn handle(req: McpRequest) -> Result<Value, BoxError> {
    let ctx = RequestContext::of(&req);
    let tool = req
        .params()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|p| p["name"].as_str().map(str::to_owned))
        .unwrap_or_default();
    if req.method() == "subscriptions/listen" {
        ctx.notify(
            "notifications/message",
            &json!({"level": "info", "data": "listening"}),
        )
        .await;
        std::future::pending::<()>().await;
    }
    match tool.as_str() {
        "slow" => {
            for p in [1.0, 0.5, 2.0, f64::MAX] {
                ctx.progress(p, Some(3.0), Some("step".into())).await;
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        }
        "notify" => {
            ctx.notify(
                "notifications/message",
                &json!({"level": "info", "data": "\u{1b}[31m"}),
            )
            .await;
        }
        "fail" => {
            return Err(ErrorObject::new(ErrorObject::INVALID_PARAMS, "bad arguments").into())
        }
        "missing" => {
            return Err(ErrorObject::new(ErrorObject::METHOD_NOT_FOUND, "no such tool").into())
        }
        "cancel" => {
            ctx.progress(1.0, None, None).await;
            return Err(Cancelled::new(CancelReason::Shutdown).into());
        }
        "hang" => std::future::pending::<()>().await,
        "late" => tokio::time::sleep(Duration::from_secs(30)).await,
        _ => {}
    }
    Ok(json!({"resultType": "complete", "content": [{"type": "text", "text": tool}]}))
}

fn check_sse(body: &[u8]) {
    let text = String::from_utf8_lossy(body);
    for block in text.split("\n\n") {
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            continue;
        }
        let data = data.join("\n");
        assert!(
            Message::decode(data.as_bytes()).is_ok(),
            "SSE data is not a JSON-RPC message: {data:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &b""[..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let opts = parse_opts(lines.next().unwrap_or_default());
    let Ok(method) = Method::from_bytes(&opts.method) else {
        return;
    };
    let mut builder = Request::builder().method(method).uri("/mcp");
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            builder = builder.header(n, v);
        }
    }
    let chunk = if opts.chunk == 0 {
        body.len().max(1)
    } else {
        opts.chunk
    };
    let mut frames: Vec<Result<Frame<Bytes>, std::io::Error>> = body
        .chunks(chunk)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    if opts.err {
        frames.push(Err(std::io::Error::other("connection reset")));
    }
    let Ok(req) = builder.body(StreamBody::new(futures_util::stream::iter(frames))) else {
        return;
    };

    let violation: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = violation.clone();
    let assume = opts.assume;
    let mcp = service_fn(move |req: McpRequest| {
        if let Some(v) = validation_violation(&req, assume) {
            seen.lock().unwrap().get_or_insert(v);
        }
        handle(req)
    });
    let mut svc = StreamableHttpService::new(mcp)
        .max_body_bytes(opts.max)
        .stateful_requests(opts.legacy)
        .accept_missing_version(opts.assume)
        .sse_after(opts.sse_after)
        .keep_alive(opts.keep_alive)
        .tool_schema(
            "echo",
            &json!({"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "count": {"type": "integer", "x-mcp-header": "Count"},
                "dry": {"type": ["boolean", "null"], "x-mcp-header": "Dry-Run"}
            }}),
        );
    if opts.origin_any {
        svc = svc.origin_policy(OriginPolicy::Any);
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async move {
        // A client that gives up after 60 s drops the response (disconnect).
        let Ok(res) = tokio::time::timeout(Duration::from_secs(60), svc.oneshot(req)).await else {
            return;
        };
        let res = match res {
            Ok(res) => res,
            Err(never) => match never {},
        };
        let status = res.status();
        assert!(
            [200, 202, 204, 400, 403, 404, 405, 406, 413, 415, 503].contains(&status.as_u16()),
            "undocumented status {status}"
        );
        let ct = res
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut body = res.into_body();
        let mut bytes = Vec::new();
        // One deadline for the whole body: keep-alive comments must not
        // keep the client reading forever.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let complete = loop {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => break false, // the client goes away mid-stream
                Ok(None) => break true,
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        bytes.extend_from_slice(&d);
                    }
                }
                Ok(Some(Err(e))) => panic!("response body error: {e}"),
            }
        };
        drop(body);
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            assert!(bytes.is_empty(), "{status} with a body");
        }
        if ct == "application/json" {
            assert!(complete);
            assert!(
                matches!(Message::decode(&bytes), Ok(Message::Response(_))),
                "JSON body is not a JSON-RPC response: {:?}",
                String::from_utf8_lossy(&bytes)
            );
        } else if ct == "text/event-stream" {
            check_sse(&bytes);
        }
    });
    drop(rt);
    let found = violation.lock().unwrap().take();
    if let Some(v) = found {
        panic!("validation let through: {v}");
    }
});

/// The params field `Mcp-Name` mirrors, per method (the spec's table).
fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}
