//! The checker against servers that break exactly one rule each (the
//! `fixture_server` example), and against the crate's own example servers,
//! which must pass every check with `--strict`.
//!
//! The runs are serialized: the CPU-time check compares a server's CPU use
//! before and after a cancel, which other runs on the same cores would blur.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_json::Value;

/// One run at a time (see the module's doc).
static SERIAL: Mutex<()> = Mutex::new(());

/// The slow operation of both the fixture and the example servers.
const SLOW: &str = "slow seconds=0.5 interval_ms=50";

/// The features the crate's example servers are built with (`--tasks`
/// needs `tasks`), as tests/support/example.rs builds them.
const EXAMPLE_FEATURES: &str = "stdio,http,tasks";

/// The example `name` of `package`, built now if `cargo test` did not build it.
fn example(package: &str, features: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", package, "--example", name]);
        if !features.is_empty() {
            cmd.args(["--features", features]);
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
        assert!(status.success(), "building the example {name} failed");
    }
    bin
}

fn fixture() -> PathBuf {
    example("mcp-cancel-check", "", "fixture_server")
}

/// Runs the checker with `args`; its exit status and its JSON report.
fn check(args: &[&str]) -> (i32, Value) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out: Output = Command::new(env!("CARGO_BIN_EXE_mcp-cancel-check"))
        .args(["--json", "--quiet", "--burst", "10"])
        .args(args)
        .output()
        .expect("run mcp-cancel-check");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("an exit status"), report)
}

/// The checks with `outcome`, as `(id, rule)`.
fn with_outcome<'a>(report: &'a Value, outcome: &str) -> Vec<(&'a str, &'a str)> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["outcome"] == outcome)
        .map(|c| (c["id"].as_str().unwrap(), c["rule"].as_str().unwrap()))
        .collect()
}

/// Runs the fixture broken on `mode` and asserts that the checks that fail
/// are exactly the ones that test `rule`'s `expected` ids.
fn fails_only(mode: &str, expected: &[&str], rule: &str, status: i32) {
    let fixture = fixture();
    let (code, report) = check(&[
        "--strict",
        "--slow",
        SLOW,
        "--cpu",
        "spin seconds=3",
        "--",
        fixture.to_str().unwrap(),
        "--break",
        mode,
    ]);
    let failed = with_outcome(&report, "fail");
    let ids: Vec<&str> = failed.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, expected, "{mode}: {report:#}");
    assert!(failed.iter().all(|(_, r)| *r == rule), "{mode}: {report:#}");
    assert_eq!(code, status, "{mode}: {report:#}");
}

#[test]
fn answer_after_cancel_fails_no_response_only() {
    fails_only(
        "answer-after-cancel",
        &[
            "cancel.no-response",
            "cancel.right-behind",
            "cancel.burst-no-response",
        ],
        "no-response-after-cancel",
        1,
    );
}

#[test]
fn error_on_cancel_fails_no_response_only() {
    fails_only(
        "error-on-cancel",
        &[
            "cancel.no-response",
            "cancel.right-behind",
            "cancel.burst-no-response",
        ],
        "no-response-after-cancel",
        1,
    );
}

#[test]
fn progress_after_cancel_fails_progress_stops_only() {
    fails_only(
        "progress-after-cancel",
        &["cancel.progress-stops"],
        "no-progress-after-cancel",
        1,
    );
}

#[test]
fn cpu_after_cancel_fails_work_stops_only_and_only_strictly() {
    // A SHOULD: exit status 1 under --strict (fails_only passes it).
    fails_only(
        "cpu-after-cancel",
        &["cancel.work-stops-cpu"],
        "work-stops-on-cancel",
        1,
    );
}

#[test]
fn a_listen_answered_with_an_error_at_shutdown_fails_listen_graceful_only() {
    // A SHOULD (subscriptions § Graceful Closure): exit status 1 under --strict.
    fails_only(
        "listen-error",
        &["server-cancel.listen-graceful"],
        "listen-graceful-closure",
        1,
    );
}

#[test]
fn a_listen_ended_twice_at_shutdown_fails_listen_teardown_only() {
    // The completion result, then a cancel for the request it answered.
    fails_only(
        "listen-twice",
        &["server-cancel.listen-teardown"],
        "server-cancel-listen-teardown",
        1,
    );
}

/// Check `id` of `report`.
fn check_of<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {report:#}"))
}

#[test]
fn a_listen_cancelled_at_shutdown_passes_listen_teardown_strongly() {
    let fixture = fixture();
    let (code, report) = check(&[
        "--strict",
        "--",
        fixture.to_str().unwrap(),
        "--listen-cancel",
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert!(with_outcome(&report, "fail").is_empty(), "{report:#}");
    let teardown = check_of(&report, "server-cancel.listen-teardown");
    assert_eq!(teardown["outcome"], "pass", "{report:#}");
    assert_eq!(teardown["evidence"], "strong", "{report:#}");
    let graceful = check_of(&report, "server-cancel.listen-graceful");
    assert_eq!(
        graceful["outcome"], "skip",
        "no result to judge: {report:#}"
    );
    // The listen's own cancel is no stray.
    assert_eq!(outcome(&report, "server-cancel.listen-only"), "pass");
}

/// Every check passes, or is skipped for a reason other than a missing
/// tool; the report.
fn passes_all(args: &[&str], era: &str) -> Value {
    let (code, report) = check(args);
    assert_eq!(
        with_outcome(&report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    assert!(
        report["target"].as_str().unwrap().contains(era),
        "{report:#}"
    );
    let passed: Vec<&str> = with_outcome(&report, "pass")
        .iter()
        .map(|(id, _)| *id)
        .collect();
    for id in [
        "cancel.no-response",
        "cancel.progress-stops",
        "cancel.right-behind",
        "cancel.burst-healthy",
    ] {
        assert!(passed.contains(&id), "{id} did not pass: {report:#}");
    }
    report
}

#[test]
fn honest_fixture_passes_every_check_including_cpu() {
    let fixture = fixture();
    let args = [
        "--strict",
        "--slow",
        SLOW,
        "--cpu",
        "spin seconds=3",
        "--",
        fixture.to_str().unwrap(),
    ];
    let report = passes_all(&args, "2026-07-28");
    let passed = with_outcome(&report, "pass");
    for id in [
        ("cancel.work-stops-cpu", "work-stops-on-cancel"),
        // The completion result at SIGTERM.
        (
            "server-cancel.listen-teardown",
            "server-cancel-listen-teardown",
        ),
        ("server-cancel.listen-graceful", "listen-graceful-closure"),
    ] {
        assert!(passed.contains(&id), "{id:?}: {report:#}");
    }
}

#[test]
fn legacy_fixture_is_checked_after_an_initialize_handshake() {
    let fixture = fixture();
    let args = [
        "--strict",
        "--slow",
        SLOW,
        "--",
        fixture.to_str().unwrap(),
        "--legacy",
    ];
    let report = passes_all(&args, "2025");
    // No subscriptions/listen in a 2025 session: skipped, with why.
    for id in [
        "server-cancel.listen-teardown",
        "server-cancel.listen-graceful",
    ] {
        let c = check_of(&report, id);
        assert_eq!(c["outcome"], "skip", "{report:#}");
        assert!(c["detail"].as_str().unwrap().contains("2025"), "{report:#}");
    }
}

#[test]
fn example_stdio_server_passes_strictly() {
    let server = example("tower-mcp-cancel", EXAMPLE_FEATURES, "stdio_server");
    let args = ["--strict", "--slow", SLOW, "--", server.to_str().unwrap()];
    let report = passes_all(&args, "2026-07-28");
    // Without --tasks it serves no subscriptions/listen: skipped, with why.
    let c = check_of(&report, "server-cancel.listen-teardown");
    assert_eq!(c["outcome"], "skip", "{report:#}");
    assert!(
        c["detail"].as_str().unwrap().contains("refused"),
        "{report:#}"
    );
}

#[test]
fn no_tool_no_false_failure() {
    // Without --slow the tool checks are skipped, not failed.
    let fixture = fixture();
    let (code, report) = check(&["--strict", "--", fixture.to_str().unwrap()]);
    assert_eq!(code, 0, "{report:#}");
    assert!(with_outcome(&report, "fail").is_empty(), "{report:#}");
    assert!(with_outcome(&report, "skip")
        .iter()
        .any(|(id, _)| *id == "cancel.no-response"));
}

#[test]
fn no_tools_capability_no_tool_checks() {
    // The fixture's tools still answer (and would fail, broken): a server
    // that declares no tools capability is not called, nor failed, for tools.
    let fixture = fixture();
    let (code, report) = check(&[
        "--strict",
        "--slow",
        SLOW,
        "--",
        fixture.to_str().unwrap(),
        "--no-tools",
        "--break",
        "answer-after-cancel",
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert!(with_outcome(&report, "fail").is_empty(), "{report:#}");
    let skipped = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "cancel.no-response")
        .expect("cancel.no-response listed");
    assert_eq!(skipped["outcome"], "skip");
    assert!(skipped["detail"]
        .as_str()
        .unwrap()
        .contains("no tools capability"));
}

#[test]
fn usage_errors_exit_2() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mcp-cancel-check"))
            .args(args)
            .output()
            .expect("run mcp-cancel-check")
            .status
            .code()
    };
    assert_eq!(run(&[]), Some(2));
    assert_eq!(run(&["--slow", "k=v", "--", "x"]), Some(2));
    assert_eq!(run(&["--burst", "0", "--", "x"]), Some(2));
    // A server command that cannot be started is the user's to fix.
    assert_eq!(run(&["--", "/nonexistent/mcp-server"]), Some(2));
}

/// An HTTP server on a free port (it prints `listening on <url>` first);
/// its process and its URL.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    /// The crate's example HTTP server.
    fn start() -> Self {
        let bin = example("tower-mcp-cancel", EXAMPLE_FEATURES, "http_server");
        Self::run(bin, &["--listen", "127.0.0.1:0"])
    }

    fn run(bin: PathBuf, args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(bin)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start http_server");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the server's first line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Self { child, url }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn example_http_server_passes_strictly_over_h1_and_h2() {
    let server = HttpServer::start();
    let pid = server.child.id().to_string();
    let (code, report) = check(&[
        "--strict",
        "--slow",
        SLOW,
        "--url",
        &server.url,
        "--pid",
        &pid,
    ]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    let passed: Vec<&str> = with_outcome(&report, "pass")
        .iter()
        .map(|(id, _)| *id)
        .collect();
    for id in [
        "http.header-mismatch",
        "http.close-mid-stream.h1",
        "http.close-mid-stream.h2",
        "cancel.burst-healthy",
        "cancel.burst-resources",
    ] {
        assert!(passed.contains(&id), "{id} did not pass: {report:#}");
    }
    // The checker does not stop a server it did not start.
    assert_eq!(
        outcome(&report, "server-cancel.listen-teardown"),
        "skip",
        "{report:#}"
    );
}

/// Runs the checker against the HTTP fixture (broken on `args`), with its
/// CPU-bound tool and its pid.
fn check_http_fixture(args: &[&str]) -> (i32, Value) {
    let server = HttpServer::run(example("mcp-cancel-check", "", "fixture_http"), args);
    let pid = server.child.id().to_string();
    let url = server.url.clone();
    check(&[
        "--strict",
        "--slow",
        SLOW,
        "--cpu",
        "spin seconds=3",
        "--url",
        &url,
        "--pid",
        &pid,
    ])
}

#[test]
fn http_fixture_passes_with_its_cpu_stopping_at_the_close() {
    let (code, report) = check_http_fixture(&[]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    assert!(
        with_outcome(&report, "pass").contains(&("cancel.work-stops-cpu", "work-stops-on-cancel")),
        "{report:#}"
    );
}

#[test]
fn http_fixture_whose_work_runs_on_fails_work_stops_only() {
    let (code, report) = check_http_fixture(&["--break", "cpu-after-cancel"]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [("cancel.work-stops-cpu", "work-stops-on-cancel")],
        "{report:#}"
    );
    assert_eq!(code, 1, "a failed SHOULD under --strict: {report:#}");
}

#[test]
fn http_fixture_in_a_2025_session_passes_its_posted_cancel() {
    let (code, report) = check_http_fixture(&["--legacy"]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    assert!(
        report["target"].as_str().unwrap().contains("2025"),
        "{report:#}"
    );
    let passed = with_outcome(&report, "pass");
    for id in ["http.session-cancel", "cancel.work-stops-cpu"] {
        assert!(passed.iter().any(|(p, _)| *p == id), "{id}: {report:#}");
    }
}

#[test]
fn http_fixture_in_a_2025_session_whose_work_runs_on_fails_work_stops_only() {
    let (code, report) = check_http_fixture(&["--legacy", "--break", "cpu-after-cancel"]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [("cancel.work-stops-cpu", "work-stops-on-cancel")],
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");
}

#[test]
fn unreachable_url_is_an_error_not_a_pass() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-cancel-check"))
        .args([
            "--quiet",
            "--check-timeout",
            "5s",
            "--url",
            &format!("http://127.0.0.1:{port}/mcp"),
        ])
        .output()
        .expect("run mcp-cancel-check");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
}

#[cfg(target_os = "linux")]
#[test]
fn what_the_server_started_ends_with_the_run() {
    // A launcher's child (here a `sleep` the server's shell leaves behind)
    // is in the server's process group, which is ended after the run.
    let fixture = fixture();
    let dir = std::env::temp_dir().join(format!("mcc-group-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("sleep.pid");
    let script = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > '{}'; exec '{}'",
        pid_file.display(),
        fixture.display()
    );
    let (code, report) = check(&["--", "sh", "-c", &script]);
    assert_eq!(code, 0, "{report:#}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // Gone, or a zombie waiting for init to reap it: bounded wait for an
    // outside process, polled.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!alive(), "the server's child {pid} outlived the run");
}

/// The task checks that need a task, and pass on an honest server whose
/// task tool is not CPU-bound (`tasks.cancel-work-stops-cpu` is skipped).
const TASK_CHECKS: &[&str] = &[
    "tasks.get-unknown",
    "tasks.created",
    "tasks.undeclared",
    "tasks.cancel-ack",
    "tasks.cancel-stops",
    "tasks.terminal-stays",
    "tasks.cancel-terminal",
    "tasks.ttl",
];

/// The outcome of check `id`.
fn outcome<'a>(report: &'a Value, id: &str) -> &'a str {
    check_of(report, id)["outcome"].as_str().unwrap()
}

/// Every task check in `ids` passed, none failed, exit status 0.
fn passes_task_checks(code: i32, report: &Value, ids: &[&str]) {
    assert_eq!(
        with_outcome(report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    for id in ids {
        assert_eq!(outcome(report, id), "pass", "{id}: {report:#}");
    }
    assert_eq!(
        outcome(report, "tasks.cancel-work-stops-cpu"),
        "skip",
        "slow_compute sleeps: {report:#}"
    );
}

#[test]
fn example_stdio_server_passes_the_task_checks_strictly() {
    let server = example("tower-mcp-cancel", EXAMPLE_FEATURES, "stdio_server");
    let (code, report) = check(&[
        "--strict",
        "--task",
        "slow_compute seconds=30",
        "--",
        server.to_str().unwrap(),
        "--tasks",
        "--task-ttl",
        "2s",
    ]);
    passes_task_checks(code, &report, TASK_CHECKS);
    // Its listen for task ids ends with the completion result at SIGTERM.
    for id in [
        "server-cancel.listen-teardown",
        "server-cancel.listen-graceful",
    ] {
        assert_eq!(outcome(&report, id), "pass", "{id}: {report:#}");
    }
}

#[test]
fn example_http_server_passes_the_task_checks_strictly() {
    let bin = example("tower-mcp-cancel", EXAMPLE_FEATURES, "http_server");
    let server = HttpServer::run(
        bin,
        &["--listen", "127.0.0.1:0", "--tasks", "--task-ttl", "2s"],
    );
    let pid = server.child.id().to_string();
    let (code, report) = check(&[
        "--strict",
        "--task",
        "slow_compute seconds=30",
        "--url",
        &server.url,
        "--pid",
        &pid,
    ]);
    let mut ids = TASK_CHECKS.to_vec();
    ids.push("http.task-name-header");
    passes_task_checks(code, &report, &ids);
}

#[test]
fn a_server_without_tasks_gets_the_task_checks_skipped() {
    let server = example("tower-mcp-cancel", EXAMPLE_FEATURES, "stdio_server");
    let (code, report) = check(&[
        "--strict",
        "--task",
        "slow_compute seconds=30",
        "--",
        server.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert!(with_outcome(&report, "fail").is_empty(), "{report:#}");
    let tasks: Vec<&Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("tasks."))
        .collect();
    assert_eq!(tasks.len(), TASK_CHECKS.len() + 1, "{report:#}");
    for c in tasks {
        assert_eq!(c["outcome"], "skip", "{report:#}");
        assert!(
            c["detail"].as_str().unwrap().contains("does not advertise"),
            "{report:#}"
        );
    }
}

#[test]
fn task_fixture_passes_the_task_checks() {
    let fixture = fixture();
    let (code, report) = check(&[
        "--strict",
        "--task",
        "job seconds=30",
        "--",
        fixture.to_str().unwrap(),
        "--tasks",
    ]);
    passes_task_checks(code, &report, TASK_CHECKS);
}

/// A server that writes its integers as floats (`"ttlMs": 2000.0`, as
/// Python's `json` writes a float) breaks no rule: the schema types a
/// number by its value, not its spelling.
#[test]
fn a_fixture_writing_its_numbers_as_floats_passes_the_task_and_progress_checks() {
    let fixture = fixture();
    let (code, report) = check(&[
        "--strict",
        "--slow",
        SLOW,
        "--task",
        "job seconds=30",
        "--",
        fixture.to_str().unwrap(),
        "--tasks",
        "--floats",
    ]);
    passes_task_checks(code, &report, TASK_CHECKS);
    for id in [
        "progress.token",
        "progress.increases",
        "cancel.progress-stops",
    ] {
        assert_eq!(outcome(&report, id), "pass", "{id}: {report:#}");
    }
}

/// `ttlMs` owes an integer: half a millisecond more is a schema violation,
/// reported on the task's creation (a MUST).
#[test]
fn a_fractional_ttl_fails_tasks_created_only() {
    let fixture = fixture();
    let (code, report) = check(&[
        "--task",
        "job seconds=30",
        "--",
        fixture.to_str().unwrap(),
        "--tasks",
        "--break",
        "fractional-ttl",
    ]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [("tasks.created", "task-durably-created")],
        "{report:#}"
    );
    let detail = check_of(&report, "tasks.created")["detail"]
        .as_str()
        .unwrap();
    assert!(
        detail.contains("ttlMs 2000.5 is not an integer"),
        "{report:#}"
    );
    assert_eq!(code, 1, "a failed MUST: {report:#}");
}

#[test]
fn a_task_that_runs_on_after_its_cancel_fails_cancel_stops_only() {
    // tasks/cancel acknowledged, the task runs on to `completed`: a SHOULD
    // (cancellation is cooperative), so exit status 1 only with --strict.
    let fixture = fixture();
    let args = |strict: bool| {
        let mut a = vec!["--task", "job seconds=2"];
        if strict {
            a.push("--strict");
        }
        a.extend(["--", fixture.to_str().unwrap(), "--tasks"]);
        a.extend(["--break", "task-runs-on", "--task-ttl-ms", "60000"]);
        a
    };
    let (code, report) = check(&args(true));
    assert_eq!(
        with_outcome(&report, "fail"),
        [("tasks.cancel-stops", "task-cancel-stops")],
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");
    let (code, report) = check(&args(false));
    assert_eq!(code, 0, "a failed SHOULD without --strict: {report:#}");
}

#[test]
fn a_terminal_status_that_changes_fails_terminal_stays_only() {
    // Cancelled, then completed when its work would have ended: a MUST.
    let fixture = fixture();
    let (code, report) = check(&[
        "--task",
        "job seconds=2",
        "--",
        fixture.to_str().unwrap(),
        "--tasks",
        "--break",
        "terminal-changes",
        "--task-ttl-ms",
        "60000",
    ]);
    assert_eq!(
        with_outcome(&report, "fail"),
        [("tasks.terminal-stays", "task-terminal-final")],
        "{report:#}"
    );
    assert_eq!(code, 1, "a failed MUST: {report:#}");
}

/// The rmcp integration's example server (rmcp's stdio loop, our input
/// checks and layers): every check passes strictly, in both eras — among
/// them the cancels rmcp alone mishandles (one before the lifecycle is
/// chosen ended the connection; a malformed one was answered).
#[test]
fn example_rmcp_server_passes_strictly_in_both_eras() {
    let server = example("tower-mcp-cancel-rmcp", "http", "rmcp_server");
    let server = server.to_str().unwrap();
    passes_all(&["--strict", "--slow", SLOW, "--", server], "2026-07-28");
    let (_, report) = check(&["--strict", "--slow", SLOW, "--", server]);
    for id in ["cancel.unknown", "cancel.malformed"] {
        assert_eq!(outcome(&report, id), "pass", "{report:#}");
    }
    passes_all(
        &["--strict", "--era", "2025", "--slow", SLOW, "--", server],
        "2025",
    );
}

/// rmcp alone, with a handler that never looks at its token: its progress
/// runs on after the cancel. In a 2025 session that is the work running on
/// (2025-11-25 cancellation: SHOULD stop processing; progress for an
/// operation still in progress is not forbidden): a failed SHOULD, exit
/// status 1 only with `--strict`.
#[test]
fn plain_rmcp_whose_handler_ignores_its_token_fails_progress_stops() {
    let server = example("tower-mcp-cancel-rmcp", "http", "rmcp_server");
    let args = |strict: bool| {
        let mut a = vec!["--era", "2025", "--slow", SLOW];
        if strict {
            a.push("--strict");
        }
        a.extend(["--", server.to_str().unwrap(), "--plain"]);
        a
    };
    let (code, report) = check(&args(false));
    let c = check_of(&report, "cancel.progress-stops");
    assert_eq!(c["outcome"], "fail", "{report:#}");
    assert_eq!(c["level"], "SHOULD", "judged by the 2025 pages: {report:#}");
    assert_eq!(code, 0, "no failed MUST: {report:#}");
    let (code, _) = check(&args(true));
    assert_eq!(code, 1, "a failed SHOULD under --strict");
}

/// The level and the rule of check `id` in `report`.
fn judged<'a>(report: &'a Value, id: &str) -> (&'a str, &'a str, &'a str) {
    let c = check_of(report, id);
    (
        c["outcome"].as_str().unwrap(),
        c["level"].as_str().unwrap(),
        c["rule"].as_str().unwrap(),
    )
}

/// A server that ignores `notifications/cancelled` (its progress and its
/// answer still come): in a 2025 session the pages ask for neither at MUST
/// (2025-11-25 cancellation § Behavior Requirements: SHOULD stop, SHOULD
/// not answer), so each is a failed SHOULD and the run exits 0 without
/// `--strict`; in a 2026-07-28 session stdio's MUST NOT fails them.
#[test]
fn a_server_that_ignores_cancels_is_judged_by_the_revision_it_speaks() {
    let fixture = fixture();
    let fixture = fixture.to_str().unwrap();
    let run = |legacy: bool| {
        let mut a = vec!["--slow", SLOW, "--", fixture, "--break", "ignore-cancels"];
        if legacy {
            a.push("--legacy");
        }
        check(&a)
    };
    let (code, report) = run(true);
    assert!(
        report["target"].as_str().unwrap().contains("2025"),
        "{report:#}"
    );
    assert_eq!(
        judged(&report, "cancel.no-response"),
        ("fail", "SHOULD", "no-response-after-cancel"),
        "{report:#}"
    );
    assert_eq!(
        judged(&report, "cancel.progress-stops"),
        ("fail", "SHOULD", "progress-stops-on-cancel"),
        "{report:#}"
    );
    assert!(
        check_of(&report, "cancel.no-response")["cites"]
            .as_str()
            .unwrap()
            .starts_with("2025-11-25 cancellation"),
        "{report:#}"
    );
    let musts: Vec<_> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "fail" && c["level"] == "MUST")
        .collect();
    assert!(musts.is_empty(), "no MUST is broken in 2025: {report:#}");
    assert_eq!(code, 0, "{report:#}");
    let (code, report) = run(false);
    assert!(
        report["target"].as_str().unwrap().contains("2026-07-28"),
        "{report:#}"
    );
    assert_eq!(
        judged(&report, "cancel.no-response"),
        ("fail", "MUST", "no-response-after-cancel"),
        "{report:#}"
    );
    assert_eq!(
        judged(&report, "cancel.progress-stops"),
        ("fail", "MUST", "no-progress-after-cancel"),
        "{report:#}"
    );
    assert_eq!(code, 1, "{report:#}");
}

/// A server that dies under the burst's calls whether or not they are
/// cancelled (the control run shows it): not the cancels' doing, so
/// `cancel.burst-healthy` is skipped, saying so; and a server that is gone
/// never passes `cancel.burst-resources`.
#[test]
fn a_server_that_dies_of_the_load_is_not_blamed_on_the_cancels() {
    let fixture = fixture();
    let (_, report) = check(&[
        "--slow",
        SLOW,
        "--",
        fixture.to_str().unwrap(),
        "--legacy",
        "--break",
        "die-under-load",
    ]);
    let healthy = check_of(&report, "cancel.burst-healthy");
    assert_eq!(healthy["outcome"], "skip", "{report:#}");
    assert!(
        healthy["detail"]
            .as_str()
            .unwrap()
            .contains("the load, not the cancels"),
        "{report:#}"
    );
    // A gone server never passes: neither its memory nor its silence.
    for id in ["cancel.burst-resources", "cancel.burst-no-response"] {
        assert_eq!(outcome(&report, id), "skip", "{id}: {report:#}");
    }
}

/// A server that dies of the cancels themselves (the same calls without
/// them leave a fresh one answering): `cancel.burst-healthy` fails (a MUST:
/// handle the races gracefully), and `cancel.burst-resources` does not pass.
#[test]
fn a_server_that_dies_of_the_cancels_fails_burst_healthy() {
    let fixture = fixture();
    let (code, report) = check(&[
        "--slow",
        SLOW,
        "--",
        fixture.to_str().unwrap(),
        "--break",
        "die-on-cancels",
    ]);
    let healthy = check_of(&report, "cancel.burst-healthy");
    assert_eq!(healthy["outcome"], "fail", "{report:#}");
    assert_eq!(healthy["level"], "MUST", "{report:#}");
    assert!(
        healthy["detail"]
            .as_str()
            .unwrap()
            .contains("the cancels are what"),
        "{report:#}"
    );
    for id in ["cancel.burst-resources", "cancel.burst-no-response"] {
        assert_eq!(outcome(&report, id), "skip", "{id}: {report:#}");
    }
    assert_eq!(code, 1, "{report:#}");
}

/// A 2025 session whose server takes the POSTed cancel and lets the call
/// run on, its progress and its result still coming on the open stream:
/// `http.session-cancel` fails on that evidence (a SHOULD of the 2025
/// pages), and passes the honest server.
#[test]
fn a_2025_session_that_ignores_its_posted_cancel_fails_session_cancel() {
    let (code, report) = check_http_fixture(&["--legacy", "--break", "ignore-cancels"]);
    let c = check_of(&report, "http.session-cancel");
    assert_eq!(c["outcome"], "fail", "{report:#}");
    assert_eq!(c["level"], "SHOULD", "{report:#}");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains("after the POSTed cancel"), "{report:#}");
    assert_eq!(code, 1, "a failed SHOULD under --strict: {report:#}");
}

/// A cancelled task whose `lastUpdatedAt` moves while it stays `cancelled`
/// (FastMCP's tasks): the spec forbids a transition out of a terminal
/// status and says nothing of the timestamp, so the check passes, with a
/// note. A completed task whose result changes fails it (a MUST).
#[test]
fn a_terminal_task_is_judged_by_its_status_and_result_not_its_timestamp() {
    let fixture = fixture();
    let run = |mode: &str| {
        check(&[
            "--race",
            "500ms",
            "--task",
            "job seconds=1",
            "--",
            fixture.to_str().unwrap(),
            "--tasks",
            "--break",
            mode,
            "--task-ttl-ms",
            "60000",
        ])
    };
    let (code, report) = run("terminal-touch");
    let c = check_of(&report, "tasks.terminal-stays");
    assert_eq!(c["outcome"], "pass", "{report:#}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("note: its lastUpdatedAt moved"),
        "{report:#}"
    );
    assert_eq!(
        with_outcome(&report, "fail"),
        [] as [(&str, &str); 0],
        "{report:#}"
    );
    assert_eq!(code, 0, "{report:#}");
    let (code, report) = run("result-changes");
    assert_eq!(
        with_outcome(&report, "fail"),
        [("tasks.terminal-stays", "task-terminal-final")],
        "{report:#}"
    );
    assert!(
        check_of(&report, "tasks.terminal-stays")["detail"]
            .as_str()
            .unwrap()
            .contains("result changed"),
        "{report:#}"
    );
    assert_eq!(code, 1, "a failed MUST: {report:#}");
}
