//! The rmcp example server answers `--help` with its flags and refuses an
//! unknown flag or a malformed value with a usage line and exit status 2,
//! as the middleware's examples do (`tests/examples.rs` at the
//! repository's root). Not part of the published package: it uses the
//! repository's test helpers.

#[path = "../../../tests/support/cli.rs"]
mod cli;
#[path = "../../../tests/support/example.rs"]
mod example;

#[tokio::test]
async fn rmcp_server_command_line() {
    let flags = [
        "--events",
        "--timeout-ms",
        "--idle-ms",
        "--plain",
        "--listen",
        "--tasks",
        "--task-ttl",
    ];
    let malformed: &[&[&str]] = &[
        &["--timeout-ms", "2s"],
        &["--idle-ms", "-5"],
        &["--listen", "nonsense"],
        &["--lisen", "127.0.0.1:0"],
        &["--tasks", "--task-ttl", "soon"],
    ];
    cli::assert_cli(&example::example("rmcp_server"), &flags, malformed).await;
}
