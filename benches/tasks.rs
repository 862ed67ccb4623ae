//! Tasks (BENCHMARKS.md figure 10): `tasks/cancel` → the task's handler
//! future dropped (p50 / p99), `tasks/get` requests per second and CPU per
//! request against a baseline measured in the same run (a `ping` through
//! the same stack), and the bytes one live task holds.
//!
//! In process, through `TasksLayer` alone, and over Streamable HTTP on
//! loopback (`HttpClient` → `serve` → `StreamableHttpService` →
//! `TasksLayer`), on tokio's multi-threaded runtime with 2 workers.
//!
//! `cargo bench --features tasks,http --bench tasks` (`--smoke` for a tiny run)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::tasks::{MemoryStore, TaskPolicy, TasksLayer, EXTENSION};
use tower_mcp_cancel::transport::http::{serve, HttpClient, StreamableHttpService};
use tower_mcp_cancel::McpRequest;

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Sends the instant its handler future was dropped.
struct OnDrop(mpsc::UnboundedSender<Instant>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Instant::now());
    }
}

type Svc = BoxCloneSyncService<McpRequest, Value, BoxError>;

/// The tasks layer over a handler: `wait` never ends (until dropped),
/// anything else answers at once.
fn server(drops: mpsc::UnboundedSender<Instant>) -> (Svc, TasksLayer) {
    let tasks = TasksLayer::with_store(MemoryStore::with_capacity(1 << 20))
        .tool("wait", TaskPolicy::optional())
        .max_tasks(1 << 20);
    let svc = ServiceBuilder::new()
        .layer(tasks.clone())
        .service(service_fn(move |req: McpRequest| {
            let probe = (req.method() == "tools/call").then(|| OnDrop(drops.clone()));
            async move {
                if let Some(probe) = probe {
                    std::future::pending::<()>().await;
                    drop(probe);
                }
                Ok::<_, BoxError>(json!({"resultType": "complete"}))
            }
        }))
        .map_response(|r| serde_json::to_value(r).unwrap());
    (BoxCloneSyncService::new(svc), tasks)
}

fn meta() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}})
}

fn create_req() -> McpRequest {
    McpRequest::without_id("tools/call")
        .with_params(json!({"name": "wait", "arguments": {}, "_meta": meta()}))
}

fn task_req(method: &str, id: &str) -> McpRequest {
    McpRequest::without_id(method).with_params(json!({"taskId": id, "_meta": meta()}))
}

async fn send<S>(svc: &mut S, req: McpRequest) -> Value
where
    S: Service<McpRequest, Response = Value>,
    S::Error: std::fmt::Debug,
{
    svc.ready().await.unwrap().call(req).await.unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name}: {} samples, p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().unwrap()
    );
}

/// `tasks/cancel` sent → handler future dropped, one task at a time.
async fn cancel_to_drop<S>(
    client: &mut S,
    drops: &mut mpsc::UnboundedReceiver<Instant>,
    n: usize,
) -> Vec<Duration>
where
    S: Service<McpRequest, Response = Value>,
    S::Error: std::fmt::Debug,
{
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let created = send(client, create_req()).await;
        let id = created["taskId"].as_str().unwrap().to_owned();
        let start = Instant::now();
        send(client, task_req("tasks/cancel", &id)).await;
        let dropped = drops.recv().await.unwrap();
        samples.push(dropped.saturating_duration_since(start));
    }
    samples
}

/// CPU time of this process (user + system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// `n` sequential calls of `make()`: requests per second, CPU per request.
async fn rate<S>(client: &mut S, n: usize, make: impl Fn() -> McpRequest) -> (f64, Duration)
where
    S: Service<McpRequest, Response = Value>,
    S::Error: std::fmt::Debug,
{
    let (wall, cpu) = (Instant::now(), cpu_time());
    for _ in 0..n {
        send(client, make()).await;
    }
    let (wall, cpu) = (wall.elapsed(), cpu_time().saturating_sub(cpu));
    (
        n as f64 / wall.as_secs_f64(),
        Duration::from_secs_f64(cpu.as_secs_f64() / n as f64),
    )
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (cancels, gets, live) = if smoke {
        (20, 2_000, 1_000)
    } else {
        (2_000, 200_000, 10_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        // In process.
        let (tx, mut drops) = mpsc::unbounded_channel();
        let (mut svc, _tasks) = server(tx);
        report("in process: tasks/cancel -> handler dropped", cancel_to_drop(&mut svc, &mut drops, cancels).await);
        let created = send(&mut svc, create_req()).await;
        let id = created["taskId"].as_str().unwrap().to_owned();
        for (name, req) in [("ping (baseline)", "ping"), ("tasks/get", "tasks/get")] {
            let id = id.clone();
            let (rps, cpu) = rate(&mut svc, gets, move || match req {
                "ping" => McpRequest::without_id("ping"),
                _ => task_req("tasks/get", &id),
            })
            .await;
            println!("in process: {name}: {rps:.0} requests/s, {cpu:?} CPU per request");
        }

        // Bytes per live task.
        let (tx, _drops) = mpsc::unbounded_channel();
        let (mut svc, tasks) = server(tx);
        send(&mut svc, create_req()).await; // warm up the maps
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        for _ in 0..live {
            send(&mut svc, create_req()).await;
        }
        let after = LIVE_BYTES.load(Ordering::Relaxed);
        assert_eq!(tasks.handle().running(), live + 1);
        println!("live tasks: {} bytes per task ({live} tasks, record + executor + future)", (after - before) / live as isize);
        drop(svc);

        // Over Streamable HTTP on loopback.
        let (tx, mut drops) = mpsc::unbounded_channel();
        let (svc, _tasks) = server(tx);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let endpoint = StreamableHttpService::new(svc);
        tokio::spawn(serve(listener, endpoint, shutdown.clone()));
        let mut client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
        report("HTTP loopback: tasks/cancel -> handler dropped", cancel_to_drop(&mut client, &mut drops, cancels / 2).await);
        let created = send(&mut client, create_req()).await;
        let id = created["taskId"].as_str().unwrap().to_owned();
        let n = gets / 20;
        for (name, req) in [("ping (baseline)", "ping"), ("tasks/get", "tasks/get")] {
            let id = id.clone();
            let (rps, cpu) = rate(&mut client, n, move || match req {
                "ping" => McpRequest::without_id("ping"),
                _ => task_req("tasks/get", &id),
            })
            .await;
            println!("HTTP loopback: {name}: {rps:.0} requests/s, {cpu:?} CPU per request (client and server)");
        }
        shutdown.cancel();
    });
}
