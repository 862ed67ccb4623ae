//! Our stdio server for figures 3, 4 and 9: the full stack over
//! stdin/stdout; handler events on stderr with `CLOCK_MONOTONIC` ns. With
//! `OURS_BUDGET_KEY` set (figure 9), it honours a client's budget under that
//! `_meta` key.

#[tokio::main]
async fn main() {
    let mut server = tower_mcp_cancel::transport::stdio::StdioServer::new();
    if let Ok(key) = std::env::var("OURS_BUDGET_KEY") {
        server = server.budget_key(key).expect("a budget key outside the reserved prefixes");
    }
    let code = match server
        .serve_stdio(tower_mcp_cancel_benchmarks::ours::full_stack())
        .await
    {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("stdio server stopped: {e}");
            1
        }
    };
    // stdin's reader thread may still be blocked in a read: do not wait for it.
    std::process::exit(code);
}
