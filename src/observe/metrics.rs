//! The metrics (feature `metrics`), recorded through the
//! [`metrics`](https://docs.rs/metrics) facade by the transports; their
//! names are listed in the [`observe`](super) module docs.

#![cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]

use std::time::Duration;

use metrics::{Key, Label, Metadata};

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

/// Counter: server requests whose cooperative grace ended, by
/// `mcp.transport` and `mcp.grace` (`finished` or `dropped`).
pub(crate) const SERVER_GRACE: &str = "mcp.server.grace";

/// The transport label's key.
pub(crate) const TRANSPORT_LABEL: &str = super::field::MCP_TRANSPORT;
/// The outcome label's key.
pub(crate) const OUTCOME_LABEL: &str = super::field::OUTCOME;

// The labels are static: a key built from them is neither allocated nor
// hashed when it is recorded (the macros with label values that are not
// literals build a `Vec` of labels and hash the key on every call, also
// without a recorder installed).
macro_rules! outcome_labels {
    ($transport:literal) => {
        [
            outcome_labels!(@one $transport, "completed"),
            outcome_labels!(@one $transport, "error"),
            outcome_labels!(@one $transport, "cancelled"),
            outcome_labels!(@one $transport, "client_disconnected"),
            outcome_labels!(@one $transport, "transport_closed"),
            outcome_labels!(@one $transport, "timeout_deadline"),
            outcome_labels!(@one $transport, "timeout_idle"),
            outcome_labels!(@one $transport, "timeout_max"),
            outcome_labels!(@one $transport, "timeout_inherited"),
            outcome_labels!(@one $transport, "shutdown"),
            outcome_labels!(@one $transport, "caller_dropped"),
            outcome_labels!(@one $transport, "cancelled_other"),
        ]
    };
    (@one $transport:literal, $kind:literal) => {
        [
            Label::from_static_parts(TRANSPORT_LABEL, $transport),
            Label::from_static_parts(OUTCOME_LABEL, $kind),
        ]
    };
}

/// The transport label, by transport.
static TRANSPORT_LABELS: [[Label; 1]; 2] = [
    [Label::from_static_parts(TRANSPORT_LABEL, "stdio")],
    [Label::from_static_parts(TRANSPORT_LABEL, "http")],
];

/// The transport and outcome labels, by transport and [`Outcome::kind`].
static OUTCOME_LABELS: [[[Label; 2]; 12]; 2] = [outcome_labels!("stdio"), outcome_labels!("http")];

/// What the macros pass the recorder.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

fn transport_index(transport: Transport) -> usize {
    match transport {
        Transport::Stdio => 0,
        Transport::Http => 1,
    }
}

/// The transport and outcome labels of `kind` (an [`Outcome::kind`]).
fn outcome_labels(transport: Transport, kind: &str) -> &'static [Label] {
    let row = &OUTCOME_LABELS[transport_index(transport)];
    row.iter()
        .find(|labels| labels[1].value() == kind)
        .map_or(&[][..], |labels| &labels[..])
}

pub(crate) fn started(side: Side, transport: Transport) {
    let name = match side {
        Side::Server => SERVER_IN_FLIGHT,
        Side::Client => CLIENT_IN_FLIGHT,
    };
    let key = Key::from_static_parts(name, &TRANSPORT_LABELS[transport_index(transport)]);
    metrics::with_recorder(|r| r.register_gauge(&key, &METADATA).increment(1.0));
}

pub(crate) fn ended(side: Side, transport: Transport, outcome: &Outcome, elapsed: Duration) {
    let (in_flight, requests, duration) = match side {
        Side::Server => (SERVER_IN_FLIGHT, SERVER_REQUESTS, SERVER_DURATION),
        Side::Client => (CLIENT_IN_FLIGHT, CLIENT_REQUESTS, CLIENT_DURATION),
    };
    let in_flight =
        Key::from_static_parts(in_flight, &TRANSPORT_LABELS[transport_index(transport)]);
    let labels = outcome_labels(transport, outcome.kind());
    let requests = Key::from_static_parts(requests, labels);
    let duration = Key::from_static_parts(duration, labels);
    metrics::with_recorder(|r| {
        r.register_gauge(&in_flight, &METADATA).decrement(1.0);
        r.register_counter(&requests, &METADATA).increment(1);
        r.register_histogram(&duration, &METADATA)
            .record(elapsed.as_secs_f64());
    });
}

/// The transport and grace labels, by transport and finished / dropped.
static GRACE_LABELS: [[[Label; 2]; 2]; 2] = [
    [
        [
            Label::from_static_parts(TRANSPORT_LABEL, "stdio"),
            Label::from_static_parts(super::field::GRACE, "finished"),
        ],
        [
            Label::from_static_parts(TRANSPORT_LABEL, "stdio"),
            Label::from_static_parts(super::field::GRACE, "dropped"),
        ],
    ],
    [
        [
            Label::from_static_parts(TRANSPORT_LABEL, "http"),
            Label::from_static_parts(super::field::GRACE, "finished"),
        ],
        [
            Label::from_static_parts(TRANSPORT_LABEL, "http"),
            Label::from_static_parts(super::field::GRACE, "dropped"),
        ],
    ],
];

/// A server request's cooperative grace ended: its handler finished within
/// it, or was dropped after it.
pub(crate) fn grace(transport: Transport, finished: bool) {
    let labels = &GRACE_LABELS[transport_index(transport)][usize::from(!finished)];
    let key = Key::from_static_parts(SERVER_GRACE, labels);
    metrics::with_recorder(|r| r.register_counter(&key, &METADATA).increment(1));
}

/// A progress notification, sent (server) or routed (client).
pub(crate) fn progress(side: Side) {
    let name = match side {
        Side::Server => SERVER_PROGRESS,
        Side::Client => CLIENT_PROGRESS,
    };
    metrics::counter!(name).increment(1);
}
