//! The stdio transport: the server driver ([`server`], what it
//! writes [`server_writes`]) and `StdioClient`
//! ([`client`]) over in-memory pipes, the client against a real child
//! process ([`process`]), what counts as a cancellation on both sides
//! ([`malformed_cancellations`]), a task made for a call given up
//! ([`orphan_task`]), a message over the line limit
//! ([`oversize`]), the drain grace at shutdown and end of
//! input ([`drain`]), how long the writer may hold a finished answer
//! ([`hold`]), how long answers the reader finished wait for the writer
//! while it reads on ([`reader_turn`]), and which task a handler runs in
//! ([`first_poll`]).

#[path = "../support/mod.rs"]
mod support;

mod budget;
mod client;
mod drain;
mod first_poll;
mod hold;
mod malformed_cancellations;
mod orphan_task;
mod oversize;
mod process;
mod reader_turn;
mod server;
mod server_writes;
