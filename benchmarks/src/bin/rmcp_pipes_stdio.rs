//! The rmcp stdio server on rmcp's fastest stdio transport,
//! `rmcp::transport::io::stdio_pipes()` (non-blocking pipes through the
//! reactor on Linux): the peer's best configuration for issue #14's
//! figure 3 CPU measure (`stdio_cpu`).

use rmcp::ServiceExt;

#[tokio::main]
async fn main() {
    let running = match tower_mcp_cancel_benchmarks::peer_rmcp::Tools
        .serve(rmcp::transport::io::stdio_pipes())
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
