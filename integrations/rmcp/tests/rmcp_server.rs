//! An rmcp server wrapped in `tower_mcp_cancel_rmcp::Cancellable`, driven
//! in-process over pipes by this crate's `StdioClient`: an explicit cancel,
//! a client timeout, a server deadline and the progress idle limit each
//! drop the uncooperative handler's future; nothing is written for a
//! cancelled id; plain rmcp, for contrast, runs the handler to its end.
//! Every line the server writes is recorded by a relay between the two.
//! The same over Streamable HTTP is [`http`]'s.

#[path = "support/relay.rs"]
mod relay;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tower::{Layer, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer};
use tower_mcp_cancel_rmcp::Cancellable;

use relay::{relayed, Relayed};

type Events = mpsc::UnboundedSender<(&'static str, Value)>;

/// `slow {seconds, interval_ms}` (never checks its token, reports progress
/// when asked), `spawned` (a spawned task that stops on the token),
/// `late` (answers at once, leaving a reporter task that sends 5 progress
/// notifications once the test releases it, then sends `REPORTED`) and
/// `unordered` (reports 5, 3, 3, 6, then answers).
#[derive(Clone)]
struct Tools(Events, Arc<tokio::sync::Notify>);

/// Sends `DROPPED` unless finished.
struct Probe(Events, Value, bool);

impl Drop for Probe {
    fn drop(&mut self) {
        let kind = if self.2 { "DONE" } else { "DROPPED" };
        let _ = self.0.send((kind, self.1.clone()));
    }
}

/// Sends `TOKEN_FIRED_BEFORE_DROP` or `TOKEN_LIVE_AT_DROP` when dropped.
struct TokenAtDrop(Events, Value, tokio_util::sync::CancellationToken);

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

/// Sends, when dropped, why the request ended, as the request's
/// `Cancellation` in the handler's `context.extensions` says:
/// `REASON_CLIENT_DISCONNECTED`, `REASON_RMCP` (rmcp's `ct`, no reason of
/// its own), `REASON_OTHER`, or `REASON_NONE` (no cancel, or no
/// `Cancellation` there).
struct ReasonAtDrop(Events, Value, Option<tower_mcp_cancel::Cancellation>);

impl Drop for ReasonAtDrop {
    fn drop(&mut self) {
        use tower_mcp_cancel::CancelReason;
        let kind = match self.2.as_ref().and_then(|c| c.reason()) {
            Some(CancelReason::ClientDisconnected) => "REASON_CLIENT_DISCONNECTED",
            Some(CancelReason::Other(r)) if r.starts_with("rmcp cancelled") => "REASON_RMCP",
            Some(_) => "REASON_OTHER",
            None => "REASON_NONE",
        };
        let _ = self.0.send((kind, self.1.clone()));
    }
}

fn schema() -> Arc<serde_json::Map<String, Value>> {
    Arc::new(json!({"type": "object"}).as_object().unwrap().clone())
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("slow", "sleeps", schema()),
            Tool::new("spawned", "works in a spawned task", schema()),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let id = serde_json::to_value(&context.id).unwrap();
        let _ = self.0.send(("STARTED", id.clone()));
        let mut probe = Probe(self.0.clone(), id.clone(), false);
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let steps = args["steps"].as_u64().unwrap_or(1000);
        let interval = Duration::from_millis(args["interval_ms"].as_u64().unwrap_or(1000));
        match request.name.as_ref() {
            "late" => {
                let (peer, release, events) =
                    (context.peer.clone(), self.1.clone(), self.0.clone());
                let token = context.meta.get_progress_token().expect("a progress token");
                tokio::spawn(async move {
                    release.notified().await;
                    for i in 1..=5 {
                        let p = ProgressNotificationParam::new(token.clone(), i as f64);
                        let _ = peer.notify_progress(p).await;
                    }
                    let _ = events.send(("REPORTED", id));
                });
            }
            "unordered" => {
                let token = context.meta.get_progress_token().expect("a progress token");
                for p in [5.0, 3.0, 3.0, 6.0] {
                    let p = ProgressNotificationParam::new(token.clone(), p);
                    let _ = context.peer.notify_progress(p).await;
                }
            }
            "slow" => {
                let token = context.meta.get_progress_token();
                for i in 1..=steps {
                    tokio::time::sleep(interval).await;
                    if let Some(t) = &token {
                        let p = ProgressNotificationParam::new(t.clone(), i as f64);
                        let _ = context.peer.notify_progress(p).await;
                    }
                }
            }
            "reason" => {
                let cancellation = context.extensions.get().cloned();
                let _at_drop = ReasonAtDrop(self.0.clone(), id.clone(), cancellation);
                std::future::pending::<()>().await;
            }
            "watched" => {
                let _at_drop = TokenAtDrop(self.0.clone(), id.clone(), context.ct.clone());
                std::future::pending::<()>().await;
            }
            _ => {
                let (ct, events) = (context.ct.clone(), self.0.clone());
                tokio::spawn(async move {
                    ct.cancelled().await;
                    let _ = events.send(("TOKEN", id));
                });
                std::future::pending::<()>().await;
            }
        }
        probe.2 = true;
        Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into())
    }
}

struct Harness {
    client: StdioClient,
    events: mpsc::UnboundedReceiver<(&'static str, Value)>,
    /// Every line the server wrote, in order.
    written: Arc<Mutex<Vec<Value>>>,
    relay: tokio::task::JoinHandle<()>,
    /// Releases a `late` tool's reporter.
    release: Arc<tokio::sync::Notify>,
}

/// Serves `wrap(Tools)` over pipes, relays its output to a `StdioClient`
/// recording every line, and does the legacy handshake.
async fn start(wrap: impl FnOnce(Tools) -> Option<Cancellable<Tools>>) -> Harness {
    let (tx, events) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let tools = Tools(tx, release.clone());
    let wrapped = wrap(tools.clone());
    let (
        Relayed {
            client_r,
            client_w,
            written,
        },
        relay,
    ) = relayed(|server_r, server_w| async move {
        match wrapped {
            Some(c) => {
                let running = c.serve((server_r, server_w)).await.unwrap();
                let _ = running.waiting().await;
            }
            None => {
                let running = tools.serve((server_r, server_w)).await.unwrap();
                let _ = running.waiting().await;
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

fn cancellable(tools: Tools) -> Option<Cancellable<Tools>> {
    Some(Cancellable::new(tools))
}

#[tokio::test]
async fn an_explicit_cancel_drops_the_handler_and_nothing_is_written_for_it() {
    let mut h = start(cancellable).await;
    let pending = tokio::spawn(h.client.clone().oneshot(call(7, "slow", json!({}))));
    h.event("STARTED", 7).await;
    // Dropping the call's future is the client's cancel: it writes
    // notifications/cancelled.
    pending.abort();
    h.event("DROPPED", 7).await;
    let ping = h.client.clone().oneshot(McpRequest::new(8, "ping")).await;
    assert!(ping.is_ok(), "{ping:?}");
    h.assert_nothing_written_for(7).await;
}

#[tokio::test]
async fn a_client_timeout_drops_the_handler_and_nothing_is_written_for_it() {
    let mut h = start(cancellable).await;
    let svc = TimeoutLayer::new(Duration::from_millis(200)).layer(h.client.clone());
    let err = svc.oneshot(call(7, "slow", json!({}))).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Limit::Timeout
    );
    h.event("DROPPED", 7).await;
    h.assert_nothing_written_for(7).await;
}

#[tokio::test]
async fn a_server_deadline_drops_the_handler_fires_its_token_and_answers_with_an_error() {
    let mut h = start(|t| {
        Some(
            Cancellable::new(t).timeout(
                TimeoutLayer::new(Duration::from_secs(60))
                    .method("tools/call", Duration::from_millis(200)),
            ),
        )
    })
    .await;
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

/// The handler's `context.ct` fires at the cancel — here a server
/// deadline inside the stack — and so before its future is dropped.
#[tokio::test]
async fn a_handlers_token_fires_at_the_cancel_before_its_drop() {
    let mut h =
        start(|t| Some(Cancellable::new(t).timeout(TimeoutLayer::new(Duration::from_millis(200)))))
            .await;
    let err = h
        .client
        .clone()
        .oneshot(call(7, "watched", json!({})))
        .await
        .unwrap_err();
    assert!(err.downcast_ref::<ErrorObject>().is_some(), "{err:?}");
    h.event("TOKEN_FIRED_BEFORE_DROP", 7).await;
}

#[tokio::test]
async fn progress_keeps_a_request_alive_and_silence_ends_it() {
    let mut h = start(|t| {
        Some(Cancellable::new(t).progress(
            ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(30)),
        ))
    })
    .await;
    // 10 steps of 100 ms with a progress token: 1 s in all, idle never 400 ms.
    let args = json!({"steps": 10, "interval_ms": 100});
    let mut req = call(7, "slow", args.clone());
    req = req
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
    /// The progress values written for `token`, up to the answer of a
    /// `ping` sent now (the relay records a line before forwarding it).
    async fn progress_written_for(&self, token: &str) -> (Vec<f64>, Vec<f64>) {
        let ping = self
            .client
            .clone()
            .oneshot(McpRequest::new(99, "ping"))
            .await;
        assert!(ping.is_ok(), "{ping:?}");
        let written = self.written.lock().unwrap();
        let answered = written
            .iter()
            .position(|v| v.get("result").is_some() && v["id"] != json!(99) && v["id"] != json!(0))
            .unwrap_or(written.len());
        let progress = |lines: &[Value]| -> Vec<f64> {
            lines
                .iter()
                .filter(|v| {
                    v["method"] == "notifications/progress"
                        && v["params"]["progressToken"] == json!(token)
                })
                .filter_map(|v| v["params"]["progress"].as_f64())
                .collect()
        };
        (
            progress(&written[..answered]),
            progress(&written[answered..]),
        )
    }
}

#[tokio::test]
async fn nothing_of_a_request_is_written_after_its_answer_even_by_a_task_it_spawned() {
    let mut h = start(cancellable).await;
    let ok = h
        .client
        .clone()
        .oneshot(call_with_token(7, "late", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    h.event("DONE", 7).await;
    // The request is answered; its reporter now sends 5 progress reports.
    h.release.notify_one();
    h.event("REPORTED", 7).await;
    let (_, after) = h.progress_written_for("p7").await;
    assert!(
        after.is_empty(),
        "progress written after the answer: {after:?}"
    );
}

#[tokio::test]
async fn progress_that_does_not_increase_is_not_written() {
    let h = start(cancellable).await;
    let ok = h
        .client
        .clone()
        .oneshot(call_with_token(7, "unordered", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let (before, _) = h.progress_written_for("p7").await;
    assert_eq!(before, vec![5.0, 6.0]);
}

#[tokio::test]
async fn plain_rmcp_runs_a_cancelled_handler_to_its_end() {
    let mut h = start(|_| None).await;
    let args = json!({"steps": 3, "interval_ms": 100});
    let pending = tokio::spawn(h.client.clone().oneshot(call(7, "slow", args)));
    h.event("STARTED", 7).await;
    pending.abort();
    // rmcp fired the handler's ct, but nothing dropped its future.
    h.event("DONE", 7).await;
}

/// A per-tool deadline reaches the layers through rmcp: `slow` (2 s) is
/// dropped at 2 s, another tool at the `tools/call` deadline (10 s).
#[tokio::test(start_paused = true)]
async fn a_tools_deadline_drops_that_tool_and_the_methods_the_others() {
    let mut h = start(|t| {
        Some(
            Cancellable::new(t).timeout(
                TimeoutLayer::new(Duration::from_secs(60))
                    .method("tools/call", Duration::from_secs(10))
                    .tool("slow", Duration::from_secs(2)),
            ),
        )
    })
    .await;
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
    let mut h = start(|t| {
        Some(
            Cancellable::new(t).progress(
                ProgressResetLayer::new(Duration::from_secs(60))
                    .method("tools/call", limits(10))
                    .tool("slow", limits(2)),
            ),
        )
    })
    .await;
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

#[cfg(feature = "http")]
#[path = "rmcp_server/http.rs"]
mod http;
