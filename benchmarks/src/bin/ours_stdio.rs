//! Our stdio server for figures 3 and 4: the full stack over stdin/stdout;
//! handler events on stderr with `CLOCK_MONOTONIC` ns.

#[tokio::main]
async fn main() {
    let code = match tower_mcp_cancel::transport::stdio::serve_stdio(
        tower_mcp_cancel_benchmarks::ours::full_stack(),
    )
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
