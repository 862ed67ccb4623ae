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

/// What the root's fixture module takes from its parent.
#[allow(dead_code)]
enum Reply {
    Json(serde_json::Value),
}

/// The root's task fixture tools (`examples/common/tasks.rs`), whose
/// listing `http_server --tasks` serves.
#[allow(dead_code, unreachable_pub)]
#[path = "../../../examples/common/tasks.rs"]
mod fixture;

/// `rmcp_server --tasks` lists the conformance fixture tools exactly as
/// the root's example servers do (names, descriptions, input schemas), and
/// advertises the tasks extension.
#[tokio::test]
async fn rmcp_server_tasks_lists_the_root_examples_fixture_tools() {
    use serde_json::json;
    use tower::ServiceExt as _;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    use tower_mcp_cancel::McpRequest;

    let mut child = tokio::process::Command::new(example::example("rmcp_server"))
        .arg("--tasks")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let client = StdioClient::new(stdout, stdin);
    let init = McpRequest::new(0, "initialize").with_params(json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    }));
    let bounded = |f| tokio::time::timeout(std::time::Duration::from_secs(30), f);
    let info = bounded(client.clone().oneshot(init))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        info["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({}),
        "{info}"
    );
    client
        .notify("notifications/initialized", &json!({}))
        .unwrap();
    let list = bounded(client.clone().oneshot(McpRequest::new(1, "tools/list")))
        .await
        .unwrap()
        .unwrap();
    for want in fixture::tools_list() {
        let got = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == want["name"])
            .unwrap_or_else(|| panic!("{} not listed: {list}", want["name"]));
        for field in ["description", "inputSchema"] {
            assert_eq!(got[field], want[field], "{}: {field}", want["name"]);
        }
    }
    client.shutdown().await.unwrap();
}
