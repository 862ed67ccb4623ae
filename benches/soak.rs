//! The soak (issue 7, item 3): 1 000 000 requests over stdio and over
//! Streamable HTTP, 30 % cancelled by the client at random points, 10 %
//! timing out; zero lost, zero leaked, RSS growth under 10 % between the
//! first and the last 100 000. Exits non-zero if a check fails.
//!
//! ```sh
//! cargo bench --bench soak                                   # 1M each
//! cargo bench --bench soak -- --requests 200000 --transport http
//! ```
//!
//! The harness is `tests/soak/harness.rs`, shared with the CI version
//! (`tests/soak/main.rs`, 20 000 requests).

#[path = "../tests/soak/harness.rs"]
mod soak_support;

use soak_support::{run, Config, Transport};

fn usage() -> ! {
    eprintln!(
        "usage: soak [--requests N] [--transport stdio|http|both] [--concurrency C] [--seed S]"
    );
    std::process::exit(2)
}

fn main() {
    let mut cfg = Config::new(1_000_000);
    let mut transports = vec![Transport::Stdio, Transport::Http];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--requests" => cfg.requests = value().parse().unwrap_or_else(|_| usage()),
            "--concurrency" => cfg.concurrency = value().parse().unwrap_or_else(|_| usage()),
            "--seed" => cfg.seed = value().parse().unwrap_or_else(|_| usage()),
            "--transport" => {
                transports = match value().as_str() {
                    "stdio" => vec![Transport::Stdio],
                    "http" => vec![Transport::Http],
                    "both" => vec![Transport::Stdio, Transport::Http],
                    _ => usage(),
                }
            }
            // What `cargo bench` passes to every bench binary.
            "--bench" => {}
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut failed = false;
    for t in transports {
        let report = rt.block_on(run(t, &cfg));
        println!("{}", report.summary());
        if let Err(e) = report.verdict() {
            eprintln!("FAILED: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
