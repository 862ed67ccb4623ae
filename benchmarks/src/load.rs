//! Shared pieces of the CPU-per-request measures (`stdio_cpu`, figure 8 of
//! the `bench` binary) and of the HTTP servers they drive: the server
//! process's CPU time from `/proc/<pid>/stat`, medians, and one way to
//! serve an HTTP endpoint (the same for every server of figure 8).

use std::net::SocketAddr;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower service that hyper-util can serve, answering with body `B`:
/// what every HTTP server of the benchmarks is.
pub trait HttpService<B>:
    tower::Service<
        http::Request<Incoming>,
        Response = http::Response<B>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: tower::Service<
            http::Request<Incoming>,
            Response = http::Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + 'static
{
}

/// A response body that hyper-util can send.
pub trait HttpBody: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static {}

impl<B> HttpBody for B where B: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static {}

/// The length of one clock tick of `/proc/<pid>/stat` (`getconf CLK_TCK`,
/// 100 Hz when it cannot be read).
pub fn clock_tick() -> Duration {
    let hz: u32 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100);
    Duration::from_secs(1) / hz.max(1)
}

/// `utime + stime` of process `pid`, all its threads (fields 14 and 15 of
/// stat(5)); zero if the process is gone.
pub fn cpu_of(pid: u32, tick: Duration) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may contain spaces: start after its ")".
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split(' ').map(|s| s.parse().unwrap_or(0)).collect();
    // `rest` starts at field 3.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    tick * ticks as u32
}

/// The median (the upper one for an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The first three fields of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The runtime every HTTP server of figure 8 runs on: multi-threaded, 2
/// worker threads. Also installs the logging every server of the figure
/// has: a `tracing-subscriber` fmt subscriber on stderr, filtered by
/// `RUST_LOG` (default `warn`), as a production server would (and as the
/// example servers do). Without any subscriber, tracing's `log` feature
/// (on here through tower's and axum's defaults) makes every span compute
/// its field values for the `log` crate.
pub fn http_runtime() -> tokio::runtime::Runtime {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The address to listen on: `--listen ADDR` among the process's arguments,
/// else `127.0.0.1:0` (a free port).
pub fn listen_arg() -> SocketAddr {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .map(|a| a.parse().expect("--listen ADDR"))
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// Binds [`listen_arg`], prints `listening on http://ADDR/mcp` on stdout
/// (the driver reads it), and serves `svc` on every connection with
/// hyper-util's auto builder (HTTP/1.1, and HTTP/2 with prior knowledge),
/// `TCP_NODELAY` set, default settings otherwise. Never returns.
pub async fn serve_http<S: HttpService<B>, B: HttpBody>(svc: S) {
    let listener = TcpListener::bind(listen_arg()).await.expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    println!("listening on http://{addr}/mcp");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        spawn_connection(stream, svc.clone());
    }
}

/// Serves one accepted connection with `svc` on a task of its own:
/// `TCP_NODELAY` set, hyper-util's auto builder (HTTP/1.1, and HTTP/2 with
/// prior knowledge), default settings otherwise. Every HTTP server of the
/// benchmarks accepts through this.
pub fn spawn_connection<S: HttpService<B>, B: HttpBody>(stream: TcpStream, svc: S) {
    let _ = stream.set_nodelay(true);
    let svc = TowerToHyperService::new(svc);
    tokio::spawn(async move {
        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), svc)
            .await;
    });
}
