//! The Streamable HTTP transport over loopback sockets: the server adapter
//! ([`server`], [`sse_after`]), its checks of headers and versions
//! ([`legacy_checks`], [`missing_version`], [`param_headers`]), disconnect
//! as cancellation ([`cancel`]), the drain grace at shutdown ([`drain`]),
//! `HttpClient` ([`client`], its cancelling
//! [`client_cancel`], its answer size limit [`client_limits`]) and the `serve` helper ([`serve`]).

#[path = "../support/mod.rs"]
mod support;

mod cancel;
mod client;
mod client_cancel;
mod client_limits;
mod config_values;
mod connection_timers;
mod deadline_gateway;
mod drain;
mod header_checks;
mod legacy_checks;
mod legacy_client;
mod legacy_client_cancel;
mod legacy_client_state;
mod lifecycle;
mod missing_version;
mod param_headers;
mod serve;
mod server;
mod session_cancels;
mod sessions;
mod sse_after;
mod tls;
