//! The rmcp reference server: `echo` and `slow` as a hand-written
//! `ServerHandler` (no macros, so no schema generation on the hot path).
//! `slow` never looks at `RequestContext::ct`; a watcher task reports when
//! it fires.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::{steps_of, watch_token, Probe};

/// The handler (clone per connection / per HTTP request).
#[derive(Clone, Default)]
pub struct Tools;

fn schema() -> Arc<serde_json::Map<String, Value>> {
    let mut m = serde_json::Map::new();
    m.insert("type".into(), Value::String("object".into()));
    Arc::new(m)
}

impl ServerHandler for Tools {
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("echo", "returns its text", schema()),
            Tool::new("slow", "sleeps; never checks its token", schema()),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        match request.name.as_ref() {
            "echo" => {
                let text = args["text"].as_str().unwrap_or_default().to_owned();
                Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
            }
            "slow" => {
                let id = serde_json::to_string(&context.id).unwrap_or_default();
                watch_token(id.clone(), context.ct.clone());
                let probe = Probe::start(id);
                let token = context.meta.get_progress_token();
                let (steps, interval) = steps_of(&args);
                for i in 1..=steps {
                    tokio::time::sleep(interval).await;
                    if let Some(t) = &token {
                        let _ = context
                            .peer
                            .notify_progress(ProgressNotificationParam::new(t.clone(), i as f64))
                            .await;
                    }
                }
                probe.finish();
                Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "slept {steps} steps"
                ))])
                .into())
            }
            _ => Err(ErrorData::invalid_params("unknown tool", None)),
        }
    }
}
