//! Observability: one span per request on both sides, with the request's
//! [`Outcome`] recorded at its end, and (feature `metrics`) metrics through
//! the `metrics` facade.
//!
//! Every request the transports carry — server and client, stdio and
//! Streamable HTTP — gets a span, opened when the transport has the request
//! and closed at its end, with one `info` event when it ends (target
//! `tower_mcp_cancel::request`: `request ended outcome=… duration_ms=…`).
//! The handler (server) or the call (client) runs inside it, so its own
//! events carry the request's id and method. Nothing is logged per progress
//! notification above `debug`. Spans and that event share the target
//! `tower_mcp_cancel::request`: `RUST_LOG=tower_mcp_cancel::request=warn`
//! turns both off.
//!
//! | span | when |
//! | --- | --- |
//! | `mcp.server.request` | a request a server transport received, from decode to its end (answer written to the queue, cancelled, dropped) |
//! | `mcp.client.request` | a request a client transport sends, from the call to its answer, or to the drop of its future |
//!
//! Its fields follow the OpenTelemetry semantic conventions for MCP (and
//! JSON-RPC, RPC, network) where they name one; the others are this
//! crate's, under `mcp.`:
//!
//! | field | value |
//! | --- | --- |
//! | `mcp.method.name` | the method (sanitized) |
//! | `jsonrpc.request.id` | the id, as a string |
//! | `gen_ai.tool.name`, `gen_ai.operation.name` | for a `tools/call`: the tool (sanitized), `execute_tool` |
//! | `gen_ai.prompt.name` | for a `prompts/get`: the prompt (sanitized) |
//! | `rpc.system.name` | `jsonrpc` |
//! | `network.transport` | `pipe` (stdio) or `tcp` (HTTP) |
//! | `network.protocol.name` | `http` over HTTP |
//! | `mcp.transport` | `stdio` or `http` (this crate's) |
//! | `mcp.era` | `2026` (revision 2026-07-28) or `legacy` (2025 revisions): on HTTP from the version checks (server) or the era found (client); on stdio from the request's `_meta["io.modelcontextprotocol/protocolVersion"]`, which every 2026 request carries |
//! | `mcp.request.outcome` | the [`Outcome::kind`] (this crate's) |
//! | `mcp.cancel.reason` | the peer's reason of a cancel, sanitized (this crate's) |
//! | `mcp.grace` | a server request cancelled with a [cooperative grace](crate::transport#cooperative-grace-then-drop): `finished` (its handler ended within the grace) or `dropped` (after it); set when the grace ended, which the span outlives (this crate's) |
//! | `error.type` | for a [failure](Outcome::is_failure) only: the JSON-RPC code, `timeout`, or `transport_error` |
//! | `rpc.response.status_code` | the JSON-RPC error code of an error answer |
//! | `otel.name`, `otel.kind`, `otel.status_code` | for `tracing-opentelemetry`: the conventions' span name (`tools/call get_weather`, else the method), `server`/`client`, `ERROR` on a failure |
//!
//! A cancellation is never a failure: a peer's cancel, a client gone away,
//! a caller that dropped its call and a shutdown set no `error.type`, and
//! the timeouts say which limit fired (`timeout_deadline`,
//! `timeout_idle`, `timeout_max`, `timeout_inherited`).
//!
//! ```
//! use tower::{service_fn, ServiceExt};
//! use tower_mcp_cancel::observe::Outcome;
//! use tower::BoxError;
//! use tower_mcp_cancel::McpRequest;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // A layer of your own can classify its inner service's result the same way.
//! let svc = service_fn(|_req: McpRequest| async {
//!     Err::<serde_json::Value, BoxError>(tower_mcp_cancel::jsonrpc::ErrorObject::new(-32602, "bad").into())
//! });
//! let result = svc.oneshot(McpRequest::new(1, "tools/call")).await;
//! let outcome = Outcome::of(&result);
//! assert_eq!(outcome.kind(), "error");
//! assert_eq!(outcome.error_type().as_deref(), Some("-32602"));
//! # }
//! ```
//!
//! # Metrics (feature `metrics`)
//!
//! Recorded through the [`metrics`](https://docs.rs/metrics) facade, so any
//! exporter (Prometheus, OpenTelemetry, statsd) installed as the recorder
//! gets them; without a recorder they cost next to nothing. The method is
//! not a label: its values come from the peer.
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | `mcp.server.requests.in_flight`, `mcp.client.requests.in_flight` | gauge | `mcp.transport` (`stdio`/`http`) |
//! | `mcp.server.requests`, `mcp.client.requests` | counter, one per ended request | `mcp.transport`, `mcp.request.outcome` (an [`Outcome::kind`]) |
//! | `mcp.server.operation.duration`, `mcp.client.operation.duration` | histogram, seconds (the OpenTelemetry MCP conventions' names) | `mcp.transport`, `mcp.request.outcome` |
//! | `mcp.server.progress.notifications` | counter: progress notifications a handler queued | |
//! | `mcp.server.grace` | counter: server requests whose [cooperative grace](crate::transport#cooperative-grace-then-drop) ended | `mcp.transport`, `mcp.grace` (`finished`/`dropped`) |
//! | `mcp.client.progress.notifications` | counter: progress notifications routed to a request in flight | |
//!
//! ```
//! # #[cfg(feature = "metrics")] {
//! use metrics_util::debugging::DebuggingRecorder;
//!
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || {
//!     // … serve requests on a current-thread runtime …
//! });
//! // Each entry's key is one of the names above, e.g. "mcp.server.requests".
//! let _ = snapshotter.snapshot();
//! # }
//! ```
#![doc = include_str!("guide.md")]
// Each transport uses its own variants: a build with one of them (or
// none) leaves the others unused.
#![cfg_attr(not(all(feature = "stdio", feature = "http")), allow(dead_code))]

mod outcome;
#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) mod record;

#[cfg(feature = "metrics")]
pub(crate) mod metrics;

pub use outcome::Outcome;

/// The span field names the code records by name after the span opened
/// (the span macro itself takes literal names); the module docs list all.
pub(crate) mod field {
    /// The class of a failure (OpenTelemetry `error.type`).
    pub(crate) const ERROR_TYPE: &str = "error.type";
    /// The JSON-RPC error code of an error answer (OpenTelemetry RPC conventions).
    pub(crate) const RPC_RESPONSE_STATUS_CODE: &str = "rpc.response.status_code";
    /// This crate's: `stdio` or `http`.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const MCP_TRANSPORT: &str = "mcp.transport";
    /// This crate's: the [`Outcome::kind`](super::Outcome::kind).
    pub(crate) const OUTCOME: &str = "mcp.request.outcome";
    /// This crate's: the sanitized reason of a cancel.
    pub(crate) const CANCEL_REASON: &str = "mcp.cancel.reason";
    /// This crate's: how a server request's cooperative grace ended,
    /// `finished` or `dropped`.
    #[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(dead_code))]
    pub(crate) const GRACE: &str = "mcp.grace";
}

/// Which side of a request this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Server,
    Client,
}

/// The transport a request travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Stdio,
    Http,
}

impl Transport {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }

    fn network_transport(self) -> &'static str {
        match self {
            Transport::Stdio => "pipe",
            Transport::Http => "tcp",
        }
    }

    fn protocol_name(self) -> Option<&'static str> {
        match self {
            Transport::Stdio => None,
            Transport::Http => Some("http"),
        }
    }
}

/// The protocol revision a request belongs to: what the HTTP transport
/// found in the headers, else what the request's own `_meta` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28.
    Modern,
    /// A 2025 revision (or 2024-11-05).
    Legacy,
}

impl Era {
    /// The era a request's params say (stdio has no headers): a 2026
    /// request carries `_meta["io.modelcontextprotocol/protocolVersion"]`
    /// (that revision requires it on every request), a 2025 one does not.
    fn of_params(params: &crate::jsonrpc::ParamsView<'_>) -> Era {
        let version = params.protocol_version.and_then(crate::jsonrpc::json_str);
        match version {
            Some(v) if !crate::protocol::LEGACY_VERSIONS.contains(&&*v) => Era::Modern,
            _ => Era::Legacy,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Era::Modern => "2026",
            Era::Legacy => "legacy",
        }
    }
}

#[cfg(test)]
mod tests {
    /// This file: its module docs list the names a user matches in a collector.
    const DOCS: &str = include_str!("mod.rs");

    /// Whether the module docs' tables name `name` (as the first cell of a
    /// row, alone or with others).
    fn documented(name: &str) -> bool {
        let cell = format!("`{name}`");
        DOCS.lines()
            .filter(|l| l.starts_with("//! | "))
            .any(|l| l.split('|').nth(1).is_some_and(|c| c.contains(&cell)))
    }

    /// Every field of the request spans, as the code opens them, is in the
    /// field table.
    #[cfg(any(feature = "stdio", feature = "http"))]
    #[test]
    fn the_span_field_table_names_every_field() {
        use super::record::Record;
        use super::{Side, Transport};

        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            for side in [Side::Server, Side::Client] {
                let record = Record::start(
                    side,
                    Transport::Http,
                    None,
                    None,
                    "ping",
                    super::record::SpanParams::Raw(None),
                );
                let metadata = record.span().metadata().expect("the span is enabled");
                let names: Vec<_> = metadata.fields().iter().map(|f| f.name()).collect();
                assert!(names.len() >= 17, "{names:?}");
                for name in names {
                    assert!(documented(name), "{name} is not in the field table");
                }
                assert!(DOCS.contains(&format!("| `{}` |", metadata.name())));
            }
        });
        assert!(!documented("mcp.no.such.field"));
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn the_metrics_table_names_every_metric() {
        use super::metrics::*;
        for name in [
            SERVER_IN_FLIGHT,
            CLIENT_IN_FLIGHT,
            SERVER_REQUESTS,
            CLIENT_REQUESTS,
            SERVER_DURATION,
            CLIENT_DURATION,
            SERVER_PROGRESS,
            CLIENT_PROGRESS,
        ] {
            assert!(documented(name), "{name} is not in the metrics table");
        }
        // The labels' keys are span fields, named in the metrics table too.
        assert!(DOCS.contains(&format!("`{TRANSPORT_LABEL}`")));
        assert!(DOCS.contains(&format!("`{OUTCOME_LABEL}`")));
    }
}
