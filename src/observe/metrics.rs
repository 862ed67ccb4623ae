//! The metrics (feature `metrics`), recorded through the
//! [`metrics`](https://docs.rs/metrics) facade by the transports; their
//! names are listed in the [`observe`](super) module docs.

#![cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]

use std::time::Duration;

use super::{Outcome, Side, Transport};

/// Gauge: server requests in flight, by `mcp.transport`.
pub(crate) const SERVER_IN_FLIGHT: &str = "mcp.server.requests.in_flight";
/// Gauge: client requests in flight, by `mcp.transport`.
pub(crate) const CLIENT_IN_FLIGHT: &str = "mcp.client.requests.in_flight";
/// Counter: ended server requests, by `mcp.transport` and `mcp.request.outcome`.
pub(crate) const SERVER_REQUESTS: &str = "mcp.server.requests";
/// Counter: ended client requests, by `mcp.transport` and `mcp.request.outcome`.
pub(crate) const CLIENT_REQUESTS: &str = "mcp.client.requests";
/// Histogram (seconds): server request durations, by `mcp.transport` and `mcp.request.outcome`.
pub(crate) const SERVER_DURATION: &str = "mcp.server.operation.duration";
/// Histogram (seconds): client request durations, by `mcp.transport` and `mcp.request.outcome`.
pub(crate) const CLIENT_DURATION: &str = "mcp.client.operation.duration";
/// Counter: progress notifications queued by server handlers.
pub(crate) const SERVER_PROGRESS: &str = "mcp.server.progress.notifications";
/// Counter: progress notifications a client routed to a request in flight.
pub(crate) const CLIENT_PROGRESS: &str = "mcp.client.progress.notifications";

/// The transport label's key.
pub(crate) const TRANSPORT_LABEL: &str = super::field::MCP_TRANSPORT;
/// The outcome label's key.
pub(crate) const OUTCOME_LABEL: &str = super::field::OUTCOME;

pub(crate) fn started(side: Side, transport: Transport) {
    let name = match side {
        Side::Server => SERVER_IN_FLIGHT,
        Side::Client => CLIENT_IN_FLIGHT,
    };
    metrics::gauge!(name, TRANSPORT_LABEL => transport.as_str()).increment(1.0);
}

pub(crate) fn ended(side: Side, transport: Transport, outcome: &Outcome, elapsed: Duration) {
    let (in_flight, requests, duration) = match side {
        Side::Server => (SERVER_IN_FLIGHT, SERVER_REQUESTS, SERVER_DURATION),
        Side::Client => (CLIENT_IN_FLIGHT, CLIENT_REQUESTS, CLIENT_DURATION),
    };
    let t = transport.as_str();
    metrics::gauge!(in_flight, TRANSPORT_LABEL => t).decrement(1.0);
    let kind = outcome.kind();
    metrics::counter!(requests, TRANSPORT_LABEL => t, OUTCOME_LABEL => kind).increment(1);
    metrics::histogram!(duration, TRANSPORT_LABEL => t, OUTCOME_LABEL => kind)
        .record(elapsed.as_secs_f64());
}

/// A progress notification, sent (server) or routed (client).
pub(crate) fn progress(side: Side) {
    let name = match side {
        Side::Server => SERVER_PROGRESS,
        Side::Client => CLIENT_PROGRESS,
    };
    metrics::counter!(name).increment(1);
}
