//! What the interop cells share: the SDK drivers and their packages, our
//! example servers as child processes, the checks of a cancel and of
//! progress. Used by `tests/interop.rs` and by the rmcp package's
//! `tests/interop.rs`, each of which uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The repository's `tests/interop` (the SDK drivers, their packages):
/// the including package's own, or that of the workspace it is in.
pub(crate) fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("tests/interop"))
        .find(|dir| dir.join("install.sh").is_file())
        .expect("tests/interop/install.sh in this package or above it")
}

/// Runs install.sh once per test binary.
pub(crate) fn install() {
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
pub(crate) fn example(name: &str) -> PathBuf {
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

pub(crate) fn python() -> PathBuf {
    interop_dir().join(".venv/bin/python")
}

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Sdk {
    Ts,
    Py,
}

impl Sdk {
    pub(crate) fn client(self) -> Command {
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

    pub(crate) fn server(self) -> Command {
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
pub(crate) struct Kill(pub(crate) Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (bounded) until something accepts connections on `port`.
pub(crate) fn wait_listening(port: u16, child: &mut Child) {
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
pub(crate) struct OurHttpServer {
    pub(crate) _child: Kill,
    pub(crate) url: String,
    pub(crate) stderr: PathBuf,
}

pub(crate) fn our_http_server(tag: &str) -> OurHttpServer {
    our_http_server_with("http_server", tag)
}

/// [`our_http_server`] with an example other than `http_server`.
pub(crate) fn our_http_server_with(example_name: &str, tag: &str) -> OurHttpServer {
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

pub(crate) struct Run {
    pub(crate) out: Value,
    /// The client's stderr (on stdio this includes our server's stderr).
    pub(crate) stderr: String,
    /// Our stdio server's stdout as the client saw it: (pid, ns, line).
    pub(crate) stdout_log: Vec<(u32, i64, Value)>,
}

/// Runs one SDK client scenario against our stdio or HTTP server.
pub(crate) fn run_client(sdk: Sdk, scenario: &str, http: Option<&str>, extra: &[&str]) -> Run {
    run_client_with("stdio_server", sdk, scenario, http, extra)
}

/// [`run_client`] with the stdio server an example other than `stdio_server`.
pub(crate) fn run_client_with(
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

pub(crate) fn run_bounded(mut cmd: Command, limit: Duration) -> std::process::Output {
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
pub(crate) fn slow_call_id(out: &Value) -> Value {
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
pub(crate) fn events(stderr: &str, kind: &str, id: &Value) -> Vec<i64> {
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
pub(crate) fn cancel_time(out: &Value) -> i64 {
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
pub(crate) const DROP_BOUND: Duration = Duration::from_millis(500);

/// Our server dropped the slow handler within DROP_BOUND of the cancel and
/// (stdio) wrote nothing for that id afterwards.
pub(crate) fn check_cancelled(run: &Run, server_stderr: &str, stdio: bool) {
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

pub(crate) fn check_progress(run: &Run) {
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

/// Waits (bounded) until the file at `path` (a server's stderr) has a line
/// matching `pred`.
pub(crate) async fn wait_for_line(path: &Path, pred: impl Fn(&str) -> bool) -> String {
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

/// A runtime for a cell: two workers, timers and I/O.
pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
