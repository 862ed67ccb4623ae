//! rmcp 3.11's `StreamableHttpService` for figure 8, in its fastest
//! documented configuration: stateless (`legacy_session_mode: false`),
//! JSON responses (`json_response: true`), no SSE keep-alive — the same
//! handler as every rmcp server of the benchmarks. `--default`: rmcp's
//! default `StreamableHttpServerConfig` instead (context; 2026-07-28
//! requests are served statelessly either way).
//!
//! Same hyper-util loop and runtime (2 workers) as every server of the
//! figure.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::{
    session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use tower_mcp_cancel_benchmarks::{load, peer_rmcp};

fn main() {
    let default = std::env::args().any(|a| a == "--default");
    let config = if default {
        StreamableHttpServerConfig::default()
    } else {
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
    };
    load::http_runtime().block_on(async move {
        let svc = StreamableHttpService::new(
            || Ok(peer_rmcp::Tools),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        load::serve_http(svc).await;
    });
}
