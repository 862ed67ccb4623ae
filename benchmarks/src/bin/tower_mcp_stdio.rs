//! The tower-mcp stdio server for figures 3 and 4 (`StdioTransport`).

#[tokio::main]
async fn main() {
    let router = tower_mcp_cancel_benchmarks::peer_tower_mcp::router();
    let code = match tower_mcp::StdioTransport::new(router).run().await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tower-mcp server stopped: {e}");
            1
        }
    };
    std::process::exit(code);
}
