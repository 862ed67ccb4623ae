//! The configuration of the Streamable HTTP server adapter, shared by all
//! clones of a [`StreamableHttpService`](super::StreamableHttpService).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::origin::OriginPolicy;
use super::param_headers::ToolHeaderMap;
use super::session::Sessions;
use crate::policy::MethodPolicy;
use crate::protocol::{LEGACY_VERSIONS, PROTOCOL_VERSION};
use crate::timeout::BudgetKey;
use crate::transport::admission::Admission;

/// The revision a request without `MCP-Protocol-Version` is taken for when
/// [`StreamableHttpService::accept_missing_version`](super::StreamableHttpService::accept_missing_version)
/// is on.
pub(crate) const ASSUMED_LEGACY_VERSION: &str = "2025-03-26";

/// The default of [`StreamableHttpService::sse_after`](super::StreamableHttpService::sse_after):
/// a handler silent for this long gets an SSE response with keep-alives
/// instead of a JSON answer at the end.
pub(crate) const DEFAULT_SSE_AFTER: Duration = Duration::from_secs(10);

/// The default body limit: 4 MiB.
const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The default bound on the requests one adapter runs at once: what the
/// stdio server lets one connection run.
const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
const DEFAULT_NOTIFICATION_QUEUE: usize = 32;
/// The default of [`StreamableHttpService::body_timeout`](super::StreamableHttpService::body_timeout).
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the adapter does with a request of a stateful revision
/// (`MCP-Protocol-Version: 2025-…`, whose clients run the `initialize`
/// handshake and for which a disconnect is not a cancellation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatefulRequests {
    /// Pass it to the MCP service unchanged; a disconnect does not cancel it
    /// (the handler runs on detached, its answer discarded, until its end,
    /// a legacy session's cancel, or the shutdown after the drain grace;
    /// `serve` waits for it). The default, as
    /// those revisions say disconnection is not cancellation.
    #[default]
    Serve,
    /// Pass it through, and cancel it on disconnect like a 2026 request.
    ServeCancelOnDisconnect,
    /// Refuse it: `400` with `UnsupportedProtocolVersion`.
    Reject,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) origin: OriginPolicy,
    pub(crate) max_body_bytes: usize,
    pub(crate) keep_alive: Option<Duration>,
    pub(crate) supported: Arc<[String]>,
    pub(crate) legacy_versions: Arc<[String]>,
    pub(crate) legacy: StatefulRequests,
    pub(crate) shutdown: Option<CancellationToken>,
    pub(crate) queue: usize,
    pub(crate) param_headers: Arc<ToolHeaderMap>,
    pub(crate) missing_version_legacy: bool,
    pub(crate) sse_after: Option<Duration>,
    pub(crate) drain_grace: Duration,
    pub(crate) body_timeout: Option<Duration>,
    /// The 2025-era sessions, when on (shared by the adapter's clones).
    pub(crate) sessions: Option<Arc<Sessions>>,
    /// The bound on the requests running at once, attached or detached
    /// (shared by the adapter's clones), and its size.
    pub(crate) in_flight: Admission,
    /// The `_meta` key of a client's budget to honour, if any.
    pub(crate) budget_key: Option<BudgetKey>,
    /// The cooperative grace of cancelled requests, by method.
    pub(crate) grace: MethodPolicy<Duration>,
}

impl Config {
    /// Bounds the requests running at once to `max` (at least 1), with a
    /// new, empty count.
    pub(crate) fn set_max_in_flight(&mut self, max: usize) {
        self.in_flight = Admission::new(max);
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            origin: OriginPolicy::Localhost,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            keep_alive: Some(DEFAULT_KEEP_ALIVE),
            supported: Arc::new([PROTOCOL_VERSION.to_owned()]),
            legacy_versions: LEGACY_VERSIONS.iter().map(|v| v.to_string()).collect(),
            legacy: StatefulRequests::Serve,
            shutdown: None,
            queue: DEFAULT_NOTIFICATION_QUEUE,
            param_headers: Arc::new(ToolHeaderMap::new()),
            missing_version_legacy: false,
            sse_after: Some(DEFAULT_SSE_AFTER),
            drain_grace: crate::transport::DEFAULT_DRAIN_GRACE,
            body_timeout: Some(DEFAULT_BODY_TIMEOUT),
            sessions: None,
            in_flight: Admission::new(DEFAULT_MAX_IN_FLIGHT),
            budget_key: None,
            grace: MethodPolicy::new(Duration::ZERO),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("origin", &self.origin)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keep_alive", &self.keep_alive)
            .field("supported", &self.supported)
            .field("legacy", &self.legacy)
            .field("param_headers", &self.param_headers.len())
            .field("missing_version_legacy", &self.missing_version_legacy)
            .field("sse_after", &self.sse_after)
            .field("drain_grace", &self.drain_grace)
            .field("body_timeout", &self.body_timeout)
            .field("sessions", &self.sessions)
            .field("max_in_flight", &self.in_flight.max())
            .field("running", &self.in_flight.taken())
            .field("budget_key", &self.budget_key)
            .field("grace", &self.grace)
            .finish()
    }
}

/// SECURITY.md's table of limits states the defaults in prose: it must say
/// what the code does.
#[cfg(all(test, feature = "stdio"))]
mod security_table_tests {
    use std::time::Duration;

    use super::*;
    use crate::transport::http::client::MAX_RESPONSE_BYTES;
    use crate::transport::http::Server;
    use crate::transport::stdio;

    const SECURITY: &str = include_str!("../../../SECURITY.md");

    /// The default cell of the row whose first cell starts with `limit`.
    fn default_of(limit: &str) -> &'static str {
        let mut rows = SECURITY
            .lines()
            .filter(|l| l.starts_with("| ") && l[2..].starts_with(limit));
        let row = rows.next().unwrap_or_else(|| panic!("no row for {limit}"));
        assert!(rows.next().is_none(), "two rows for {limit}");
        row.split('|').nth(2).unwrap().trim()
    }

    fn mib(bytes: usize) -> String {
        assert_eq!(bytes % (1 << 20), 0);
        format!("{} MiB", bytes >> 20)
    }

    fn secs(d: Duration) -> String {
        format!("{} s", d.as_secs())
    }

    #[test]
    fn the_limits_table_states_the_defaults_of_the_code() {
        let http = Config::default();
        let rows = [
            ("stdio line size", mib(stdio::DEFAULT_MAX_LINE_BYTES)),
            (
                "stdio writer queue",
                format!("{} messages", stdio::DEFAULT_WRITE_QUEUE),
            ),
            (
                "stdio requests in flight",
                stdio::DEFAULT_MAX_IN_FLIGHT.to_string(),
            ),
            ("HTTP request body (", mib(http.max_body_bytes)),
            ("HTTP notifications queued", http.queue.to_string()),
            ("HTTP requests running", http.in_flight.max().to_string()),
            (
                "HTTP request body stall",
                format!("{} between chunks", secs(http.body_timeout.unwrap())),
            ),
            (
                "Connection without a request head",
                secs(Server::DEFAULT_HEADER_READ_TIMEOUT),
            ),
            (
                "HTTP/2 peer",
                format!(
                    "a ping every {}, 20 s to answer",
                    secs(Server::DEFAULT_HTTP2_KEEP_ALIVE)
                ),
            ),
            ("Peer that takes none", secs(Server::DEFAULT_WRITE_TIMEOUT)),
            ("HTTP client answer", mib(MAX_RESPONSE_BYTES)),
        ];
        for (limit, default) in rows {
            assert_eq!(default_of(limit), default, "SECURITY.md, {limit}");
        }
    }
}
