//! The tower-mcp stdio server for figure 4 under this crate's integration:
//! the same router as `tower_mcp_stdio`, its transport given
//! `tower_mcp_cancel_tower_mcp::RouterLayer` (no deadline: only the cancel).

use tower_mcp_cancel_tower_mcp::RouterLayer;

#[tokio::main]
async fn main() {
    let router = tower_mcp_cancel_benchmarks::peer_tower_mcp::router();
    let code = match tower_mcp::StdioTransport::new(router)
        .layer(RouterLayer::new())
        .run()
        .await
    {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tower-mcp server stopped: {e}");
            1
        }
    };
    std::process::exit(code);
}
