//! A tower-mcp server (`McpRouter` with `ToolBuilder` tools, served by its
//! `StdioTransport`) under `tower_mcp_cancel_tower_mcp::RouterLayer`, driven
//! in-process over pipes by this crate's `StdioClient`: an explicit cancel,
//! a server deadline and the progress idle limit each drop the
//! uncooperative handler's future; nothing is written for a cancelled id;
//! plain tower-mcp, for contrast, runs the handler to its end. Every line
//! the server writes is recorded by a relay between the two.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tower::ServiceExt;
use tower_mcp::extract::{Context, Json};
use tower_mcp::{CallToolResult, McpRouter, StdioTransport, ToolBuilder};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{McpRequest, ProgressResetLayer, TimeoutLayer};
use tower_mcp_cancel_tower_mcp::RouterLayer;

type Events = mpsc::UnboundedSender<(&'static str, Value)>;

/// Sends `DROPPED` unless finished.
struct Probe(Events, Value, bool);

impl Drop for Probe {
    fn drop(&mut self) {
        let kind = if self.2 { "DONE" } else { "DROPPED" };
        let _ = self.0.send((kind, self.1.clone()));
    }
}

/// Sends `TOKEN_FIRED_BEFORE_DROP` or `TOKEN_LIVE_AT_DROP` when dropped.
struct TokenAtDrop(Events, Value, tower_mcp::context::CancellationToken);

impl Drop for TokenAtDrop {
    fn drop(&mut self) {
        let kind = if self.2.is_cancelled() {
            "TOKEN_FIRED_BEFORE_DROP"
        } else {
            "TOKEN_LIVE_AT_DROP"
        };
        let _ = self.0.send((kind, self.1.clone()));
    }
}

/// `watched` (never ends; says at its drop whether its token had fired),
/// `slow {steps, interval_ms}` (never checks its token, reports progress
/// when asked), `spawned` (a spawned task that stops on the token), `late`
/// (answers at once, leaving a reporter task that sends 5 progress
/// notifications once `release` is notified, then a tools list_changed
/// notification as a sentinel, then `REPORTED`) and `unordered` (reports
/// 5, 3, 3, 6, then the sentinel, then answers).
fn router(events: Events, release: Arc<tokio::sync::Notify>) -> McpRouter {
    let watched_events = events.clone();
    let late = ToolBuilder::new("late")
        .description("answers at once; its reporter outlives it")
        .extractor_handler(
            (events.clone(), release),
            |tower_mcp::extract::State((events, release)): tower_mcp::extract::State<(
                Events,
                Arc<tokio::sync::Notify>,
            )>,
             ctx: Context,
             Json(_args): Json<Value>| async move {
                let id = serde_json::to_value(ctx.request_id()).unwrap();
                tokio::spawn(async move {
                    release.notified().await;
                    for i in 1..=5 {
                        ctx.report_progress(i as f64, None, None).await;
                    }
                    ctx.notify_tools_list_changed();
                    let _ = events.send(("REPORTED", id));
                });
                Ok(CallToolResult::text("done"))
            },
        )
        .build();
    let unordered = ToolBuilder::new("unordered")
        .description("reports progress that does not always increase")
        .extractor_handler(
            (),
            |tower_mcp::extract::State(()): tower_mcp::extract::State<()>,
             ctx: Context,
             Json(_args): Json<Value>| async move {
                for p in [5.0, 3.0, 3.0, 6.0] {
                    ctx.report_progress(p, None, None).await;
                }
                ctx.notify_tools_list_changed();
                Ok(CallToolResult::text("done"))
            },
        )
        .build();
    let slow = ToolBuilder::new("slow")
        .description("sleeps; never checks its token")
        .extractor_handler(
            events.clone(),
            |tower_mcp::extract::State(events): tower_mcp::extract::State<Events>,
             ctx: Context,
             Json(args): Json<Value>| async move {
                let id = serde_json::to_value(ctx.request_id()).unwrap();
                let _ = events.send(("STARTED", id.clone()));
                let mut probe = Probe(events, id, false);
                let steps = args["steps"].as_u64().unwrap_or(1000);
                let interval = Duration::from_millis(args["interval_ms"].as_u64().unwrap_or(1000));
                for i in 1..=steps {
                    tokio::time::sleep(interval).await;
                    ctx.report_progress(i as f64, Some(steps as f64), None)
                        .await;
                }
                probe.2 = true;
                Ok(CallToolResult::text("done"))
            },
        )
        .build();
    let spawned = ToolBuilder::new("spawned")
        .description("works in a spawned task that stops on its token")
        .extractor_handler(
            events,
            |tower_mcp::extract::State(events): tower_mcp::extract::State<Events>,
             ctx: Context,
             Json(_args): Json<Value>| async move {
                let id = serde_json::to_value(ctx.request_id()).unwrap();
                let _ = events.send(("STARTED", id.clone()));
                let mut probe = Probe(events.clone(), id.clone(), false);
                let token = ctx.cancellation_token();
                tokio::spawn(async move {
                    token.cancelled().await;
                    let _ = events.send(("TOKEN", id));
                });
                std::future::pending::<()>().await;
                probe.2 = true;
                Ok(CallToolResult::text("done"))
            },
        )
        .build();
    let watched = ToolBuilder::new("watched")
        .description("never ends; says at its drop whether its token had fired")
        .extractor_handler(
            watched_events,
            |tower_mcp::extract::State(events): tower_mcp::extract::State<Events>,
             ctx: Context,
             Json(_args): Json<Value>| async move {
                let id = serde_json::to_value(ctx.request_id()).unwrap();
                let _ = events.send(("STARTED", id.clone()));
                let _at_drop = TokenAtDrop(events, id, ctx.cancellation_token());
                std::future::pending::<()>().await;
                Ok(CallToolResult::text("done"))
            },
        )
        .build();
    McpRouter::new()
        .server_info("tower-mcp-test", "0")
        .tool(watched)
        .tool(slow)
        .tool(spawned)
        .tool(late)
        .tool(unordered)
}

struct Harness {
    client: StdioClient,
    events: mpsc::UnboundedReceiver<(&'static str, Value)>,
    /// Every line the server wrote, in order.
    written: Arc<Mutex<Vec<Value>>>,
    /// Each line as the relay records it.
    lines: mpsc::UnboundedReceiver<Value>,
    relay: tokio::task::JoinHandle<()>,
    /// Releases a `late` tool's reporter.
    release: Arc<tokio::sync::Notify>,
}

/// Serves the router over pipes (under `layer`, if any), relays its output
/// to a `StdioClient` recording every line, and does the legacy handshake.
async fn start(layer: Option<RouterLayer>) -> Harness {
    let (tx, events) = mpsc::unbounded_channel();
    let (client_w, server_r) = tokio::io::duplex(64 * 1024);
    let (server_w, relay_r) = tokio::io::duplex(64 * 1024);
    let (mut relay_w, client_r) = tokio::io::duplex(64 * 1024);
    let release = Arc::new(tokio::sync::Notify::new());
    let transport = StdioTransport::new(router(tx, release.clone()));
    match layer {
        Some(layer) => {
            let mut transport = transport.layer(layer);
            tokio::spawn(async move { transport.run_with_streams(server_r, server_w).await });
        }
        None => {
            let mut transport = transport;
            tokio::spawn(async move { transport.run_with_streams(server_r, server_w).await });
        }
    }
    let written = Arc::new(Mutex::new(Vec::new()));
    let log = written.clone();
    let (lines_tx, lines_rx) = mpsc::unbounded_channel();
    let relay = tokio::spawn(async move {
        let mut lines = BufReader::new(relay_r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let v: Value = serde_json::from_str(&line).unwrap();
            log.lock().unwrap().push(v.clone());
            let _ = lines_tx.send(v);
            if relay_w
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let client = StdioClient::new(client_r, client_w);
    let init = McpRequest::new(0, "initialize").with_params(json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    }));
    client.clone().oneshot(init).await.unwrap();
    client
        .notify("notifications/initialized", &json!({}))
        .unwrap();
    Harness {
        client,
        events,
        written,
        lines: lines_rx,
        relay,
        release,
    }
}

fn call(id: i64, tool: &str, args: Value) -> McpRequest {
    McpRequest::new(id, "tools/call").with_params(json!({"name": tool, "arguments": args}))
}

impl Harness {
    /// Waits for the event `kind` of request `id`.
    async fn event(&mut self, kind: &str, id: i64) {
        loop {
            let (k, i) = self.events.recv().await.expect("server gone");
            if k == kind && i == json!(id) {
                return;
            }
            assert!(
                !(i == json!(id) && (k == "DONE" || k == "DROPPED")),
                "{id}: {k} where {kind} was expected"
            );
        }
    }

    /// Waits for `DROPPED` and `TOKEN` of request `id`, in either order:
    /// tower-mcp fires the token for the peer's cancel itself, so a task
    /// watching it may see it before the layer drops the handler.
    async fn dropped_and_token(&mut self, id: i64) {
        let mut seen = (false, false);
        while seen != (true, true) {
            let (k, i) = self.events.recv().await.expect("server gone");
            if i != json!(id) {
                continue;
            }
            match k {
                "DROPPED" => seen.0 = true,
                "TOKEN" => seen.1 = true,
                "DONE" => panic!("{id}: DONE where DROPPED was expected"),
                _ => {}
            }
        }
    }

    /// Closes the client, waits until the server's output ends, and checks
    /// that it wrote nothing for `id`.
    async fn assert_nothing_written_for(self, id: i64) {
        self.client.shutdown().await.unwrap();
        self.relay.await.unwrap();
        let written = self.written.lock().unwrap();
        assert!(
            !written.iter().any(|v| v["id"] == json!(id)),
            "the server wrote for the cancelled id {id}: {written:?}"
        );
    }
}

#[tokio::test]
async fn an_explicit_cancel_drops_the_handler_fires_its_token_and_nothing_is_written_for_it() {
    let mut h = start(Some(RouterLayer::new())).await;
    let pending = tokio::spawn(h.client.clone().oneshot(call(7, "spawned", json!({}))));
    h.event("STARTED", 7).await;
    // Dropping the call's future is the client's cancel: it writes
    // notifications/cancelled.
    pending.abort();
    h.dropped_and_token(7).await;
    let ping = h.client.clone().oneshot(McpRequest::new(8, "ping")).await;
    assert!(ping.is_ok(), "{ping:?}");
    h.assert_nothing_written_for(7).await;
}

#[tokio::test]
async fn a_server_deadline_drops_the_handler_and_answers_with_an_error() {
    let layer = RouterLayer::new().timeout(
        TimeoutLayer::new(Duration::from_secs(60)).method("tools/call", Duration::from_millis(200)),
    );
    let mut h = start(Some(layer)).await;
    let err = h
        .client
        .clone()
        .oneshot(call(7, "spawned", json!({})))
        .await
        .unwrap_err();
    let err = err
        .downcast_ref::<ErrorObject>()
        .expect("an error response");
    assert_eq!(err.code, ErrorObject::INTERNAL_ERROR, "{err:?}");
    assert_eq!(err.data.as_ref().unwrap()["limit"], "timeout", "{err:?}");
    h.event("DROPPED", 7).await;
    h.event("TOKEN", 7).await;
}

/// The handler's `ctx.cancellation_token()` fires at the cancel — here a
/// server deadline inside the stack — and so before its future is
/// dropped, not at the drop.
#[tokio::test]
async fn a_handlers_token_fires_at_the_cancel_before_its_drop() {
    let layer = RouterLayer::new().timeout(TimeoutLayer::new(Duration::from_millis(200)));
    let mut h = start(Some(layer)).await;
    let err = h
        .client
        .clone()
        .oneshot(call(7, "watched", json!({})))
        .await
        .unwrap_err();
    assert!(err.downcast_ref::<ErrorObject>().is_some(), "{err:?}");
    loop {
        let (k, i) = h.events.recv().await.expect("server gone");
        if i != json!(7) || k == "STARTED" {
            continue;
        }
        assert_eq!(k, "TOKEN_FIRED_BEFORE_DROP");
        break;
    }
}

#[tokio::test]
async fn progress_keeps_a_request_alive_and_silence_ends_it() {
    let layer = RouterLayer::new()
        .progress(ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(30)));
    let mut h = start(Some(layer)).await;
    // 10 steps of 100 ms with a progress token: 1 s in all, idle never 400 ms.
    let args = json!({"steps": 10, "interval_ms": 100});
    let req = McpRequest::new(7, "tools/call")
        .with_params(json!({"name": "slow", "arguments": args, "_meta": {"progressToken": "p7"}}));
    let ok = h.client.clone().oneshot(req).await;
    assert!(ok.is_ok(), "{ok:?}");
    h.event("DONE", 7).await;
    // The same without a token: nothing resets the idle limit.
    let err = h
        .client
        .clone()
        .oneshot(call(8, "slow", args))
        .await
        .unwrap_err();
    let err = err
        .downcast_ref::<ErrorObject>()
        .expect("an error response");
    assert_eq!(
        err.data.as_ref().unwrap()["limit"],
        "idle timeout",
        "{err:?}"
    );
    h.event("DROPPED", 8).await;
}

/// A `tools/call` of `tool` with the progress token `token`.
fn call_with_token(id: i64, tool: &str, token: &str) -> McpRequest {
    McpRequest::new(id, "tools/call")
        .with_params(json!({"name": tool, "arguments": {}, "_meta": {"progressToken": token}}))
}

impl Harness {
    /// The progress values written for `token` before the answer to `id`
    /// and after it, until both the answer and the sentinel are written
    /// (tower-mcp sends notifications through one queue, in order, so the
    /// sentinel follows what was sent before it).
    async fn progress_written_for(&mut self, id: i64, token: &str) -> (Vec<f64>, Vec<f64>) {
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let (mut answered, mut sentinel) = (false, false);
        while !(answered && sentinel) {
            let v = self.lines.recv().await.expect("server output ended");
            sentinel |= v["method"] == "notifications/tools/list_changed";
            if v["id"] == json!(id) && v.get("method").is_none() {
                answered = true;
            }
            if v["method"] == "notifications/progress"
                && v["params"]["progressToken"] == json!(token)
            {
                let p = v["params"]["progress"].as_f64().unwrap();
                if answered {
                    after.push(p)
                } else {
                    before.push(p)
                }
            }
        }
        (before, after)
    }
}

#[tokio::test]
async fn nothing_of_a_request_is_written_after_its_answer_even_by_a_task_it_spawned() {
    let mut h = start(Some(RouterLayer::new())).await;
    let ok = h
        .client
        .clone()
        .oneshot(call_with_token(7, "late", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    // The request is answered; its reporter now sends 5 progress reports.
    h.release.notify_one();
    h.event("REPORTED", 7).await;
    let (_, after) = h.progress_written_for(7, "p7").await;
    assert!(
        after.is_empty(),
        "progress written after the answer: {after:?}"
    );
}

#[tokio::test]
async fn progress_that_does_not_increase_is_not_written() {
    let mut h = start(Some(RouterLayer::new())).await;
    let ok = h
        .client
        .clone()
        .oneshot(call_with_token(7, "unordered", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let (before, after) = h.progress_written_for(7, "p7").await;
    let all: Vec<f64> = before.into_iter().chain(after).collect();
    assert_eq!(all, vec![5.0, 6.0]);
}

// sep-2663 removed tools/call's `task` parameter and has servers ignore
// it; tower-mcp alone refuses a 2026-07-28 call with it (-32602).
#[tokio::test]
async fn a_2026_call_with_the_removed_task_parameter_is_served_as_a_plain_call() {
    for layer in [Some(RouterLayer::new()), None] {
        let plain = layer.is_none();
        let h = start(layer).await;
        let req = McpRequest::new(7, "tools/call").with_params(json!({
            "name": "slow", "arguments": {"steps": 1, "interval_ms": 1},
            "task": {"ttl": 60_000},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }));
        let out = h.client.clone().oneshot(req).await;
        if plain {
            assert!(out.is_err(), "tower-mcp now ignores it: {out:?}");
        } else {
            assert!(out.is_ok_and(|r| r["content"].is_array()));
        }
    }
}

#[tokio::test]
async fn plain_tower_mcp_runs_a_cancelled_handler_to_its_end() {
    let mut h = start(None).await;
    let args = json!({"steps": 3, "interval_ms": 100});
    let pending = tokio::spawn(h.client.clone().oneshot(call(7, "slow", args)));
    h.event("STARTED", 7).await;
    pending.abort();
    // tower-mcp fired the handler's token, but nothing dropped its future.
    h.event("DONE", 7).await;
}

/// A per-tool deadline reaches the layers through tower-mcp: `slow` (2 s)
/// is dropped at 2 s, another tool at the `tools/call` deadline (10 s).
#[tokio::test(start_paused = true)]
async fn a_tools_deadline_drops_that_tool_and_the_methods_the_others() {
    let layer = RouterLayer::new().timeout(
        TimeoutLayer::new(Duration::from_secs(60))
            .method("tools/call", Duration::from_secs(10))
            .tool("slow", Duration::from_secs(2)),
    );
    let mut h = start(Some(layer)).await;
    for (id, tool, limit) in [(7, "slow", 2), (8, "spawned", 10)] {
        let t0 = tokio::time::Instant::now();
        let err = h
            .client
            .clone()
            .oneshot(call(id, tool, json!({})))
            .await
            .unwrap_err();
        let err = err
            .downcast_ref::<ErrorObject>()
            .expect("an error response");
        assert_eq!(err.data.as_ref().unwrap()["limit"], "timeout", "{err:?}");
        h.event("DROPPED", id).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(limit), "{tool}");
    }
}

/// A per-tool idle limit, likewise.
#[tokio::test(start_paused = true)]
async fn a_tools_idle_limit_drops_that_tool_and_the_methods_the_others() {
    use tower_mcp_cancel::ProgressLimits;
    let limits = |idle| ProgressLimits {
        idle: Duration::from_secs(idle),
        max: Some(Duration::from_secs(600)),
    };
    let layer = RouterLayer::new().progress(
        ProgressResetLayer::new(Duration::from_secs(60))
            .method("tools/call", limits(10))
            .tool("slow", limits(2)),
    );
    let mut h = start(Some(layer)).await;
    for (id, tool, limit) in [(7, "slow", 2), (8, "spawned", 10)] {
        let t0 = tokio::time::Instant::now();
        let err = h
            .client
            .clone()
            .oneshot(call(id, tool, json!({})))
            .await
            .unwrap_err();
        let err = err
            .downcast_ref::<ErrorObject>()
            .expect("an error response");
        assert_eq!(
            err.data.as_ref().unwrap()["limit"],
            "idle timeout",
            "{err:?}"
        );
        h.event("DROPPED", id).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(limit), "{tool}");
    }
}
