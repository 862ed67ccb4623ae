//! Every example binary of this package answers `--help` with its flags and
//! refuses an unknown flag or a malformed value with a usage line and exit
//! status 2 (issue #32: `http_server --help`, or a typo such as `--lisen`,
//! started a server on 8080). The flags named here are the ones the tests,
//! benchmarks, scripts and README use.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/example.rs"]
mod example;

use cli::assert_cli;
use example::example;

/// The flags both example servers take.
const SERVER_FLAGS: [&str; 5] = [
    "--events",
    "--timeout",
    "--grace",
    "--budget",
    "--drain-grace",
];

#[tokio::test]
async fn http_server_command_line() {
    let mut flags = vec!["--listen"];
    flags.extend(SERVER_FLAGS);
    let malformed: &[&[&str]] = &[
        &["--lisen", "127.0.0.1:1"],
        &["--listen", "nonsense"],
        &["--timeout", "3x"],
        &["--grace", "soon"],
        &["--drain-grace", "-1"],
    ];
    assert_cli(&example("http_server"), &flags, malformed).await;
}

#[tokio::test]
async fn stdio_server_command_line() {
    let malformed: &[&[&str]] = &[
        &["--timeout", "3x"],
        &["--grace", "soon"],
        &["--drain-grace", "100000"],
        &["--events", "extra"],
    ];
    assert_cli(&example("stdio_server"), &SERVER_FLAGS, malformed).await;
}

#[tokio::test]
async fn mcp_call_command_line() {
    let flags = [
        "--url",
        "--http2",
        "--timeout",
        "--idle",
        "--max",
        "--budget",
    ];
    let malformed: &[&[&str]] = &[
        &["--timout", "2s", "--", "server", "tool"],
        &["--timeout", "2", "--idle", "x", "--", "server", "tool"],
        &["--url", "http://[::1", "echo"],
        &["--url", "http://127.0.0.1:1/mcp"], // no tool
        &["server", "tool"],                  // no `--` before the server command
        &["--http2", "--", "server", "tool"], // --http2 without --url
    ];
    assert_cli(&example("mcp_call"), &flags, malformed).await;
}

#[tokio::test]
async fn demo_command_line() {
    assert_cli(&example("demo"), &[], &[&["extra"]]).await;
}

#[tokio::test]
async fn stdio_service_fn_command_line() {
    assert_cli(&example("stdio_service_fn"), &[], &[&["extra"]]).await;
}

#[tokio::test]
async fn axum_router_command_line() {
    let malformed: &[&[&str]] = &[&["127.0.0.1"], &["127.0.0.1:3000", "extra"]];
    assert_cli(&example("axum_router"), &["[ADDR]"], malformed).await;
}

#[tokio::test]
async fn client_progress_command_line() {
    assert_cli(&example("client_progress"), &["[SERVER]"], &[]).await;
}
