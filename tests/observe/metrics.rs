//! The metrics (feature `metrics`), read back from the `metrics` facade's
//! debugging recorder (installed for this thread only).

use std::collections::HashMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use serde_json::json;
use tower::ServiceExt;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{McpRequest, ProgressObserver};

use crate::capture::Capture;

type Snapshot = HashMap<(MetricKind, String, Vec<(String, String)>), DebugValue>;

/// The debugging recorder's snapshots reset counters and gauges (a swap to
/// zero): the totals are the sums over every snapshot taken.
#[derive(Default)]
struct Totals(Snapshot);

impl Totals {
    fn take(&mut self, recorder: &metrics_util::debugging::Snapshotter) -> &Snapshot {
        for (key, _unit, _desc, value) in recorder.snapshot().into_vec() {
            let key = flatten(&key);
            match (self.0.get_mut(&key), value) {
                (Some(DebugValue::Counter(a)), DebugValue::Counter(b)) => *a += b,
                (Some(DebugValue::Gauge(a)), DebugValue::Gauge(b)) => {
                    *a = (a.into_inner() + b.into_inner()).into()
                }
                (Some(DebugValue::Histogram(a)), DebugValue::Histogram(b)) => a.extend(b),
                (_, value) => {
                    self.0.insert(key, value);
                }
            }
        }
        &self.0
    }
}

fn flatten(key: &CompositeKey) -> (MetricKind, String, Vec<(String, String)>) {
    let mut labels: Vec<(String, String)> = key
        .key()
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.kind(), key.key().name().to_owned(), labels)
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

fn counter(s: &Snapshot, name: &str, l: &[(&str, &str)]) -> u64 {
    match s.get(&(MetricKind::Counter, name.to_owned(), labels(l))) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("counter {name} {l:?}: {other:?} in {s:?}"),
    }
}

fn gauge(s: &Snapshot, name: &str, l: &[(&str, &str)]) -> f64 {
    match s.get(&(MetricKind::Gauge, name.to_owned(), labels(l))) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("gauge {name} {l:?}: {other:?}"),
    }
}

fn histogram(s: &Snapshot, name: &str, l: &[(&str, &str)]) -> Vec<f64> {
    match s.get(&(MetricKind::Histogram, name.to_owned(), labels(l))) {
        Some(DebugValue::Histogram(v)) => v.iter().map(|x| x.into_inner()).collect(),
        other => panic!("histogram {name} {l:?}: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn in_flight_outcomes_durations_and_progress_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let (cap, _guard) = Capture::install();

    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let (cr, cw) = tokio::io::split(client_io);
    let served = tokio::spawn(StdioServer::new().serve(crate::server(), sr, sw));
    let client = StdioClient::new(cr, cw);

    client
        .clone()
        .oneshot(McpRequest::new(1, "slow"))
        .await
        .unwrap();
    client
        .clone()
        .oneshot(McpRequest::new(2, "fail"))
        .await
        .unwrap_err();
    let observed = McpRequest::new(3, "progress")
        .with_params(json!({}))
        .with_extension(ProgressObserver::new(|_| {}));
    client.clone().oneshot(observed).await.unwrap();

    // A request in flight shows on both gauges.
    let hang = tokio::spawn(client.clone().oneshot(McpRequest::new(4, "hang")));
    cap.started("mcp.server.request", "4").await;
    let mut totals = Totals::default();
    let s = totals.take(&snapshotter);
    let stdio = [("mcp.transport", "stdio")];
    assert_eq!(gauge(s, "mcp.server.requests.in_flight", &stdio), 1.0);
    assert_eq!(gauge(s, "mcp.client.requests.in_flight", &stdio), 1.0);
    // Closing the connection ends it on both sides.
    client.shutdown().await.unwrap();
    served.await.unwrap().unwrap();
    hang.await.unwrap().unwrap_err();

    let s = totals.take(&snapshotter);
    let by = |outcome| [("mcp.transport", "stdio"), ("mcp.request.outcome", outcome)];
    assert_eq!(counter(s, "mcp.server.requests", &by("completed")), 2);
    assert_eq!(counter(s, "mcp.server.requests", &by("error")), 1);
    assert_eq!(counter(s, "mcp.client.requests", &by("completed")), 2);
    assert_eq!(
        counter(s, "mcp.client.requests", &by("error")),
        2,
        "the failed call and the one the closed connection failed"
    );
    assert_eq!(
        counter(s, "mcp.server.requests", &by("transport_closed")),
        1
    );
    assert_eq!(gauge(s, "mcp.server.requests.in_flight", &stdio), 0.0);
    assert_eq!(gauge(s, "mcp.client.requests.in_flight", &stdio), 0.0);
    let slow = histogram(s, "mcp.server.operation.duration", &by("completed"));
    assert_eq!(slow.len(), 2);
    assert!(
        slow.contains(&1.0),
        "the slow call took the paused clock's 1 s: {slow:?}"
    );
    assert_eq!(counter(s, "mcp.server.progress.notifications", &[]), 2);
    assert_eq!(counter(s, "mcp.client.progress.notifications", &[]), 2);
}
