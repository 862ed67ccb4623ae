//! Timer lateness with 10 000 concurrent deadlines (figure 7 of
//! BENCHMARKS.md): 10 000 requests through `TimeoutLayer`, each with its own
//! deadline spread over one second, on the multi-threaded runtime; for each,
//! (time the inner future was dropped − its deadline).
//!
//! `cargo bench --bench timer_lateness` (pass `--smoke` for a tiny run)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{BoxError, McpRequest, RequestTimeout, TimeoutLayer};

struct OnDrop(Arc<Mutex<Vec<Duration>>>, Instant);
impl Drop for OnDrop {
    fn drop(&mut self) {
        let late = Instant::now().saturating_duration_since(self.1);
        self.0.lock().unwrap().push(late);
    }
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
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(n)));
    rt.block_on(async {
        let svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(60)))
            .service(service_fn(|req: McpRequest| {
                let probe = req
                    .extensions()
                    .get::<Arc<Mutex<Option<OnDrop>>>>()
                    .cloned();
                async move {
                    let _p = probe.and_then(|p| p.lock().unwrap().take());
                    std::future::pending::<()>().await;
                    Ok::<_, BoxError>(serde_json::Value::Null)
                }
            }));
        let base = Instant::now() + Duration::from_millis(100);
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let deadline = base + spread.mul_f64(i as f64 / n as f64);
            let limit = deadline - Instant::now();
            let probe = Arc::new(Mutex::new(Some(OnDrop(lateness.clone(), deadline))));
            let req = McpRequest::new(i as i64, "tools/call")
                .with_extension(RequestTimeout::after(limit))
                .with_extension(probe);
            let mut svc = svc.clone();
            tasks.push(tokio::spawn(async move {
                let _ = svc.ready().await.unwrap().call(req).await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let mut v = lateness.lock().unwrap().clone();
    v.sort();
    let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    println!(
        "timer lateness, {} concurrent deadlines: p50 {:?}  p99 {:?}  max {:?}",
        v.len(),
        pct(0.50),
        pct(0.99),
        v[v.len() - 1]
    );
}
