//! The stdio transport: the server driver ([`server`]) and `StdioClient`
//! ([`client`]) over in-memory pipes, the client against a real child
//! process ([`process`]), what counts as a cancellation on both sides
//! ([`malformed_cancellations`]), and the drain grace at shutdown and end of
//! input ([`drain`]).

#[path = "../support/mod.rs"]
mod support;

mod client;
mod drain;
mod malformed_cancellations;
mod process;
mod server;
