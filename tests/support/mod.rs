//! What the integration tests share, included by each test binary with
//! `#[path = "../support/mod.rs"] mod support;`: a raw JSON-lines peer for
//! stdio ([`stdio`]), a loopback server, the test tools and raw-request
//! helpers for HTTP ([`http`]). Handler events, drop probes and `settle`
//! are the library's own `tower_mcp_cancel::test_util`.
// Every binary compiles all of it and uses a part; its items are `pub` for
// the sibling test modules, not an API.
#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    missing_debug_implementations
)]

#[cfg(feature = "test-util")]
pub mod drain;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "stdio")]
pub mod stdio;

pub mod example;
