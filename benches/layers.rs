//! Per-call overhead of the layers against `tower::timeout::Timeout`, around
//! a ready `service_fn` (figures 1 and 2 of BENCHMARKS.md).
//!
//! `cargo bench --bench layers`
//!
//! For instruction counts, which do not depend on what else the machine is
//! doing: `LAYERS_PROFILE=<stack>:<calls>` runs exactly that many calls of
//! one stack (`bare`, `tower`, `timeout`, `full`) and exits, e.g.
//! `LAYERS_PROFILE=full:100000 valgrind --tool=callgrind target/release/deps/layers-…`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use tower::BoxError;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer};

type Value = serde_json::Value;

async fn ready_handler(_req: McpRequest) -> Result<Value, BoxError> {
    Ok(Value::Null)
}

/// Times `iters` calls inside one runtime entry, so the measurement is the
/// stack's cost and not `block_on`'s.
fn run<S>(rt: &tokio::runtime::Runtime, mut svc: S, iters: u64) -> Duration
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    rt.block_on(async move {
        let start = Instant::now();
        for i in 0..iters {
            let req = McpRequest::new(i as i64, "tools/call");
            let svc = svc.ready().await.unwrap();
            black_box(svc.call(req).await.unwrap());
        }
        start.elapsed()
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("per_call");
    g.bench_function("baseline: bare service_fn", |b| {
        b.iter_custom(|n| run(&rt, service_fn(ready_handler), n))
    });
    g.bench_function("tower::timeout::Timeout", |b| {
        b.iter_custom(|n| {
            let svc = ServiceBuilder::new()
                .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(30)))
                .service(service_fn(ready_handler));
            run(&rt, svc, n)
        })
    });
    g.bench_function("TimeoutLayer", |b| {
        b.iter_custom(|n| {
            let svc = ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .service(service_fn(ready_handler));
            run(&rt, svc, n)
        })
    });
    g.bench_function("full stack", |b| {
        b.iter_custom(|n| {
            let svc = ServiceBuilder::new()
                .layer(CancelOnDisconnectLayer::new())
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .layer(ProgressResetLayer::new(Duration::from_secs(10)))
                .service(service_fn(ready_handler));
            run(&rt, svc, n)
        })
    });
    g.finish();
}

/// Runs `calls` calls of one stack and exits (see the module docs).
fn profile(spec: &str) {
    let (stack, calls) = spec.split_once(':').unwrap_or((spec, "100000"));
    let calls: u64 = calls.parse().expect("LAYERS_PROFILE=<stack>:<calls>");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let took = match stack {
        "bare" => run(&rt, service_fn(ready_handler), calls),
        "tower" => run(
            &rt,
            ServiceBuilder::new()
                .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(30)))
                .service(service_fn(ready_handler)),
            calls,
        ),
        "timeout" => run(
            &rt,
            ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .service(service_fn(ready_handler)),
            calls,
        ),
        "full" => run(
            &rt,
            ServiceBuilder::new()
                .layer(CancelOnDisconnectLayer::new())
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .layer(ProgressResetLayer::new(Duration::from_secs(10)))
                .service(service_fn(ready_handler)),
            calls,
        ),
        other => panic!("unknown stack {other:?}: bare, tower, timeout or full"),
    };
    println!("{stack}: {calls} calls in {took:?}");
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(spec) = std::env::var("LAYERS_PROFILE") {
        profile(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
