//! The example binaries with `--tasks`: `mcp_call` runs a tool as a task
//! when the server makes one, and its timeout cancels the task — over
//! Streamable HTTP (`http_server`) and over stdio (`stdio_server`, which
//! `mcp_call` spawns); the server's `DROPPED` line is keyed by the id of the
//! request that created the task. Bounded waits, real processes.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::example::example;

const BOUND: Duration = Duration::from_secs(60);

async fn mcp_call(args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(
        BOUND,
        Command::new(example("mcp_call"))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("mcp_call exits")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn mcp_calls_timeout_cancels_an_http_servers_task() {
    let mut server = Command::new(example("http_server"))
        .args(["--listen", "127.0.0.1:0", "--tasks", "--events"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn http_server");
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(BOUND, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first.strip_prefix("listening on ").unwrap().to_owned();
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();

    // A task that completes: one call, its result.
    let (code, out, err) =
        mcp_call(&["--url", &url, "slow_compute", "seconds=1", "label=quick"]).await;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("computed quick after 1s"), "{out}");

    // A task the caller gives up on: exit 124, and the server drops it.
    let (code, out, err) = mcp_call(&[
        "--timeout",
        "1s",
        "--url",
        &url,
        "slow_compute",
        "seconds=60",
    ])
    .await;
    assert_eq!(code, Some(124), "{out}\n{err}");
    let dropped = tokio::time::timeout(BOUND, async {
        let mut started = None;
        while let Ok(Some(line)) = stderr.next_line().await {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("STARTED"), Some(id)) => started = Some(id.to_owned()),
                (Some("DROPPED"), Some(id)) => return (started, id.to_owned()),
                _ => {}
            }
        }
        panic!("the server's stderr ended without DROPPED");
    })
    .await
    .expect("the task's handler was dropped");
    assert_eq!(
        dropped.0.as_deref(),
        Some(dropped.1.as_str()),
        "keyed by the creating request's id"
    );
}

#[tokio::test]
async fn mcp_calls_timeout_cancels_a_stdio_servers_task() {
    let server = example("stdio_server");
    let server = server.to_str().unwrap();
    let (code, out, err) = mcp_call(&[
        "--timeout",
        "1s",
        "--",
        server,
        "--tasks",
        "--events",
        "slow_compute",
        "seconds=60",
    ])
    .await;
    assert_eq!(code, Some(124), "{out}\n{err}");
    // The server shares mcp_call's stderr: its DROPPED line came before mcp_call exited.
    assert!(err.lines().any(|l| l.starts_with("DROPPED ")), "{err}");
}
