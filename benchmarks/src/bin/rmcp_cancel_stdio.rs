//! The rmcp stdio server for figure 4 wrapped in this crate's integration:
//! the same `ServerHandler` as `rmcp_stdio`, served through
//! `tower_mcp_cancel_rmcp::Cancellable` over the package's `stdio()` (its input
//! checked), as its docs have users serve it (no deadline: only the cancel).

use tower_mcp_cancel_rmcp::Cancellable;

#[tokio::main]
async fn main() {
    let running = match Cancellable::new(tower_mcp_cancel_benchmarks::peer_rmcp::Tools)
        .serve(tower_mcp_cancel_rmcp::stdio())
        .await
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rmcp server failed to start: {e}");
            std::process::exit(1);
        }
    };
    let _ = running.waiting().await;
    std::process::exit(0);
}
