//! tower-mcp's router served by this crate's stdio server through
//! `McpRouterService`: a cancel right behind its request is never lost,
//! no progress follows the answer, notifications reach the router, and a
//! task tool that never looks at its token stops at `tasks/cancel` and at
//! its TTL. The same exchanges through tower-mcp's own `StdioTransport`
//! show what the server replaces (those tests pin its behaviour).

#[path = "support/pipe.rs"]
mod pipe;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use pipe::{Pipe, BOUND};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tower::ServiceBuilder;
use tower_mcp::extract::{Context, Json, State};
use tower_mcp::{CallToolResult, McpRouter, StdioTransport, ToolBuilder};
use tower_mcp_cancel::tasks::{TaskPolicy, TasksLayer, EXTENSION};
use tower_mcp_cancel::test_util::{DropGuard, DropProbe};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel_tower_mcp::McpRouterService;

/// Which stdio server serves the router.
#[derive(Clone, Copy, Debug)]
enum Server {
    /// This crate's `StdioServer` over `McpRouterService`.
    Ours,
    /// tower-mcp's own `StdioTransport`, no layer.
    TowerMcp,
}

/// What the tools tell the test.
#[derive(Clone)]
struct Tools {
    /// `gated` and `sleepy` send a drop probe of their future here.
    probes: mpsc::UnboundedSender<DropProbe>,
    /// `gated` answers once notified.
    release: Arc<Notify>,
    /// `chatty`'s spawned task reports once notified...
    late: Arc<Notify>,
    /// ... and says so here.
    late_sent: mpsc::UnboundedSender<()>,
}

impl Tools {
    fn guard(&self) -> DropGuard {
        let (probe, guard) = DropProbe::new();
        let _ = self.probes.send(probe);
        guard
    }
}

/// `gated` (answers once released), `chatty` (three progress reports,
/// then an answer; a task it spawned reports once more after it), and
/// `sleepy` (sleeps an hour): none looks at its cancellation token.
/// `initialized` says whether the session is.
fn router(tools: Tools) -> McpRouter {
    let gated = ToolBuilder::new("gated")
        .description("answers once released")
        .extractor_handler(
            tools.clone(),
            |State(tools): State<Tools>, Json(_): Json<Value>| async move {
                let guard = tools.guard();
                tools.release.notified().await;
                guard.finish();
                Ok(CallToolResult::text("released"))
            },
        )
        .build();
    let chatty = ToolBuilder::new("chatty")
        .description("reports progress, answers, and reports again from a task")
        .extractor_handler(
            tools.clone(),
            |State(tools): State<Tools>, ctx: Context, Json(_): Json<Value>| async move {
                for i in 1..=3 {
                    ctx.report_progress(f64::from(i), Some(4.0), None).await;
                }
                let late = ctx.clone();
                tokio::spawn(async move {
                    tools.late.notified().await;
                    late.report_progress(4.0, Some(4.0), Some("late")).await;
                    let _ = tools.late_sent.send(());
                });
                Ok(CallToolResult::text("said"))
            },
        )
        .build();
    let sleepy = ToolBuilder::new("sleepy")
        .description("sleeps an hour")
        .extractor_handler(
            tools,
            |State(tools): State<Tools>, Json(_): Json<Value>| async move {
                let guard = tools.guard();
                tokio::time::sleep(Duration::from_secs(3600)).await;
                guard.finish();
                Ok(CallToolResult::text("slept"))
            },
        )
        .build();
    let initialized = ToolBuilder::new("initialized")
        .description("whether the session saw notifications/initialized")
        .extractor_handler((), |ctx: Context, Json(_): Json<Value>| async move {
            let done = ctx.session().is_some_and(|s| s.is_initialized());
            Ok(CallToolResult::text(done.to_string()))
        })
        .build();
    McpRouter::new()
        .server_info("test", "0")
        .tool(gated)
        .tool(chatty)
        .tool(sleepy)
        .tool(initialized)
}

/// The client's end of a server over pipes, and what the tools report.
struct Peer {
    pipe: Pipe,
    probes: mpsc::UnboundedReceiver<DropProbe>,
    release: Arc<Notify>,
    late: Arc<Notify>,
    late_sent: mpsc::UnboundedReceiver<()>,
}

impl Peer {
    /// Serves the test router with `server`, `tasks` over it (ours only).
    fn serve(server: Server, tasks: Option<TasksLayer>) -> Peer {
        let (probes_tx, probes) = mpsc::unbounded_channel();
        let (late_tx, late_sent) = mpsc::unbounded_channel();
        let tools = Tools {
            probes: probes_tx,
            release: Arc::default(),
            late: Arc::default(),
            late_sent: late_tx,
        };
        let (release, late) = (tools.release.clone(), tools.late.clone());
        let router = router(tools);
        let (pipe, theirs) = Pipe::new();
        let (server_r, server_w) = tokio::io::split(theirs);
        match server {
            Server::Ours => {
                let service = McpRouterService::new(router);
                let input = service.route_notifications(server_r);
                let server = StdioServer::new();
                match tasks {
                    Some(tasks) => {
                        let stack = ServiceBuilder::new().layer(tasks).service(service);
                        tokio::spawn(server.serve(stack, input, server_w));
                    }
                    None => {
                        tokio::spawn(server.serve(service, input, server_w));
                    }
                }
            }
            Server::TowerMcp => {
                let mut t = StdioTransport::new(router);
                tokio::spawn(async move { t.run_with_streams(server_r, server_w).await });
            }
        }
        Peer {
            pipe,
            probes,
            release,
            late,
            late_sent,
        }
    }

    /// Serves with `server` and does the 2025 handshake.
    async fn start(server: Server) -> Peer {
        let mut peer = Peer::serve(server, None);
        peer.handshake().await;
        peer
    }

    /// The drop probe of the next tool future that started.
    async fn probe(&mut self) -> DropProbe {
        tokio::time::timeout(BOUND, self.probes.recv())
            .await
            .expect("no tool started")
            .expect("the tools are gone")
    }
}

impl Deref for Peer {
    type Target = Pipe;

    fn deref(&self) -> &Pipe {
        &self.pipe
    }
}

impl DerefMut for Peer {
    fn deref_mut(&mut self) -> &mut Pipe {
        &mut self.pipe
    }
}

fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn call(id: &str, tool: &str, meta: Value) -> Value {
    request(
        id,
        "tools/call",
        json!({"name": tool, "arguments": {}, "_meta": meta}),
    )
}

fn ping(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

fn cancel(id: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "the test's"},
    })
}

/// Whether a `tools/call` of `gated` whose cancel is in the same write is
/// answered (after a `ping` behind the cancel was answered, the call is
/// released), and whether its handler, if it started, ran to its end.
async fn right_behind(server: Server) -> (bool, bool) {
    let mut peer = Peer::start(server).await;
    peer.send(&[
        call("call", "gated", json!({})),
        cancel("call"),
        ping("ping"),
    ])
    .await;
    let mut lines = peer.until_response("ping").await;
    if !lines.iter().any(|v| v["id"] == "call") {
        peer.release.notify_one();
        lines.extend(peer.answered("call").await.unwrap_or_default());
    }
    let answered = lines.iter().any(|v| v["id"] == "call");
    // A handler the cancel dropped before it was first polled never started.
    let finished = peer.probes.try_recv().is_ok_and(|p| p.is_finished());
    (answered, finished)
}

// A paused clock: a call that is never answered is known at once.
#[tokio::test(start_paused = true)]
async fn a_cancel_right_behind_its_request_drops_the_handler_and_nothing_is_answered() {
    for _ in 0..20 {
        let (answered, finished) = right_behind(Server::Ours).await;
        assert!(!answered, "the cancelled call was answered");
        assert!(!finished, "the cancelled call's handler ran to its end");
    }
}

// The same exchange through tower-mcp's StdioTransport: the cancel is lost.
#[tokio::test(start_paused = true)]
async fn through_tower_mcps_stdio_transport_a_cancel_right_behind_its_request_is_lost() {
    let (answered, finished) = right_behind(Server::TowerMcp).await;
    assert!(
        answered && finished,
        "tower-mcp now honours a cancel right behind its request; update the docs"
    );
}

/// The lines up to `chatty`'s answer, and those between it and the answer
/// to a `ping` sent once the task `chatty` spawned reported again.
async fn chatty(server: Server) -> (Vec<Value>, Vec<Value>) {
    let mut peer = Peer::start(server).await;
    peer.send(&[call("call", "chatty", json!({"progressToken": "p"}))])
        .await;
    let before = peer.until_response("call").await;
    peer.late.notify_one();
    tokio::time::timeout(BOUND, peer.late_sent.recv())
        .await
        .expect("the late report never came");
    peer.send(&[ping("ping")]).await;
    let after = peer.until_response("ping").await;
    (before, after)
}

fn progress(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .collect()
}

#[tokio::test]
async fn progress_goes_out_before_the_answer_and_none_after_it() {
    for _ in 0..20 {
        let (before, after) = chatty(Server::Ours).await;
        let reported = progress(&before);
        assert_eq!(reported.len(), 3, "{before:?}");
        assert!(reported.iter().all(|v| v["params"]["progressToken"] == "p"));
        assert!(progress(&after).is_empty(), "after the answer: {after:?}");
    }
}

// The same exchange through tower-mcp's StdioTransport: the spawned task's
// report is written after the answer (and, as often as not, the reports the
// tool made before it returned too).
#[tokio::test]
async fn through_tower_mcps_stdio_transport_progress_follows_the_answer() {
    let (_, after) = chatty(Server::TowerMcp).await;
    assert!(
        progress(&after)
            .iter()
            .any(|v| v["params"]["message"] == "late"),
        "{after:?}"
    );
}

/// What the `initialized` tool answers, as call `id`.
async fn initialized(peer: &mut Peer, id: &str) -> Value {
    peer.send(&[call(id, "initialized", json!({}))]).await;
    let lines = peer.until_response(id).await;
    lines.last().unwrap()["result"]["content"][0]["text"].clone()
}

#[tokio::test]
async fn notifications_reach_the_router() {
    let mut peer = Peer::serve(Server::Ours, None);
    let init = json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    });
    peer.send(&[request("init", "initialize", init)]).await;
    peer.until_response("init").await;
    assert_eq!(initialized(&mut peer, "before").await, "false");
    peer.send(&[json!({"jsonrpc": "2.0", "method": "notifications/initialized"})])
        .await;
    assert_eq!(initialized(&mut peer, "after").await, "true");
}

/// The `_meta` of a 2026-07-28 request that declares the tasks extension.
fn tasks_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
    })
}

/// Serves with `sleepy` a task (at once), calls it, and returns the peer,
/// the task's id and the drop probe of its work.
async fn sleepy_task(ttl: Option<Duration>) -> (Peer, String, DropProbe) {
    let tasks = TasksLayer::new()
        .tool("sleepy", TaskPolicy::required().after(Duration::ZERO))
        .ttl(ttl);
    let mut peer = Peer::serve(Server::Ours, Some(tasks));
    peer.send(&[call("call", "sleepy", tasks_meta())]).await;
    let probe = peer.probe().await;
    let lines = peer.until_response("call").await;
    let created = &lines.last().unwrap()["result"];
    assert_eq!(created["resultType"], "task", "{lines:?}");
    let id = created["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id: {created}"))
        .to_owned();
    (peer, id, probe)
}

/// `tasks/get` of `task`: its status.
async fn status(peer: &mut Peer, task: &str) -> Value {
    let mut params = json!({"taskId": task});
    params["_meta"] = tasks_meta();
    peer.send(&[request("get", "tasks/get", params)]).await;
    let lines = peer.until_response("get").await;
    lines.last().unwrap()["result"]["status"].clone()
}

#[tokio::test(start_paused = true)]
async fn a_task_tool_that_never_looks_at_its_token_stops_at_tasks_cancel() {
    let (mut peer, task, probe) = sleepy_task(None).await;
    assert!(!probe.is_dropped());
    let mut params = json!({"taskId": task});
    params["_meta"] = tasks_meta();
    peer.send(&[request("cancel", "tasks/cancel", params)])
        .await;
    let lines = peer.until_response("cancel").await;
    assert!(lines.last().unwrap().get("result").is_some(), "{lines:?}");
    probe.dropped().await;
    assert!(probe.was_cancelled());
    assert_eq!(status(&mut peer, &task).await, "cancelled");
}

#[tokio::test(start_paused = true)]
async fn a_task_tool_that_never_looks_at_its_token_stops_at_its_ttl() {
    let ttl = Duration::from_secs(5);
    let (mut peer, task, probe) = sleepy_task(Some(ttl)).await;
    let started = tokio::time::Instant::now();
    let dropped = probe.dropped().await;
    assert!(probe.was_cancelled());
    let after = dropped - started;
    assert!(
        after <= ttl && after + Duration::from_secs(1) >= ttl,
        "dropped {after:?} after the call, TTL {ttl:?}"
    );
    assert_eq!(status(&mut peer, &task).await, "failed");
}

// The tasks extension removed the 2025-11-25 `task` parameter and has a
// server ignore it; tower-mcp refuses such a 2026-07-28 call (-32602).
#[tokio::test]
async fn a_2026_call_with_the_removed_task_parameter_is_served_as_a_plain_call() {
    let mut peer = Peer::serve(Server::Ours, None);
    let mut req = call("call", "initialized", tasks_meta());
    req["params"]["task"] = json!({"ttl": 60_000});
    peer.send(&[req]).await;
    let lines = peer.until_response("call").await;
    let answer = lines.last().unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    assert!(answer["result"]["content"].is_array(), "{answer}");
}
