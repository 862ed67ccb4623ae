//! Every example binary of this package answers `--help` with its flags and
//! refuses an unknown flag or a malformed value with a usage line and exit
//! status 2 (issue #32: `http_server --help`, or a typo such as `--lisen`,
//! started a server on 8080). The flags named here are the ones the tests,
//! benchmarks, scripts and README use.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/example.rs"]
mod example;

use std::path::Path;

use cli::assert_cli;
use example::example;

/// The examples a reader starts from by copying one file: each states its
/// own flags and includes no other file, so that the copy compiles with the
/// crate and its listed dev-dependencies alone. The other examples share
/// `examples/common/`.
const STAND_ALONE: [&str; 3] = ["stdio_service_fn", "axum_router", "client_progress"];

/// Why `line` of an example's source would pull in another file: a module
/// declared without a body (`mod cli;`, found through a path), or a
/// `#[path]`, `include!` or `include_str!`.
fn includes_a_file(line: &str) -> Option<&'static str> {
    let code = line.split("//").next().unwrap_or_default().trim();
    let item = code
        .strip_prefix("pub(crate) ")
        .or_else(|| code.strip_prefix("pub "))
        .unwrap_or(code);
    if item.starts_with("mod ") && item.ends_with(';') {
        Some("a module from another file")
    } else if code.starts_with("#[path") {
        Some("a #[path] attribute")
    } else if code.contains("include!(") || code.contains("include_str!(") {
        Some("a file included by macro")
    } else {
        None
    }
}

#[test]
fn starting_point_examples_are_single_files() {
    for name in STAND_ALONE {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        for (n, line) in source.lines().enumerate() {
            if let Some(why) = includes_a_file(line) {
                panic!(
                    "examples/{name}.rs:{}: {why} ({}): a reader who copies this example gets a file that does not compile alone",
                    n + 1,
                    line.trim()
                );
            }
        }
    }
}

#[test]
fn what_counts_as_including_a_file() {
    for line in [
        "mod cli;",
        "pub mod common;",
        "pub(crate) mod cli; // shared",
        "#[path = \"common/cli.rs\"]",
        "const HELP: &str = include_str!(\"help.txt\");",
    ] {
        assert!(includes_a_file(line).is_some(), "{line}");
    }
    for line in [
        "mod tests {",
        "// mod cli;",
        "//! uses `#[path]` nowhere",
        "let model = 1;",
    ] {
        assert_eq!(includes_a_file(line), None, "{line}");
    }
}

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
