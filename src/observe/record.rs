//! [`Record`]: one request's span, its clock and its metrics, from the
//! moment a transport has the request to its [`Outcome`]. Created and ended
//! only by the lifecycle (`transport::call`), once for every transport.

use serde_json::value::RawValue;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Span;

use super::{field, Era, Outcome, Side, Transport};
use crate::jsonrpc::{ParamsPeek, ParamsView, RequestId};
use crate::sanitize;
use crate::Cancellation;

/// The target of the request spans and of their `request ended` events,
/// so that one filter directive (`tower_mcp_cancel::request=warn`) turns
/// both off.
const TARGET: &str = "tower_mcp_cancel::request";

/// Where a request span reads the fields of `params` it shows (the tool or
/// prompt name, the era of a stdio request).
#[derive(Clone, Copy, Debug)]
pub(crate) enum SpanParams<'a> {
    /// Read with the request's envelope (a server's decode): nothing is
    /// parsed again.
    Viewed(ParamsView<'a>),
    /// The raw params (a client's request): peeked only when a subscriber
    /// wants the span.
    Raw(Option<&'a RawValue>),
}

impl<'a> SpanParams<'a> {
    fn view(self) -> ParamsView<'a> {
        match self {
            SpanParams::Viewed(view) => view,
            SpanParams::Raw(params) => params.map(|p| ParamsPeek::of(p).view).unwrap_or_default(),
        }
    }
}

/// One request's span and measurements. Ends once: with
/// [`end`](Self::end), or, dropped before, with the outcome of the drop.
pub(crate) struct Record {
    span: Span,
    started: Instant,
    side: Side,
    transport: Transport,
    /// The request's cancellation, whose reason tells a drop by a limit,
    /// the transport (a shutdown, a peer's cancel) or the caller with a
    /// reason of their own from a plain drop by its owner.
    cancellation: Option<Cancellation>,
    ended: bool,
}

impl Record {
    /// Starts the record of a request: its span (fields below), its clock,
    /// the in-flight gauge.
    pub(crate) fn start(
        side: Side,
        transport: Transport,
        era: Option<Era>,
        id: Option<&RequestId>,
        method: &str,
        params: SpanParams<'_>,
    ) -> Self {
        // The values are computed only when a subscriber wants the span
        // (inside the macros).
        let id = || {
            id.map(|id| match id {
                RequestId::String(s) => sanitize::for_log(s),
                other => other.to_string(),
            })
        };
        let era = || {
            era.unwrap_or_else(|| Era::of_params(&params.view()))
                .as_str()
        };
        let tool = || {
            (method == "tools/call")
                .then(|| name_param(&params.view()))
                .flatten()
        };
        let prompt = || {
            (method == "prompts/get")
                .then(|| name_param(&params.view()))
                .flatten()
        };
        let operation = (method == "tools/call").then_some("execute_tool");
        // `{mcp.method.name} {target}` (the conventions' span name).
        let otel_name = || match tool().or_else(prompt) {
            Some(target) => format!("{} {target}", sanitize::for_log(method)),
            None => sanitize::for_log(method),
        };
        let protocol = transport.protocol_name();
        // The span name and `otel.kind` must be literals: one field list,
        // two spans.
        macro_rules! request_span {
            ($name:literal, $kind:literal) => {
                tracing::info_span!(
                    target: TARGET,
                    $name,
                    otel.name = otel_name(),
                    otel.kind = $kind,
                    otel.status_code = Empty,
                    mcp.method.name = sanitize::for_log(method),
                    jsonrpc.request.id = id(),
                    gen_ai.tool.name = tool(),
                    gen_ai.prompt.name = prompt(),
                    gen_ai.operation.name = operation,
                    rpc.system.name = "jsonrpc",
                    network.transport = transport.network_transport(),
                    network.protocol.name = protocol,
                    mcp.transport = transport.as_str(),
                    mcp.era = era(),
                    mcp.request.outcome = Empty,
                    mcp.cancel.reason = Empty,
                    mcp.grace = Empty,
                    error.type = Empty,
                    rpc.response.status_code = Empty,
                )
            };
        }
        let span = match side {
            Side::Server => request_span!("mcp.server.request", "server"),
            Side::Client => request_span!("mcp.client.request", "client"),
        };
        #[cfg(feature = "metrics")]
        super::metrics::started(side, transport);
        Self {
            span,
            started: Instant::now(),
            side,
            transport,
            cancellation: None,
            ended: false,
        }
    }

    /// Reads the reason of a drop from `cancellation`.
    pub(crate) fn with_cancellation(mut self, cancellation: Cancellation) -> Self {
        self.cancellation = Some(cancellation);
        self
    }

    /// The request's span, to instrument its future with.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Ends the record with `outcome`: the span's outcome fields, the one
    /// `info` line of the request, the metrics.
    pub(crate) fn end(mut self, outcome: &Outcome) {
        self.finish(outcome);
    }

    /// Ends the record with `outcome` (as [`end`](Self::end)) but keeps its
    /// span open: the request's answer is decided, its handler goes on in
    /// its cooperative grace, whose end [`grace_ended`](Self::grace_ended)
    /// records.
    #[cfg(any(feature = "stdio", feature = "http"))]
    pub(crate) fn end_keeping_span(&mut self, outcome: &Outcome) {
        self.finish(outcome);
    }

    /// Records how the request's cooperative grace ended: its handler
    /// `finished` within it, or was dropped after it.
    #[cfg(any(feature = "stdio", feature = "http"))]
    pub(crate) fn grace_ended(&self, finished: bool) {
        let how = if finished { "finished" } else { "dropped" };
        #[cfg(feature = "metrics")]
        super::metrics::grace(self.transport, finished);
        self.span.record(field::GRACE, how);
        self.span.in_scope(|| {
            tracing::debug!(
                target: TARGET,
                grace = how,
                duration_ms = self.started.elapsed().as_millis() as u64,
                "request's grace ended"
            );
        });
    }

    fn finish(&mut self, outcome: &Outcome) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        #[cfg(feature = "metrics")]
        super::metrics::ended(self.side, self.transport, outcome, elapsed);
        let span = &self.span;
        if !span.is_disabled() {
            span.record(field::OUTCOME, outcome.kind());
            if let Some(reason) = outcome.reason() {
                span.record(field::CANCEL_REASON, sanitize::for_log(reason));
            }
            if let Some(error_type) = outcome.error_type() {
                span.record(field::ERROR_TYPE, error_type);
                span.record("otel.status_code", "ERROR");
            }
            if let Some(code) = outcome.error_code() {
                span.record(field::RPC_RESPONSE_STATUS_CODE, code.to_string());
            }
        }
        span.in_scope(|| {
            tracing::info!(
                target: TARGET,
                outcome = %outcome,
                duration_ms = elapsed.as_millis() as u64,
                "request ended"
            );
        });
    }
}

/// The `name` of a `tools/call` or `prompts/get` (sanitized), for the span.
fn name_param(params: &ParamsView<'_>) -> Option<String> {
    let name = crate::jsonrpc::json_str(params.name?)?;
    Some(sanitize::for_log(&name))
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let outcome = Outcome::dropped(self.cancellation.as_ref()).unwrap_or(match self.side {
            Side::Server => Outcome::ClientDisconnected,
            Side::Client => Outcome::CallerDropped,
        });
        self.finish(&outcome);
    }
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("side", &self.side)
            .field("transport", &self.transport)
            .field("ended", &self.ended)
            .finish()
    }
}
