//! The soak harness (issue 7, item 3), shared by `benches/soak.rs` (1 000 000
//! requests) and `tests/soak/main.rs` (20 000, in CI).
//!
//! Requests go through the real transports — the stdio driver and
//! `StdioClient` over an in-memory pipe, or `StreamableHttpService` on a
//! loopback HTTP/2 server and `HttpClient` — each under a client
//! `TimeoutLayer`. Each request draws its class from a seeded generator:
//!
//! * 30 % **cancelled**: the handler never answers; the client drops the
//!   call after a random delay (0–2 ms: before it was written, on its way,
//!   or while the handler runs). Nothing may come back for it.
//! * 10 % **timing out**: the handler never answers; a 20 ms per-request
//!   deadline fires on the client, which sends the cancellation.
//! * 60 % **answered**: the handler answers with the request's number; the
//!   answer must arrive exactly once and be that request's.
//!
//! Checks: zero lost (every answered-class request answered exactly once,
//! with its own result; every timeout-class one timed out), zero leaked
//! (handler futures alive, the server's in-flight registry, the client's
//! pending map and the calls outstanding all back to 0 at the end), and
//! resident memory (`VmRSS`) growing less than 10 % between the end of the
//! first window (100 000 requests, or a tenth of a shorter run) and the
//! end of the run.
// Shared by the soak test and bench; `pub` for them, not an API.
#![allow(unreachable_pub, missing_debug_implementations)]
#![allow(dead_code)]

use std::future::pending;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Elapsed, McpRequest, RequestTimeout, TimeoutLayer,
};

/// Which transport a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The stdio driver and `StdioClient` over an in-memory pipe.
    Stdio,
    /// `StreamableHttpService` over loopback HTTP/2 and `HttpClient`.
    Http,
}

/// A run's parameters.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many requests in all.
    pub requests: u64,
    /// How many in flight at once.
    pub concurrency: usize,
    /// The generator's seed.
    pub seed: u64,
}

impl Config {
    /// `requests` requests, 64 in flight, a fixed seed.
    pub fn new(requests: u64) -> Self {
        Self {
            requests,
            concurrency: 64,
            seed: 0x5eed,
        }
    }

    /// The RSS window: 100 000 requests, or a tenth of a shorter run.
    pub fn window(&self) -> u64 {
        (self.requests / 10).clamp(1, 100_000)
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The transport, as text.
    pub transport: String,
    /// Requests sent.
    pub requests: u64,
    /// Answered-class requests answered with their own result.
    pub answered: u64,
    /// Cancelled-class requests (dropped by the client).
    pub cancelled: u64,
    /// Timeout-class requests that timed out.
    pub timed_out: u64,
    /// Requests that did not end as their class says (lost, wrong answer,
    /// unexpected error, or an answer for a request that never gets one).
    pub lost: u64,
    /// Handler completions beyond one per answered request.
    pub extra_answers: i64,
    /// Handler futures still alive at the end.
    pub leaked_handlers: i64,
    /// Server in-flight registry entries left (stdio).
    pub leaked_registry: usize,
    /// Client pending entries left (stdio).
    pub leaked_client: usize,
    /// Calls still outstanding at the end.
    pub leaked_calls: i64,
    /// VmRSS at the end of the first window, KiB.
    pub rss_first_kib: u64,
    /// VmRSS at the end of the run, KiB.
    pub rss_last_kib: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The first few problems seen, for the message.
    pub problems: Vec<String>,
}

impl Report {
    /// RSS growth between the end of the first window and the end, in %.
    pub fn rss_growth_percent(&self) -> f64 {
        if self.rss_first_kib == 0 {
            return 0.0;
        }
        (self.rss_last_kib as f64 - self.rss_first_kib as f64) * 100.0 / self.rss_first_kib as f64
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// Every check of the soak, as one result.
    pub fn verdict(&self) -> Result<(), String> {
        let mut failed = Vec::new();
        if self.lost != 0 {
            failed.push(format!("{} lost", self.lost));
        }
        if self.extra_answers != 0 {
            failed.push(format!("{} extra handler answers", self.extra_answers));
        }
        if self.leaked_handlers != 0
            || self.leaked_registry != 0
            || self.leaked_client != 0
            || self.leaked_calls != 0
        {
            failed.push(format!(
                "leaked: {} handlers, {} registry, {} client pending, {} calls",
                self.leaked_handlers, self.leaked_registry, self.leaked_client, self.leaked_calls
            ));
        }
        if self.answered + self.cancelled + self.timed_out + self.lost != self.requests {
            failed.push("outcomes do not add up".into());
        }
        if !self.problems.is_empty() && self.lost == 0 {
            failed.push("problems".into());
        }
        if self.rss_growth_percent() >= 10.0 {
            failed.push(format!("RSS grew {:.1} %", self.rss_growth_percent()));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}: {}; {:?}",
                self.transport,
                failed.join(", "),
                self.problems
            ))
        }
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} requests in {:.1} s ({:.0}/s): {} answered, {} cancelled, {} timed out, {} lost; \
             leaked: {} handlers, {} registry, {} client, {} calls; VmRSS {} KiB -> {} KiB ({:+.1} %)",
            self.transport,
            self.requests,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.answered,
            self.cancelled,
            self.timed_out,
            self.lost,
            self.leaked_handlers,
            self.leaked_registry,
            self.leaked_client,
            self.leaked_calls,
            self.rss_first_kib,
            self.rss_last_kib,
            self.rss_growth_percent(),
        )
    }
}

/// Resident memory of this process, KiB (0 where `/proc` is missing).
pub fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A request's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Answered,
    /// Dropped by the client after this many microseconds.
    Cancelled(u64),
    TimesOut,
}

/// The per-request timeout of the timeout class, and the (never reached)
/// default deadline of the others.
const SHORT: Duration = Duration::from_millis(20);
const LONG: Duration = Duration::from_secs(60);

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn class_of(seed: u64, n: u64) -> Class {
    let r = splitmix(seed ^ splitmix(n));
    match r % 100 {
        0..30 => Class::Cancelled((r >> 32) % 2001),
        30..40 => Class::TimesOut,
        _ => Class::Answered,
    }
}

/// The server's gauges: handler futures alive, and answers given.
#[derive(Default)]
struct Gauges {
    alive: AtomicI64,
    answers: AtomicI64,
    calls: AtomicI64,
    idle: Notify,
}

struct Alive(Arc<Gauges>);

impl Drop for Alive {
    fn drop(&mut self) {
        if self.0.alive.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The server's handler: answers `{"n": n}`, or (for the cancelled and
/// timeout classes) never, so that only a cancellation ends it.
fn handler(gauges: Arc<Gauges>) -> BoxCloneService<McpRequest, Value, BoxError> {
    let svc = service_fn(move |req: McpRequest| {
        let gauges = gauges.clone();
        async move {
            gauges.alive.fetch_add(1, Ordering::AcqRel);
            let alive = Alive(gauges.clone());
            let params: Value = req.params_as().unwrap_or_default();
            let n = params["n"].as_u64().unwrap_or(u64::MAX);
            if params["hang"].as_bool().unwrap_or(false) {
                pending::<()>().await;
            }
            gauges.answers.fetch_add(1, Ordering::AcqRel);
            drop(alive);
            Ok::<_, BoxError>(json!({ "resultType": "complete", "n": n }))
        }
    });
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .service(svc),
    )
}

/// Waits (bounded) until no handler future is alive.
async fn handlers_idle(gauges: &Gauges, bound: Duration) {
    let _ = tokio::time::timeout(bound, async {
        loop {
            let idle = gauges.idle.notified();
            if gauges.alive.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    })
    .await;
}

/// Tallies of the client side.
#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    cancelled: AtomicU64,
    timed_out: AtomicU64,
    lost: AtomicU64,
    done: AtomicU64,
    problems: Mutex<Vec<String>>,
}

impl Tally {
    fn problem(&self, p: String) {
        self.lost.fetch_add(1, Ordering::AcqRel);
        let mut ps = self.problems.lock().unwrap();
        if ps.len() < 5 {
            ps.push(p);
        }
    }
}

/// Drives `cfg.requests` calls through `client` (a client transport under a
/// `TimeoutLayer`) and tallies them; samples RSS after the first window and
/// at the end.
async fn drive(
    cfg: &Config,
    client: BoxCloneService<McpRequest, Value, BoxError>,
) -> (Tally, u64, u64, i64, Duration) {
    let tally = Arc::new(Tally::default());
    let outstanding = Arc::new(AtomicI64::new(0));
    let sem = Arc::new(Semaphore::new(cfg.concurrency));
    let window = cfg.window();
    let rss_first = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..cfg.requests {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let class = class_of(cfg.seed, n);
        let mut req = McpRequest::new(n as i64, "tools/call").with_params(json!({
            "name": "soak",
            "n": n,
            "hang": class != Class::Answered,
        }));
        if class == Class::TimesOut {
            req = req.with_extension(RequestTimeout::after(SHORT));
        }
        let call = client.clone().oneshot(req);
        let tally = tally.clone();
        let outstanding = outstanding.clone();
        let rss_first = rss_first.clone();
        outstanding.fetch_add(1, Ordering::AcqRel);
        tasks.spawn(async move {
            let out = match class {
                Class::Cancelled(us) => {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_micros(us)) => None,
                        out = call => Some(out),
                    }
                }
                _ => Some(call.await),
            };
            match (class, out) {
                (Class::Cancelled(_), None) => {
                    tally.cancelled.fetch_add(1, Ordering::AcqRel);
                }
                (Class::Cancelled(_), Some(out)) => {
                    tally.problem(format!("cancelled-class request {n} ended with {out:?}"))
                }
                (Class::TimesOut, Some(Err(e))) if e.is::<Elapsed>() => {
                    tally.timed_out.fetch_add(1, Ordering::AcqRel);
                }
                (Class::Answered, Some(Ok(v))) if v["n"].as_u64() == Some(n) => {
                    tally.answered.fetch_add(1, Ordering::AcqRel);
                }
                (class, out) => tally.problem(format!("{class:?} request {n} ended with {out:?}")),
            }
            outstanding.fetch_sub(1, Ordering::AcqRel);
            let done = tally.done.fetch_add(1, Ordering::AcqRel) + 1;
            if done == window {
                rss_first.store(vm_rss_kib(), Ordering::Release);
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let elapsed = started.elapsed();
    let rss_last = vm_rss_kib();
    let tally = Arc::try_unwrap(tally).unwrap_or_else(|_| panic!("tally still shared"));
    (
        tally,
        rss_first.load(Ordering::Acquire),
        rss_last,
        outstanding.load(Ordering::Acquire),
        elapsed,
    )
}

fn report(
    transport: &str,
    cfg: &Config,
    gauges: &Gauges,
    (tally, rss_first, rss_last, outstanding, elapsed): (Tally, u64, u64, i64, Duration),
) -> Report {
    let answered = tally.answered.load(Ordering::Acquire);
    Report {
        transport: transport.into(),
        requests: cfg.requests,
        answered,
        cancelled: tally.cancelled.load(Ordering::Acquire),
        timed_out: tally.timed_out.load(Ordering::Acquire),
        lost: tally.lost.load(Ordering::Acquire),
        extra_answers: gauges.answers.load(Ordering::Acquire) - answered as i64,
        leaked_handlers: gauges.alive.load(Ordering::Acquire),
        leaked_calls: outstanding,
        rss_first_kib: rss_first,
        rss_last_kib: rss_last,
        elapsed,
        problems: tally.problems.into_inner().unwrap(),
        ..Report::default()
    }
}

/// A client stack: the per-request deadline of the timeout class, a long
/// default for the others.
fn client_stack<S>(transport: S) -> BoxCloneService<McpRequest, Value, BoxError>
where
    S: tower::Service<McpRequest, Response = Value, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(LONG))
            .service(transport),
    )
}

/// The soak over stdio: the driver and `StdioClient` over an in-memory pipe.
pub async fn run_stdio(cfg: &Config) -> Report {
    use tower_mcp_cancel::cancel::InFlight;
    use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};

    let gauges = Arc::new(Gauges::default());
    let registry = InFlight::new();
    let (client_io, server_io) = tokio::io::duplex(256 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let (cr, cw) = tokio::io::split(client_io);
    let served = tokio::spawn(StdioServer::new().in_flight(registry.clone()).serve(
        handler(gauges.clone()),
        sr,
        sw,
    ));
    let client = StdioClient::new(cr, cw);
    let driven = drive(cfg, client_stack(client.clone())).await;
    // The last cancellations are on their way: wait (bounded) for their
    // handlers to be dropped, then for the registry entries to go.
    handlers_idle(&gauges, Duration::from_secs(10)).await;
    // A request leaves the registry once its end is queued, on the server's
    // tasks: give them the CPU until it is empty, bounded by wall time (a
    // count of yields is no bound on a loaded machine).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !registry.is_empty() && std::time::Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    let mut r = report("stdio", cfg, &gauges, driven);
    r.leaked_registry = registry.len();
    r.leaked_client = client.in_flight();
    client.shutdown().await.expect("client shutdown");
    match tokio::time::timeout(Duration::from_secs(10), served).await {
        Ok(Ok(Ok(()))) => {}
        other => r.problems.push(format!("serve ended with {other:?}")),
    }
    r
}

/// The soak over Streamable HTTP: `StreamableHttpService` on a loopback
/// HTTP/2 server (hyper) and `HttpClient` (HTTP/2 prior knowledge, so a
/// cancel resets one stream instead of closing a connection).
pub async fn run_http(cfg: &Config) -> Report {
    use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};

    let gauges = Arc::new(Gauges::default());
    let svc = StreamableHttpService::new(handler(gauges.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            c2.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(serve_h2(svc.clone(), stream));
        }
    });
    let uri: http::Uri = format!("http://{addr}/mcp").parse().expect("uri");
    let client = HttpClient::builder(uri).http2_prior_knowledge().build();
    let driven = drive(cfg, client_stack(client)).await;
    handlers_idle(&gauges, Duration::from_secs(10)).await;
    let mut r = report("http", cfg, &gauges, driven);
    if conns.load(Ordering::Acquire) > 16 {
        r.problems.push(format!(
            "{} connections opened (cancels should reset streams, not connections)",
            conns.load(Ordering::Acquire)
        ));
    }
    server.abort();
    r
}

/// How many streams the client may reset before the server accepted them,
/// per connection (h2's default is 20): the calls in flight, twice over.
const RESET_ALLOWANCE: usize = 1024;

/// Serves one HTTP/2 connection (generic, so that the service's error type
/// is named once).
async fn serve_h2<S, B>(svc: S, stream: tokio::net::TcpStream)
where
    S: tower::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let hyper_svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
    let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    b.max_concurrent_streams(1024);
    // A cancelled MCP call over HTTP/2 is a stream reset (RST_STREAM). h2's
    // rapid-reset guard answers more than 20 streams reset before the
    // server accepted them with GOAWAY ENHANCE_YOUR_CALM "too_many_resets",
    // failing every other call on the connection: at 30 % cancellations
    // that happens within the first few hundred calls. A server for MCP
    // clients that cancel has to allow for that (see BENCHMARKS.md, "Soak").
    b.max_pending_accept_reset_streams(RESET_ALLOWANCE);
    let _ = b.serve_connection(TokioIo::new(stream), hyper_svc).await;
}

/// Runs `transport` and returns its report.
pub async fn run(transport: Transport, cfg: &Config) -> Report {
    match transport {
        Transport::Stdio => run_stdio(cfg).await,
        Transport::Http => run_http(cfg).await,
    }
}
