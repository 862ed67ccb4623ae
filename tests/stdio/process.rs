//! `StdioClient` against a real child process: the example server
//! (`examples/stdio_server.rs`, run with `--events`), whose stderr event
//! lines tell when a handler future was dropped and when a spawned task saw
//! its token fire.
//!
//! `cargo test` builds the examples before it runs any test, so the binary
//! is next to this test's executable (`target/<profile>/examples/`); when
//! it is not (a filtered build), it is built once with `cargo build
//! --example stdio_server`.
#![cfg(feature = "stdio")]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStderr, Command};
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{
    Elapsed, Limit, McpRequest, ProgressObserver, ProgressResetLayer, TimeoutLayer,
};

/// A guard against hangs only; every wait below ends on an event.
const BOUND: Duration = Duration::from_secs(60);

fn example_server() -> PathBuf {
    example("stdio_server")
}

use crate::support::example::example;

struct Events(Lines<BufReader<ChildStderr>>);

impl Events {
    /// Waits for the event line `KIND <id>`; other stderr lines are skipped.
    async fn expect(&mut self, kind: &str, id: &str) {
        let want = format!("{kind} {id} ");
        let found = tokio::time::timeout(BOUND, async {
            while let Some(line) = self.0.next_line().await.unwrap() {
                if line.starts_with(&want) {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        assert!(found, "no `{want}` event line from the server");
    }
}

fn spawn_server() -> (StdioClient, Events) {
    let mut cmd = Command::new(example_server());
    cmd.arg("--events")
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped());
    let client = StdioClient::builder()
        .shutdown_grace(Duration::from_secs(5))
        .spawn(cmd)
        .expect("spawn the example server");
    let stderr = client.take_stderr().expect("piped stderr");
    (client, Events(BufReader::new(stderr).lines()))
}

fn call(id: serde_json::Value, tool: &str, args: serde_json::Value) -> McpRequest {
    let req = McpRequest::new(0, "tools/call");
    let mut req = req.with_params(json!({
        "name": tool,
        "arguments": args,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    }));
    req.set_id(match id {
        serde_json::Value::String(s) => s.into(),
        v => v.as_i64().unwrap_or(0).into(),
    });
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_child_drops_handlers_on_cancel_and_shuts_down() {
    let (client, mut events) = spawn_server();

    // It is a 2026-07-28 server and its tools work.
    let res = client
        .clone()
        .oneshot(McpRequest::new(1, "server/discover"))
        .await
        .unwrap();
    assert_eq!(res["supportedVersions"][0], "2026-07-28");
    let res = client
        .clone()
        .oneshot(call(json!(2), "echo", json!({"text": "hello"})))
        .await
        .unwrap();
    assert_eq!(res["content"][0]["text"], "hello");
    events.expect("DONE", "2").await;

    // A fixed timeout: the uncooperative `slow` handler's future is dropped.
    let err = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .service(client.clone())
        .oneshot(call(json!(11), "slow", json!({"seconds": 30})))
        .await
        .unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Limit::Timeout
    );
    events.expect("DROPPED", "11").await;

    // Work in a spawned task stops through the token.
    let err = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .service(client.clone())
        .oneshot(call(json!("s"), "spawned", json!({"seconds": 30})))
        .await
        .unwrap_err();
    assert!(err.is::<Elapsed>());
    events.expect("TOKEN", "\"s\"").await;

    // Progress keeps a call alive past its idle limit ...
    let res = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(30)))
        .service(client.clone())
        .oneshot(call(
            json!(20),
            "slow",
            json!({"seconds": 1.0, "interval_ms": 50}),
        ))
        .await
        .unwrap();
    assert_eq!(res["resultType"], "complete");

    // ... but not past the hard maximum.
    let err = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_millis(700)))
        .service(client.clone())
        .oneshot(call(
            json!(21),
            "slow",
            json!({"seconds": 30, "interval_ms": 50}),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.downcast_ref::<Elapsed>().unwrap().limit(), Limit::Max);
    events.expect("DROPPED", "21").await;

    // Shutdown: stdin closed, the server exits by itself.
    let status = client.shutdown().await.unwrap().expect("a child");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_stdin_cancels_in_flight_work_in_the_child() {
    let (client, mut events) = spawn_server();
    let (tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let req = McpRequest::new(5, "tools/call")
        .with_params(json!({
            "name": "slow",
            "arguments": {"seconds": 30, "interval_ms": 50},
            "_meta": {"progressToken": "p5"}
        }))
        .with_extension(ProgressObserver::new(move |p| {
            let _ = tx.send(p.progress);
        }));
    let pending = tokio::spawn(client.clone().oneshot(req));
    // The handler runs once it reports progress; then close the child's stdin.
    let first = tokio::time::timeout(BOUND, progress.recv()).await.unwrap();
    assert_eq!(first, Some(1.0));
    let status = client.shutdown().await.unwrap().unwrap();
    assert!(status.success());
    assert!(pending.await.unwrap().is_err());
    events.expect("DROPPED", "5").await;
}

/// A child that ignores its closed stdin but exits on SIGTERM is terminated,
/// not killed: its exit code is its own (the shell's trap), not signal 9.
#[cfg(unix)]
#[tokio::test]
async fn a_child_that_ignores_eof_gets_sigterm_before_sigkill() {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("trap 'exit 7' TERM; while :; do sleep 0.01; done")
        .kill_on_drop(true);
    let client = StdioClient::builder()
        .shutdown_grace(Duration::from_millis(200))
        .spawn(cmd)
        .unwrap();
    let status = tokio::time::timeout(BOUND, client.shutdown())
        .await
        .expect("shutdown is bounded")
        .unwrap()
        .expect("a child");
    assert_eq!(
        status.code(),
        Some(7),
        "exited through its TERM trap: {status:?}"
    );
    assert_eq!(status.signal(), None);
}

/// A child that ignores SIGTERM too is killed after the second grace period.
#[cfg(unix)]
#[tokio::test]
async fn a_child_that_ignores_sigterm_is_killed() {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("trap '' TERM; while :; do sleep 0.01; done")
        .kill_on_drop(true);
    let client = StdioClient::builder()
        .shutdown_grace(Duration::from_millis(100))
        .spawn(cmd)
        .unwrap();
    let status = tokio::time::timeout(BOUND, client.shutdown())
        .await
        .expect("shutdown is bounded")
        .unwrap()
        .expect("a child");
    assert_eq!(status.signal(), Some(9), "killed: {status:?}");
}

/// Ctrl-C in a terminal sends SIGINT to the whole foreground process group.
/// `mcp_call` runs here in a process group of its own (so the test runner is
/// not hit) and that whole group gets SIGINT, as from a terminal: the server
/// `StdioClient` spawned must survive it (it is in a group of its own), get
/// `notifications/cancelled`, and drop the handler; `mcp_call` exits 130.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_in_a_terminal_cancels_the_call_on_a_live_server() {
    use rustix::process::{kill_process_group, Pid, Signal};

    let mut cmd = Command::new(example("mcp_call"));
    cmd.args(["--timeout", "600s", "--"])
        .arg(example_server())
        .args(["--events", "slow", "seconds=600"])
        .env("RUST_LOG", "warn")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("run mcp_call");
    let pgid = child.id().expect("running") as i32;
    // mcp_call's stderr, shared with the server it spawned.
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let mut seen = Vec::new();
    // server/discover is request 1; the tool call is request 2.
    wait_for(&mut lines, &mut seen, "STARTED 2 ").await;
    kill_process_group(Pid::from_raw(pgid).expect("pid"), Signal::INT).expect("SIGINT the group");
    wait_for(&mut lines, &mut seen, "DROPPED 2 ").await;
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .expect("mcp_call exits")
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
}

/// Reads lines until one contains `want` (mcp_call's lines and the server's
/// share the pipe; each is written at once, but `contains` also tolerates
/// a line of the one written in the middle of the other's).
#[cfg(unix)]
async fn wait_for(lines: &mut Lines<BufReader<ChildStderr>>, seen: &mut Vec<String>, want: &str) {
    let found = tokio::time::timeout(BOUND, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let hit = line.contains(want);
            seen.push(line);
            if hit {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(found, "no `{want}` on stderr; saw {seen:#?}");
}

/// A stdio server that goes away before it answers `server/discover` is not
/// a 2025-era server (those answer with an error, or stay silent): `mcp_call`
/// reports the closed connection once instead of "trying initialize" on it.
#[cfg(unix)]
#[tokio::test]
async fn mcp_call_does_not_try_initialize_on_a_closed_connection() {
    let mut cmd = Command::new(example("mcp_call"));
    cmd.args(["--", "true", "echo"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(BOUND, cmd.output())
        .await
        .expect("mcp_call exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("trying initialize"), "{stderr}");
    assert!(stderr.contains("connection closed"), "{stderr}");
}
