//! Cooperative grace, then drop (server side): on every cancel cause the
//! request's token fires at once, the wire sees what it sees without a
//! grace at the same moment, the handler is polled on for up to its grace
//! (so its cleanup can finish) and then dropped. Over stdio ([`stdio`]) and
//! Streamable HTTP ([`http`]), with a paused clock and the handlers' drop
//! guards (`test_util::Recorder`).

#[path = "../support/mod.rs"]
mod support;

mod handler;
mod http;
mod layers;
mod sessions;
mod stdio;
