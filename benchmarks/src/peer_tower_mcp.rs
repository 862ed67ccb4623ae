//! The tower-mcp reference server: `echo` and `slow` built with its
//! `ToolBuilder`. `slow` never looks at its context's cancellation; a
//! watcher task reports when it fires.

use serde_json::Value;
use tower_mcp::extract::{Context, Json};
use tower_mcp::{CallToolResult, McpRouter, ToolBuilder};

use crate::{steps_of, watch, Probe};

/// The router with both tools.
pub fn router() -> McpRouter {
    let echo = ToolBuilder::new("echo")
        .description("returns its text")
        .handler(|input: Value| async move {
            let text = input["text"].as_str().unwrap_or_default().to_owned();
            Ok(CallToolResult::text(text))
        })
        .build();
    let slow = ToolBuilder::new("slow")
        .description("sleeps; never checks its token")
        .extractor_handler((), |ctx: Context, Json(args): Json<Value>| async move {
            let id = serde_json::to_string(ctx.request_id()).unwrap_or_default();
            let token = ctx.cancellation_token();
            watch(id.clone(), async move { token.cancelled().await });
            let probe = Probe::start(id);
            let (steps, interval) = steps_of(&args);
            for i in 1..=steps {
                tokio::time::sleep(interval).await;
                ctx.report_progress(i as f64, Some(steps as f64), None)
                    .await;
            }
            probe.finish();
            Ok(CallToolResult::text(format!("slept {steps} steps")))
        })
        .build();
    McpRouter::new()
        .server_info("tower-mcp-reference", "0")
        .tool(echo)
        .tool(slow)
}
