//! Our server for the comparison: the tools `echo` and `slow` as a
//! `service_fn` over [`McpRequest`], behind the full stack
//! (`CancelOnDisconnectLayer` + `TimeoutLayer` + `ProgressResetLayer`).

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::notify::RequestContext;
use tower::BoxError;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer,
};

use crate::{steps_of, watch_token, Probe};

/// The full server stack around [`handler`]: cancellation outermost, a
/// deadline (60 s, `tools/call` 600 s), an idle limit of 30 s that the
/// handler's own progress resets.
pub fn full_stack() -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .layer(
                TimeoutLayer::new(Duration::from_secs(60))
                    .method("tools/call", Duration::from_secs(600)),
            )
            .layer(ProgressResetLayer::new(Duration::from_secs(30)))
            .service(handler()),
    )
}

/// The handler alone.
pub fn handler() -> BoxCloneSyncService<McpRequest, Value, BoxError> {
    BoxCloneSyncService::new(service_fn(|req: McpRequest| async move {
        handle(req).await.map_err(|e| Box::new(e) as BoxError)
    }))
}

async fn handle(req: McpRequest) -> Result<Value, ErrorObject> {
    match req.method() {
        "initialize" => Ok(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "ours", "version": "0" },
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({ "tools": [
            { "name": "echo", "inputSchema": { "type": "object" } },
            { "name": "slow", "inputSchema": { "type": "object" } },
        ]})),
        "tools/call" => call(&req).await,
        other => Err(ErrorObject::new(
            ErrorObject::METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

fn text(text: String) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": false })
}

async fn call(req: &McpRequest) -> Result<Value, ErrorObject> {
    let params: Value = req.params_as().unwrap_or(Value::Null);
    let args = &params["arguments"];
    match params["name"].as_str() {
        Some("echo") => match args["text"].as_str() {
            Some(t) => Ok(text(t.to_owned())),
            None => Err(ErrorObject::new(ErrorObject::INVALID_PARAMS, "need `text`")),
        },
        Some("slow") => {
            let id = req.id().map(|i| i.to_string()).unwrap_or_default();
            let ctx = RequestContext::of(req);
            watch_token(id.clone(), ctx.token());
            let probe = Probe::start(id);
            let (steps, interval) = steps_of(args);
            for i in 1..=steps {
                tokio::time::sleep(interval).await;
                ctx.progress(i as f64, Some(steps as f64), None).await;
            }
            probe.finish();
            Ok(text(format!("slept {steps} steps")))
        }
        _ => Err(ErrorObject::new(
            ErrorObject::INVALID_PARAMS,
            "unknown tool",
        )),
    }
}
