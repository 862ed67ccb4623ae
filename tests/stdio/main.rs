//! The stdio transport: the server driver ([`server`]) and `StdioClient`
//! ([`client`]) over in-memory pipes, the client against a real child
//! process ([`process`]), and what counts as a cancellation on both sides
//! ([`malformed_cancellations`]).

#[path = "../support/mod.rs"]
mod support;

mod client;
mod drain;
mod malformed_cancellations;
mod process;
mod server;
