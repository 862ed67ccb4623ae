//! Our HTTP server for figure 8: the full stack (`CancelOnDisconnectLayer`,
//! `TimeoutLayer` and `ProgressResetLayer`, as in `ours.rs`) behind
//! `transport::http::StreamableHttpService` with its defaults, served by
//! the same hyper-util loop and the same runtime (2 workers) as every
//! server of the figure, with the figure's logging (a tracing subscriber at
//! `warn`, see `load::http_runtime`).
//!
//! `ours_http [--listen ADDR] [--serve]`: with `--serve`, served by the
//! crate's own `transport::http::serve` (its default `Server` settings)
//! instead of the shared loop.

use tokio_util::sync::CancellationToken;
use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
use tower_mcp_cancel_benchmarks::{load, ours};

fn main() {
    let own_serve = std::env::args().any(|a| a == "--serve");
    load::http_runtime().block_on(async move {
        let svc = StreamableHttpService::new(ours::full_stack());
        if own_serve {
            let listener = tokio::net::TcpListener::bind(load::listen_arg())
                .await
                .expect("bind");
            println!("listening on http://{}/mcp", listener.local_addr().unwrap());
            serve(listener, svc, CancellationToken::new()).await;
        } else {
            load::serve_http(svc).await;
        }
    });
}
