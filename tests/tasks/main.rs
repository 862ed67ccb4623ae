//! Tasks end to end: the client layer over the server layer in one process
//! ([`calls`]), and both over Streamable HTTP on loopback ([`http`]): a
//! task is one call to its client, dropping that call cancels the task and
//! drops the server's work, the `Mcp-Name` routing header is sent and
//! checked; the example binaries with `--tasks` ([`examples`]).

#[path = "../support/mod.rs"]
mod support;

mod calls;
mod client_checks;
mod client_declare;
mod client_limits;
mod client_retry;
mod client_typed;
mod common;
mod ends;
mod examples;
mod faults;
mod harness;
mod http;
mod http_cancel;
mod instants;
mod mock;
mod panics;
mod transport_cancel;
