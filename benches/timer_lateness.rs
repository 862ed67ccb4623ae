//! Timer lateness with 10 000 concurrent deadlines (figure 7 of
//! BENCHMARKS.md): 10 000 requests through `TimeoutLayer`, each with its own
//! deadline spread over one second, on the multi-threaded runtime (2
//! workers); for each, (time the inner future was dropped − the deadline the
//! layer set). The layer counts a limit from the request's `started_at`,
//! fixed when its task first runs it, so the deadline is read there: the time
//! to spawn 10 000 tasks is not part of the figure.
//!
//! The same run measures the floor: 10 000 tasks on the same runtime, each
//! sleeping until its deadline with `tokio::time::sleep_until` (lateness =
//! time it woke − its deadline). tokio's timer wheel has a 1 ms resolution
//! and rounds deadlines up, so both figures carry up to 1 ms of that.
//!
//! `cargo bench --bench timer_lateness` (pass `--smoke` for a tiny run)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::BoxError;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{McpRequest, RequestTimeout, RequestView, TimeoutLayer};

type Samples = Arc<Mutex<Vec<Duration>>>;

/// Records, when dropped, how late that was past `deadline`.
struct OnDrop {
    samples: Samples,
    deadline: Instant,
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        let late = Instant::now().saturating_duration_since(self.deadline);
        self.samples.lock().unwrap().push(late);
    }
}

/// What the handler needs to build its drop recorder.
#[derive(Clone)]
struct Probe {
    samples: Samples,
    limit: Duration,
}

/// 10 000 (or `n`) deadlines spread over `spread`, starting 100 ms from now.
fn deadlines(n: usize, spread: Duration) -> impl Iterator<Item = Instant> {
    let base = Instant::now() + Duration::from_millis(100);
    (0..n).map(move |i| base + spread.mul_f64(i as f64 / n as f64))
}

async fn through_layer(n: usize, spread: Duration) -> Vec<Duration> {
    let samples = Samples::default();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(60)))
        .service(service_fn(|mut req: McpRequest| {
            // The instant `TimeoutLayer` counted the limit from.
            let started = RequestView::started_at(&mut req);
            let on_drop = req.extensions().get::<Probe>().map(|p| OnDrop {
                samples: p.samples.clone(),
                deadline: started + p.limit,
            });
            async move {
                let _on_drop = on_drop;
                std::future::pending::<()>().await;
                Ok::<_, BoxError>(serde_json::Value::Null)
            }
        }));
    let tasks: Vec<_> = deadlines(n, spread)
        .enumerate()
        .map(|(i, deadline)| {
            let limit = deadline - Instant::now();
            let probe = Probe {
                samples: samples.clone(),
                limit,
            };
            let req = McpRequest::new(i as i64, "tools/call")
                .with_extension(RequestTimeout::after(limit))
                .with_extension(probe);
            let mut svc = svc.clone();
            tokio::spawn(async move {
                let _ = svc.ready().await.unwrap().call(req).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    take(samples)
}

async fn tokio_floor(n: usize, spread: Duration) -> Vec<Duration> {
    let samples = Samples::default();
    let tasks: Vec<_> = deadlines(n, spread)
        .map(|deadline| {
            let samples = samples.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(deadline).await;
                let late = Instant::now().saturating_duration_since(deadline);
                samples.lock().unwrap().push(late);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    take(samples)
}

fn take(samples: Samples) -> Vec<Duration> {
    let mut v = std::mem::take(&mut *samples.lock().unwrap());
    v.sort();
    v
}

fn report(label: &str, v: &[Duration]) {
    let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    println!(
        "{label}, {} concurrent deadlines: p50 {:?}  p99 {:?}  max {:?}",
        v.len(),
        pct(0.50),
        pct(0.99),
        v[v.len() - 1]
    );
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let n: usize = if smoke { 200 } else { 10_000 };
    let spread = Duration::from_millis(if smoke { 50 } else { 1000 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (layer, floor) =
        rt.block_on(async { (through_layer(n, spread).await, tokio_floor(n, spread).await) });
    // The bench binary of benchmarks/ reads these two lines by their prefix.
    report("timer lateness", &layer);
    report("floor lateness (tokio::time::sleep_until)", &floor);
}
