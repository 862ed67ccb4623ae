//! The tower-mcp example server, run as a process and spoken to over its
//! stdin and stdout as a client would, in both eras: the peer's
//! `notifications/cancelled` drops the `slow` handler's future (`DROPPED`
//! on stderr) and nothing more is written for it; with `--plain`, tower-mcp
//! alone, the handler runs on to `DONE`. Cancelling `spawned` fires the
//! token its spawned work watches (`TOKEN`), with the layer or without.
//! Over HTTP (`--listen`) a closed stream drops the handler, with the layer
//! or without. `--help` names its flags and an
//! unknown flag or a malformed value is refused with a usage line and exit
//! status 2, as the middleware's examples do (`tests/examples.rs` at the
//! repository's root). Not part of the published package: it uses the
//! repository's test helpers.

#[path = "../../../tests/support/cli.rs"]
mod cli;
#[path = "../../../tests/support/example.rs"]
mod example;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

/// A guard against hangs, far longer than any exchange here takes.
const BOUND: Duration = Duration::from_secs(60);

/// The child's `--events` lines (`kind`, request id as JSON), from its
/// stderr.
fn events_of(child: &mut Child) -> mpsc::UnboundedReceiver<(String, String)> {
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, events) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            let mut words = line.split(' ');
            if let (Some(kind @ ("STARTED" | "DROPPED" | "DONE" | "TOKEN")), Some(id)) =
                (words.next(), words.next())
            {
                let _ = tx.send((kind.to_owned(), id.to_owned()));
            }
        }
    });
    events
}

/// The next event of the request `id` (as JSON).
async fn next_event(events: &mut mpsc::UnboundedReceiver<(String, String)>, id: &str) -> String {
    loop {
        let (kind, of) = tokio::time::timeout(BOUND, events.recv())
            .await
            .expect("no event for too long")
            .expect("stderr closed");
        if of == id {
            return kind;
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Era {
    /// 2026-07-28: every request carries its version in `_meta`.
    Modern,
    /// An `initialize` handshake first.
    Legacy,
}

/// The example server as a child process: its stdin, its stdout's lines,
/// and its `--events` lines (`kind`, request id as JSON) from stderr.
struct Server {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    events: mpsc::UnboundedReceiver<(String, String)>,
    era: Era,
}

impl Server {
    async fn start(era: Era, plain: bool) -> Self {
        Self::start_with(era, if plain { &["--plain"] } else { &[] }).await
    }

    /// The server with `args` besides `--events`.
    async fn start_with(era: Era, args: &[&str]) -> Self {
        let mut command = tokio::process::Command::new(example::example("tower_mcp_server"));
        command.arg("--events").args(args);
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn tower_mcp_server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let events = events_of(&mut child);
        let mut server = Server {
            _child: child,
            stdin,
            stdout,
            events,
            era,
        };
        if let Era::Legacy = era {
            let init = json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "examples-test", "version": "0"},
            });
            server.request("init", "initialize", init).await;
            let answer = server.until_response("init").await;
            assert!(answer.last().unwrap().get("result").is_some(), "{answer:?}");
            server
                .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
        }
        server
    }

    async fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request, with the era's `_meta` (and `meta`'s entries).
    async fn request_with(&mut self, id: &str, method: &str, mut params: Value, meta: Value) {
        let mut all = match self.era {
            Era::Modern => json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "examples-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }),
            Era::Legacy => json!({}),
        };
        all.as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        if !all.as_object().unwrap().is_empty() {
            params["_meta"] = all;
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    async fn request(&mut self, id: &str, method: &str, params: Value) {
        self.request_with(id, method, params, json!({})).await;
    }

    /// Every line the server writes up to and including the response
    /// with `id`.
    async fn until_response(&mut self, id: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let line = tokio::time::timeout(BOUND, self.stdout.next_line())
                .await
                .expect("the server wrote nothing for too long")
                .unwrap()
                .unwrap_or_else(|| panic!("stdout closed before {id}'s response: {seen:?}"));
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = v["id"] == id && v.get("method").is_none();
            seen.push(v);
            if done {
                return seen;
            }
        }
    }

    /// The next `--events` line about `id` (as the server prints it).
    async fn event(&mut self, id: &str) -> String {
        next_event(&mut self.events, &Value::from(id).to_string()).await
    }
}

/// Whether `v` is a response for `id` or a progress notification of `token`.
fn mentions(v: &Value, id: &str, token: &str) -> bool {
    (v["id"] == id && v.get("method").is_none()) || v["params"]["progressToken"] == token
}

/// Calls `slow` (1 s in 50 ms steps, progress asked for), cancels it once
/// it started, and returns the first event that ends it (`DROPPED` or
/// `DONE`) and every line written from the cancel until a later request is
/// answered.
async fn cancel_slow(era: Era, plain: bool) -> (String, Vec<Value>) {
    let mut server = Server::start(era, plain).await;
    let args = json!({"name": "slow", "arguments": {"seconds": 1, "interval_ms": 50}});
    server
        .request_with(
            "slow-1",
            "tools/call",
            args,
            json!({"progressToken": "tok"}),
        )
        .await;
    assert_eq!(server.event("slow-1").await, "STARTED");
    server
        .send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "slow-1", "reason": "the test cancels it"},
        }))
        .await;
    let end = server.event("slow-1").await;
    // Responses are written in one ordered stream: a response or progress
    // for slow-1 queued before the handler's end (an answer, with or
    // without our layer) is written before this one's. (Not `ping`:
    // 2026-07-28 has none.)
    server.request("sync-1", "tools/list", json!({})).await;
    let mut lines = server.until_response("sync-1").await;
    if end == "DROPPED" {
        // Then 250 ms of the server's own work: a handler that still ran
        // would report progress (every 50 ms) meanwhile.
        let args = json!({"name": "slow", "arguments": {"seconds": 0.25, "interval_ms": 50}});
        server.request("after", "tools/call", args).await;
        lines.extend(server.until_response("after").await);
    }
    (end, lines)
}

async fn cancel_drops_the_handler(era: Era) {
    let (end, lines) = cancel_slow(era, false).await;
    assert_eq!(end, "DROPPED", "the handler ran on: {lines:?}");
    // Progress sent before the transport read the cancel may be in the
    // first lines; none may follow the sync's answer, and no response at all.
    let sync = lines
        .iter()
        .position(|v| v["id"] == "sync-1")
        .expect("the sync's answer");
    assert!(
        !lines.iter().any(|v| v["id"] == "slow-1"),
        "the cancelled request was answered: {lines:?}"
    );
    assert!(
        !lines[sync..].iter().any(|v| mentions(v, "slow-1", "tok")),
        "written for the cancelled request after its drop: {lines:?}"
    );
}

async fn plain_runs_the_handler_on(era: Era) {
    let (end, lines) = cancel_slow(era, true).await;
    assert_eq!(end, "DONE", "{lines:?}");
    // tower-mcp alone does not answer a request the peer cancelled either.
    assert!(
        !lines.iter().any(|v| v["id"] == "slow-1"),
        "tower-mcp answered the cancelled request: {lines:?}"
    );
}

/// Cancels `spawned` once it started: the events of its request, in the
/// order printed, until both `TOKEN` and the handler's end are seen.
async fn cancel_spawned(era: Era, plain: bool) -> Vec<String> {
    let mut server = Server::start(era, plain).await;
    let args = json!({"name": "spawned", "arguments": {"seconds": 30, "interval_ms": 50}});
    server.request("spawned-1", "tools/call", args).await;
    assert_eq!(server.event("spawned-1").await, "STARTED");
    server
        .send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "spawned-1", "reason": "the test cancels it"},
        }))
        .await;
    let mut seen = Vec::new();
    while !(seen.iter().any(|k| k == "TOKEN") && seen.iter().any(|k| k == "DROPPED" || k == "DONE"))
    {
        seen.push(server.event("spawned-1").await);
    }
    seen
}

/// The token the spawned work watches fires at the cancel, under the layer
/// and on tower-mcp alone. Under the layer the handler then ends either
/// way: dropped, or (its spawned work having stopped) returning first — a
/// race between the layer's drop and the handler's own end that neither
/// side can order (`run_cancellable` lets a ready answer win; nothing is
/// written for a cancelled request either way); `slow`, which never looks
/// at its token, shows the drop (`cancel_drops_the_handler_*`).
#[tokio::test]
async fn cancel_fires_the_token_of_the_spawned_work() {
    for era in [Era::Modern, Era::Legacy] {
        for plain in [false, true] {
            let seen = cancel_spawned(era, plain).await;
            let token = seen.iter().position(|k| k == "TOKEN");
            let end = seen.iter().position(|k| k == "DROPPED" || k == "DONE");
            assert!(
                token.is_some() && end.is_some(),
                "{era:?}, plain {plain}: {seen:?}"
            );
            if plain {
                // tower-mcp alone: the handler returns once its work stopped.
                assert!(
                    seen.contains(&"DONE".to_owned()),
                    "{era:?}, --plain: {seen:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn cancel_drops_the_handler_2026() {
    cancel_drops_the_handler(Era::Modern).await;
}

#[tokio::test]
async fn cancel_drops_the_handler_2025() {
    cancel_drops_the_handler(Era::Legacy).await;
}

#[tokio::test]
async fn plain_runs_the_handler_on_2026() {
    plain_runs_the_handler_on(Era::Modern).await;
}

#[tokio::test]
async fn plain_runs_the_handler_on_2025() {
    plain_runs_the_handler_on(Era::Legacy).await;
}

#[tokio::test]
async fn tower_mcp_server_command_line() {
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
        &["--plai"],
        &["--events", "extra"],
        &["--listen", "nonsense"],
        &["--tasks", "--task-ttl", "2 weeks"],
        // A TTL without the tasks it would bound.
        &["--task-ttl", "2s"],
    ];
    cli::assert_cli(&example::example("tower_mcp_server"), &flags, malformed).await;
}

/// Over Streamable HTTP (`--listen`: this crate's transport, or
/// tower-mcp's with `--plain`): a `slow` call whose client goes away (the
/// call dropped, its stream closed) drops the handler, through
/// McpRouterService and on tower-mcp alone (its stateless transport runs a
/// request inside its HTTP exchange, which hyper drops on a disconnect).
#[tokio::test]
async fn over_http_a_closed_stream_drops_the_handler() {
    use tower::ServiceExt as _;
    use tower_mcp_cancel::transport::http::HttpClient;
    use tower_mcp_cancel::McpRequest;

    for plain in [false, true] {
        let mut command = tokio::process::Command::new(example::example("tower_mcp_server"));
        command.args(["--events", "--listen", "127.0.0.1:0"]);
        if plain {
            command.arg("--plain");
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn tower_mcp_server --listen");
        let mut events = events_of(&mut child);
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(BOUND, stdout.next_line())
            .await
            .expect("no address printed")
            .unwrap()
            .expect("stdout closed");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not an address line: {line}"));
        let client = HttpClient::new(url.parse().unwrap());
        let call = McpRequest::new("slow-1", "tools/call")
            .with_params(json!({"name": "slow", "arguments": {"seconds": 1, "interval_ms": 50}}));
        let pending = tokio::spawn(client.oneshot(call));
        let id = Value::from("slow-1").to_string();
        assert_eq!(next_event(&mut events, &id).await, "STARTED");
        pending.abort();
        assert_eq!(
            next_event(&mut events, &id).await,
            "DROPPED",
            "plain {plain}"
        );
    }
}

/// Polls `tasks/get` of `task` (a process: in the server's poll steps of
/// 20 ms, at most [`BOUND`]) until its status is not one of `passing`;
/// returns that answer.
#[cfg(feature = "tasks")]
async fn poll_task(server: &mut Server, task: &str, ext: &Value, passing: &[&str]) -> Value {
    let start = tokio::time::Instant::now();
    for n in 0.. {
        let id = format!("get-{task}-{n}");
        server
            .request_with(&id, "tasks/get", json!({"taskId": task}), ext.clone())
            .await;
        let got = server.until_response(&id).await.pop().unwrap();
        if !passing.iter().any(|s| got["result"]["status"] == *s) {
            return got;
        }
        assert!(start.elapsed() < BOUND, "still {}", got["result"]["status"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// `--tasks`: a fixture tool that asks for input runs as a task of the
/// tasks layer, and its input request reaches the client through
/// `tasks/get` and its answer the tool through `tasks/update`: the tool,
/// a tower-mcp tool, found the request's `TaskContext` in its context.
#[cfg(feature = "tasks")]
#[tokio::test]
async fn tower_mcp_server_tasks_an_input_request_goes_out_and_its_answer_comes_back() {
    let ext = json!({"io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }});
    let mut server = Server::start_with(Era::Modern, &["--tasks"]).await;
    server
        .request("discover", "server/discover", json!({}))
        .await;
    let found = server.until_response("discover").await;
    let extensions = &found.last().unwrap()["result"]["capabilities"]["extensions"];
    assert!(
        extensions.get("io.modelcontextprotocol/tasks").is_some(),
        "{found:?}"
    );
    let args = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}});
    server
        .request_with("call", "tools/call", args, ext.clone())
        .await;
    let created = server.until_response("call").await;
    let created = &created.last().unwrap()["result"];
    assert_eq!(created["resultType"], "task", "{created}");
    let task = created["taskId"].as_str().unwrap().to_owned();
    let asked = poll_task(&mut server, &task, &ext, &["working"]).await;
    assert_eq!(asked["result"]["status"], "input_required", "{asked}");
    let request = &asked["result"]["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    let answer = json!({"taskId": task, "inputResponses": {
        "confirm": {"action": "accept", "content": {"confirm": true}}
    }});
    server
        .request_with("update", "tasks/update", answer, ext.clone())
        .await;
    server.until_response("update").await;
    let done = poll_task(&mut server, &task, &ext, &["working", "input_required"]).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    let text = &done["result"]["result"]["content"][0]["text"];
    assert_eq!(text, "deleted a.txt", "{done}");
}
