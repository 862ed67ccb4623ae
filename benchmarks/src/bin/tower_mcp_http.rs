//! tower-mcp 0.25's stateless HTTP transport for figure 8
//! (`HttpTransport::stateless(StatelessConfig::new())`, its documented
//! configuration for servers without sessions), the same router as every
//! tower-mcp server of the benchmarks. Same hyper-util loop and runtime
//! (2 workers) as every server of the figure.

use tower_mcp_cancel_benchmarks::{load, peer_tower_mcp};

fn main() {
    load::http_runtime().block_on(async move {
        let router = tower_mcp::HttpTransport::new(peer_tower_mcp::router())
            .stateless(tower_mcp::stateless::StatelessConfig::new())
            .into_router_at("/mcp");
        load::serve_http(router).await;
    });
}
