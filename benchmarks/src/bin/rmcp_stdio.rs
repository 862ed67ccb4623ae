//! The rmcp stdio server for figures 3 and 4 (`rmcp::transport::stdio`).

use rmcp::ServiceExt;

#[tokio::main]
async fn main() {
    let running = match tower_mcp_cancel_benchmarks::peer_rmcp::Tools
        .serve(rmcp::transport::stdio())
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
