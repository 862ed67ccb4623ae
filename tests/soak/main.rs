//! The soak (issue 7, item 3) at CI size: 20 000 requests over stdio and
//! over Streamable HTTP, 30 % cancelled by the client at random points and
//! 10 % timing out; zero lost, zero leaked, RSS flat. The full run (1 000 000
//! each) is `cargo bench --bench soak`; see `BENCHMARKS.md`.
#![cfg(all(feature = "stdio", feature = "http"))]

#[path = "harness.rs"]
mod soak_support;

use std::sync::Mutex;

use soak_support::{run, Config, Transport};

/// The two runs measure this process's memory: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn soak(transport: Transport) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(run(transport, &Config::new(20_000)));
    eprintln!("{}", report.summary());
    assert!(report.answered > 0 && report.cancelled > 0 && report.timed_out > 0);
    report.verdict().unwrap();
}

#[test]
fn soak_stdio_20k() {
    soak(Transport::Stdio);
}

#[test]
fn soak_http_20k() {
    soak(Transport::Http);
}
