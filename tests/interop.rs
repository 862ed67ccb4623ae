//! Interop with the official MCP SDKs (TypeScript 2.4.0, Python mcp 2.3.0):
//! each cell of the matrix in `tests/interop/README.md` is one test here.
//!
//! The SDK packages are installed (idempotently) by `tests/interop/install.sh`
//! on first use; `.ci/run` runs it up front. The example servers are the ones
//! `cargo test` builds (`target/<profile>/examples/`).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn interop_dir() -> PathBuf {
    root().join("tests/interop")
}

/// Runs install.sh once per test binary.
fn install() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let st = Command::new("bash")
            .arg(interop_dir().join("install.sh"))
            .status()
            .expect("run tests/interop/install.sh");
        assert!(st.success(), "tests/interop/install.sh failed");
    });
}

/// An example binary built by `cargo test`.
fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/interop-<hash> → target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(p.exists(), "example {name} not built at {}", p.display());
    p
}

fn python() -> PathBuf {
    interop_dir().join(".venv/bin/python")
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sdk {
    Ts,
    Py,
}

impl Sdk {
    fn client(self) -> Command {
        match self {
            Sdk::Ts => {
                let mut c = Command::new("node");
                c.arg(interop_dir().join("ts/client.mjs"));
                c
            }
            Sdk::Py => {
                let mut c = Command::new(python());
                c.arg(interop_dir().join("py/client.py"));
                c
            }
        }
    }

    fn server(self) -> Command {
        match self {
            Sdk::Ts => {
                let mut c = Command::new("node");
                c.arg(interop_dir().join("ts/server.mjs"));
                c
            }
            Sdk::Py => {
                let mut c = Command::new(python());
                c.arg(interop_dir().join("py/server.py"));
                c
            }
        }
    }
}

/// A child process killed on drop.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (bounded) until something accepts connections on `port`.
fn wait_listening(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "server exited before listening"
        );
        assert!(
            Instant::now() < deadline,
            "server did not listen on {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Our HTTP example server on a free port, stderr to a file.
struct OurHttpServer {
    _child: Kill,
    url: String,
    stderr: PathBuf,
}

fn our_http_server(tag: &str) -> OurHttpServer {
    our_http_server_with("http_server", tag)
}

/// [`our_http_server`] with an example other than `http_server`.
fn our_http_server_with(example_name: &str, tag: &str) -> OurHttpServer {
    let port = free_port();
    let stderr =
        std::env::temp_dir().join(format!("tmc-interop-{tag}-{}.stderr", std::process::id()));
    let mut child = Command::new(example(example_name))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--events"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("spawn the HTTP example server");
    wait_listening(port, &mut child);
    OurHttpServer {
        _child: Kill(child),
        url: format!("http://127.0.0.1:{port}/mcp"),
        stderr,
    }
}

struct Run {
    out: Value,
    /// The client's stderr (on stdio this includes our server's stderr).
    stderr: String,
    /// Our stdio server's stdout as the client saw it: (pid, ns, line).
    stdout_log: Vec<(u32, i64, Value)>,
}

/// Runs one SDK client scenario against our stdio or HTTP server.
fn run_client(sdk: Sdk, scenario: &str, http: Option<&str>, extra: &[&str]) -> Run {
    run_client_with("stdio_server", sdk, scenario, http, extra)
}

/// [`run_client`] with the stdio server an example other than `stdio_server`.
fn run_client_with(
    stdio_server: &str,
    sdk: Sdk,
    scenario: &str,
    http: Option<&str>,
    extra: &[&str],
) -> Run {
    install();
    let tag = format!(
        "{sdk:?}-{scenario}-{}-{}",
        if http.is_some() { "http" } else { "stdio" },
        now_ns()
    );
    let log = std::env::temp_dir().join(format!("tmc-interop-{tag}.stdout"));
    let mut cmd = sdk.client();
    cmd.arg(scenario).args(extra);
    match http {
        Some(url) => {
            cmd.args(["--url", url]);
        }
        None => {
            cmd.arg("--")
                .arg(python())
                .arg(interop_dir().join("tap_stdout.py"))
                .arg(&log)
                .arg("--")
                .arg(example(stdio_server))
                .arg("--events");
        }
    }
    let out = run_bounded(cmd, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "{tag}: no JSON result line; status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                out.status
            )
        });
    let json: Value = serde_json::from_str(line).expect("client result is JSON");
    assert!(
        out.status.success() && json["ok"] == true,
        "{tag}: SDK client reported failure: {json}\nstderr:\n{stderr}"
    );
    let stdout_log = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let pid = it.next()?.parse().ok()?;
            let ns = it.next()?.parse().ok()?;
            let v = serde_json::from_str(it.next()?).ok()?;
            Some((pid, ns, v))
        })
        .collect();
    let _ = std::fs::remove_file(&log);
    Run {
        out: json,
        stderr,
        stdout_log,
    }
}

fn run_bounded(mut cmd: Command, limit: Duration) -> std::process::Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn SDK client");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for SDK client"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("SDK client did not finish within {limit:?}");
        }
    }
}

/// The id of the `slow` call: the one the client's `notifications/cancelled`
/// names (stdio), else the `tools/call` between the warm-up echo and the
/// echo the driver makes after the cancel.
fn slow_call_id(out: &Value) -> Value {
    let wire = out["wire_out"].as_array().expect("wire_out");
    if let Some(c) = wire
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
    {
        return c["params"]["requestId"].clone();
    }
    let calls: Vec<&Value> = wire
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| &m["id"])
        .collect();
    assert!(
        calls.len() >= 3,
        "warm-up, slow and post-cancel calls in wire_out: {wire:?}"
    );
    calls[calls.len() - 2].clone()
}

/// `KIND <id JSON> <ns>` event lines for `id`.
fn events(stderr: &str, kind: &str, id: &Value) -> Vec<i64> {
    let id = id.to_string();
    stderr
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == kind && it.next()? == id).then(|| it.next()?.parse().ok())?
        })
        .collect()
}

/// The cancel signal time: the `notifications/cancelled` the client wrote
/// (stdio), else when it gave up / aborted.
fn cancel_time(out: &Value) -> i64 {
    let from_wire = out["wire_out"].as_array().and_then(|w| {
        w.iter()
            .find(|m| m["method"] == "notifications/cancelled")
            .and_then(|m| m["t_ns"].as_i64())
    });
    from_wire
        .or(out["t_abort_ns"].as_i64())
        .or(out["t_gave_up_ns"].as_i64())
        .expect("a cancel time")
}

/// The bound within which our server must drop the handler after the cancel
/// signal left the client. Generous for a loaded CI machine; measured values
/// are in BENCHMARKS.md.
const DROP_BOUND: Duration = Duration::from_millis(500);

/// Our server dropped the slow handler within DROP_BOUND of the cancel and
/// (stdio) wrote nothing for that id afterwards.
fn check_cancelled(run: &Run, server_stderr: &str, stdio: bool) {
    let id = slow_call_id(&run.out);
    let dropped = events(server_stderr, "DROPPED", &id);
    assert_eq!(
        dropped.len(),
        1,
        "exactly one DROPPED event for {id}; stderr:\n{server_stderr}"
    );
    assert!(
        events(server_stderr, "DONE", &id).is_empty(),
        "the handler did not also complete"
    );
    let t_cancel = cancel_time(&run.out);
    let latency = dropped[0] - t_cancel;
    assert!(
        latency < DROP_BOUND.as_nanos() as i64,
        "handler dropped {} ms after the cancel (bound {DROP_BOUND:?})",
        latency / 1_000_000
    );
    eprintln!("cancel → handler dropped: {:.3} ms", latency as f64 / 1e6);
    if stdio {
        // Nothing for that id after the drop: no response at all, no progress
        // later than the drop (a line already in the pipe at the drop may be
        // read just after it: allow 50 ms, well under the 100 ms progress step).
        let token = id.clone();
        for (_, ns, msg) in &run.stdout_log {
            assert!(
                msg["id"] != id,
                "a response for cancelled id {id} was written: {msg}"
            );
            if msg["method"] == "notifications/progress" && msg["params"]["progressToken"] == token
            {
                assert!(
                    *ns < dropped[0] + 50_000_000,
                    "progress for {id} after its cancel: {msg}"
                );
            }
        }
        assert!(!run.stdout_log.is_empty(), "the stdout tap saw the session");
    }
}

fn check_progress(run: &Run) {
    let p: Vec<f64> = run.out["progress"]
        .as_array()
        .expect("progress list")
        .iter()
        .map(|p| {
            p["progress"]
                .as_f64()
                .or(p.as_f64())
                .expect("progress value")
        })
        .collect();
    assert!(!p.is_empty(), "progress seen");
    assert!(
        p.windows(2).all(|w| w[1] > w[0]),
        "strictly increasing: {p:?}"
    );
}

macro_rules! server_cells {
    ($($name:ident: $sdk:expr, $http:expr, $scenario:literal;)*) => {$(
        #[test]
        fn $name() {
            let server = if $http { Some(our_http_server(stringify!($name))) } else { None };
            let run = run_client($sdk, $scenario, server.as_ref().map(|s| s.url.as_str()), &[]);
            let server_stderr = match &server {
                Some(s) => std::fs::read_to_string(&s.stderr).unwrap(),
                None => run.stderr.clone(),
            };
            match $scenario {
                "basic" => {}
                "timeout" | "cancel" => check_cancelled(&run, &server_stderr, !$http),
                "progress" | "progress_reset" => check_progress(&run),
                other => unreachable!("{other}"),
            }
        }
    )*};
}

// Our example servers driven by each SDK's client.
server_cells! {
    ours_stdio_ts_basic: Sdk::Ts, false, "basic";
    ours_stdio_ts_timeout: Sdk::Ts, false, "timeout";
    ours_stdio_ts_cancel: Sdk::Ts, false, "cancel";
    ours_stdio_ts_progress: Sdk::Ts, false, "progress";
    ours_stdio_ts_progress_reset: Sdk::Ts, false, "progress_reset";
    ours_stdio_py_basic: Sdk::Py, false, "basic";
    ours_stdio_py_timeout: Sdk::Py, false, "timeout";
    ours_stdio_py_cancel: Sdk::Py, false, "cancel";
    ours_stdio_py_progress: Sdk::Py, false, "progress";
    ours_http_ts_basic: Sdk::Ts, true, "basic";
    ours_http_ts_timeout: Sdk::Ts, true, "timeout";
    ours_http_ts_cancel: Sdk::Ts, true, "cancel";
    ours_http_ts_progress: Sdk::Ts, true, "progress";
    ours_http_ts_progress_reset: Sdk::Ts, true, "progress_reset";
    ours_http_py_basic: Sdk::Py, true, "basic";
    ours_http_py_timeout: Sdk::Py, true, "timeout";
    ours_http_py_cancel: Sdk::Py, true, "cancel";
    ours_http_py_progress: Sdk::Py, true, "progress";
}

// The rmcp example server (rmcp + `integrations::rmcp`) in the same cells,
// and an rmcp client under the layers.
#[cfg(feature = "rmcp")]
#[path = "interop/rmcp.rs"]
mod rmcp;

// ---------- our clients driving each SDK's server ----------

mod our_clients {
    use super::*;
    use tower::{Service, ServiceBuilder, ServiceExt};
    use tower_mcp_cancel::transport::http::HttpClient;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    use tower_mcp_cancel::{
        BoxError, Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
    };

    type Client = tower::util::BoxCloneService<McpRequest, Value, BoxError>;

    /// An SDK server and our client to it, plus where its stderr goes.
    struct Peer {
        client: Client,
        stderr: PathBuf,
        _child: Option<Kill>,
        _stdio: Option<StdioClient>,
    }

    async fn peer(sdk: Sdk, http: bool, tag: &str) -> Peer {
        install();
        let stderr =
            std::env::temp_dir().join(format!("tmc-interop-sdk-{tag}-{}.stderr", now_ns()));
        if http {
            let port = free_port();
            let mut cmd = sdk.server();
            cmd.args(["--http", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap());
            let mut child = cmd.spawn().expect("spawn SDK server");
            wait_listening(port, &mut child);
            let client = HttpClient::new(format!("http://127.0.0.1:{port}/mcp").parse().unwrap());
            Peer {
                client: Client::new(client),
                stderr,
                _child: Some(Kill(child)),
                _stdio: None,
            }
        } else {
            let std_cmd = sdk.server();
            let mut cmd = tokio::process::Command::from(std_cmd);
            cmd.stderr(std::fs::File::create(&stderr).unwrap());
            let client = StdioClient::spawn(cmd).expect("spawn SDK server over stdio");
            Peer {
                client: Client::new(client.clone()),
                stderr,
                _child: None,
                _stdio: Some(client),
            }
        }
    }

    fn call(name: &str, args: Value) -> McpRequest {
        McpRequest::without_id("tools/call").with_params(serde_json::json!({
            "name": name,
            "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "tower-mcp-cancel-interop", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }))
    }

    async fn warm_up(client: &mut Client) {
        let v = client
            .ready()
            .await
            .unwrap()
            .call(call("echo", serde_json::json!({"text": "warm"})))
            .await;
        let v = v.unwrap_or_else(|e| panic!("warm-up echo failed: {e}"));
        assert_eq!(v["content"][0]["text"], "warm", "echo result: {v}");
    }

    /// Waits (bounded) until the SDK server's stderr has a line matching `pred`.
    pub(super) async fn wait_for_line(path: &Path, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(f) = std::fs::File::open(path) {
                if let Some(l) = BufReader::new(f)
                    .lines()
                    .map_while(Result::ok)
                    .find(|l| pred(l))
                {
                    return l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no matching line in {} within 10 s",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn is_cancel_line(l: &str) -> bool {
        l.starts_with("CANCELLED ") || l.starts_with("HTTP_CLOSE ")
    }

    // 5. A call past the idle limit succeeds because progress resets it.
    async fn progress_resets(sdk: Sdk, http: bool) {
        let Peer {
            client,
            _child,
            _stdio,
            ..
        } = peer(sdk, http, "reset").await;
        let mut client = client;
        warm_up(&mut client).await;
        let mut svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(30)))
            .layer(ProgressResetLayer::new(Duration::from_millis(700)).max(Duration::from_secs(20)))
            .service(client);
        let t = Instant::now();
        let v = svc
            .ready()
            .await
            .unwrap()
            .call(call(
                "slow",
                serde_json::json!({"seconds": 2, "interval_ms": 100}),
            ))
            .await
            .unwrap_or_else(|e| panic!("slow under progress reset failed: {e}"));
        assert!(
            t.elapsed() > Duration::from_millis(1900),
            "the call really ran past the idle limit"
        );
        assert!(v.get("content").is_some(), "a tool result: {v}");
    }

    // 6/7. A fixed timeout, or the hard maximum while progress keeps coming:
    // the SDK server observes the cancellation.
    async fn server_observes_cancel(sdk: Sdk, http: bool, limit: Limit) {
        let Peer {
            client,
            stderr,
            _child,
            _stdio,
        } = peer(sdk, http, "cancel").await;
        let mut client = client;
        warm_up(&mut client).await;
        let mut svc = match limit {
            Limit::Timeout => ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(1)))
                .layer(
                    ProgressResetLayer::new(Duration::from_secs(10)).max(Duration::from_secs(20)),
                )
                .service(client)
                .boxed_clone(),
            _ => ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .layer(
                    ProgressResetLayer::new(Duration::from_millis(500))
                        .max(Duration::from_millis(1500)),
                )
                .service(client)
                .boxed_clone(),
        };
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(call(
                "slow",
                serde_json::json!({"seconds": 6, "interval_ms": 100}),
            ))
            .await
            .expect_err("the limit fires");
        let e = err
            .downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("Elapsed, got {err}"));
        assert_eq!(e.limit(), limit);
        let t_gave_up = now_ns();
        let line = wait_for_line(&stderr, is_cancel_line).await;
        let ns: i64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(
            ns - t_gave_up < DROP_BOUND.as_nanos() as i64,
            "SDK server saw the cancel late: {line}"
        );
        if !http {
            // stdio: it received our notifications/cancelled, with a reason.
            let received = wait_for_line(&stderr, |l| l.starts_with("RECEIVED_CANCEL ")).await;
            let expect = match limit {
                Limit::Timeout => "timed out",
                _ => "maximum",
            };
            assert!(
                received.contains(expect),
                "reason names the limit: {received}"
            );
        }
    }

    // 8. A late response after our cancel is ignored by our client.
    async fn late_response_ignored(sdk: Sdk, http: bool) {
        let Peer {
            client,
            _child,
            _stdio,
            ..
        } = peer(sdk, http, "late").await;
        let mut client = client;
        warm_up(&mut client).await;
        for i in 0..20 {
            // A zero deadline: the request goes out and is cancelled at once; the
            // server may well have answered already.
            let mut hasty = ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::ZERO))
                .service(client.clone());
            let r = hasty
                .ready()
                .await
                .unwrap()
                .call(call("echo", serde_json::json!({"text": "late"})))
                .await;
            assert!(r.is_err() || r.as_ref().unwrap()["content"][0]["text"] == "late");
            let text = format!("after-{i}");
            let v = client
                .ready()
                .await
                .unwrap()
                .call(call("echo", serde_json::json!({"text": text})))
                .await
                .unwrap_or_else(|e| panic!("the next call after a cancelled one failed: {e}"));
            assert_eq!(
                v["content"][0]["text"], text,
                "each caller gets its own response"
            );
        }
    }

    pub(super) fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    macro_rules! client_cells {
        ($($name:ident: $body:expr;)*) => {$(
            #[test]
            fn $name() {
                rt().block_on(async { tokio::time::timeout(Duration::from_secs(60), $body).await.expect("cell finished in 60 s") });
            }
        )*};
    }

    client_cells! {
        sdk_ts_stdio_progress_resets: progress_resets(Sdk::Ts, false);
        sdk_ts_stdio_timeout_cancels: server_observes_cancel(Sdk::Ts, false, Limit::Timeout);
        sdk_ts_stdio_max_cancels: server_observes_cancel(Sdk::Ts, false, Limit::Max);
        sdk_ts_stdio_late_response_ignored: late_response_ignored(Sdk::Ts, false);
        sdk_py_stdio_progress_resets: progress_resets(Sdk::Py, false);
        sdk_py_stdio_timeout_cancels: server_observes_cancel(Sdk::Py, false, Limit::Timeout);
        sdk_py_stdio_max_cancels: server_observes_cancel(Sdk::Py, false, Limit::Max);
        sdk_py_stdio_late_response_ignored: late_response_ignored(Sdk::Py, false);
        sdk_ts_http_progress_resets: progress_resets(Sdk::Ts, true);
        sdk_ts_http_timeout_cancels: server_observes_cancel(Sdk::Ts, true, Limit::Timeout);
        sdk_ts_http_max_cancels: server_observes_cancel(Sdk::Ts, true, Limit::Max);
        sdk_ts_http_late_response_ignored: late_response_ignored(Sdk::Ts, true);
        sdk_py_http_progress_resets: progress_resets(Sdk::Py, true);
        sdk_py_http_timeout_cancels: server_observes_cancel(Sdk::Py, true, Limit::Timeout);
        sdk_py_http_max_cancels: server_observes_cancel(Sdk::Py, true, Limit::Max);
        sdk_py_http_late_response_ignored: late_response_ignored(Sdk::Py, true);
    }
}

// Streamable HTTP across the eras (legacy sessions, dual-era client, HTTPS).
#[path = "interop/legacy_http.rs"]
mod legacy_http;
