//! Tasks through `Cancellable::tasks`, over stdio (in-process pipes), with
//! rmcp's own client as a tower service (`RmcpClient`) sending the
//! requests: a task whose handler never looks at its token is dropped at
//! `tasks/cancel` and at its TTL; its input requests reach the handler;
//! the extension is advertised; and, under `TaskCallLayer`, a call that
//! becomes a task is one call whose drop sends `tasks/cancel` — against
//! this crate's wrapper and against rmcp's own `TaskManager`. The same over
//! Streamable HTTP is [`http`]'s.

#[path = "support/relay.rs"]
mod relay;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, RequestContext, RunningService};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};
use tower_mcp_cancel::tasks::{
    declare_extension, MemoryStore, TaskCallLayer, TaskContext, TaskPolicy, TaskStore, TasksLayer,
};
use tower_mcp_cancel::test_util::{FaultyStore, Op};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_rmcp::{Cancellable, RmcpClient, RouteProgress};

use relay::{relayed, Relayed};

#[cfg(feature = "http")]
#[path = "tasks/http.rs"]
mod http;

type Events = mpsc::UnboundedSender<(&'static str, String)>;

/// `hang` (never looks at its token; reports `DROPPED` when its future is
/// dropped), `nap` (answers after 300 ms), `report` (sends progress
/// every 10 ms through its peer, `REPORTED` after each), `ask` (asks the client a question through the call's
/// `TaskContext`, answers with the reply) and `quick` (answers at once).
/// With a `TaskManager`, the tools that may be tasks are spawned on it (as
/// rmcp's docs have it, stopping at `tasks/cancel` by watching for it).
#[derive(Clone)]
pub(crate) struct Tools {
    events: Events,
    manager: Option<TaskManager>,
}

/// Reports `DROPPED` when dropped unfinished, `DONE` when finished.
struct Probe(Events, String, bool);

impl Drop for Probe {
    fn drop(&mut self) {
        let kind = if self.2 { "DONE" } else { "DROPPED" };
        let _ = self.0.send((kind, self.1.clone()));
    }
}

fn schema() -> std::sync::Arc<serde_json::Map<String, Value>> {
    std::sync::Arc::new(json!({"type": "object"}).as_object().unwrap().clone())
}

fn text(s: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s)])
}

/// What `ask` asks.
fn question() -> Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    }})
}

impl Tools {
    /// `hang` or `nap` (300 ms, then `rested`); neither looks at a token.
    async fn work(events: Events, name: String) -> CallToolResult {
        let _ = events.send(("STARTED", name.clone()));
        let nap = name == "nap";
        let mut probe = Probe(events, name, false);
        let long = if nap { 300 } else { 3_600_000 };
        tokio::time::sleep(Duration::from_millis(long)).await;
        probe.2 = true;
        text(if nap { "rested" } else { "woke" })
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        if self.manager.is_some() {
            caps.extensions
                .get_or_insert_with(Default::default)
                .entry(rmcp::model::TASKS_EXTENSION_ID.to_owned())
                .or_default();
        }
        ServerConfig::new(caps)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("hang", "never ends, never looks at its token", schema()),
            Tool::new("ask", "asks a name", schema()),
            Tool::new("quick", "answers at once", schema()),
            Tool::new("nap", "answers after 300 ms", schema()),
            Tool::new("report", "reports progress every 10 ms", schema()),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if name == "quick" {
            return Ok(text("quick").into());
        }
        if let Some(manager) = &self.manager {
            let events = self.events.clone();
            let task = manager.spawn(TaskOptions::new(), move |task| {
                Box::pin(async move {
                    tokio::select! {
                        out = Tools::work(events, name) => Ok(out),
                        () = task.cancelled() => Err(TaskExit::Cancelled),
                    }
                })
            });
            return Ok(CreateTaskResult::new(task).into());
        }
        match name.as_str() {
            "report" => {
                let token = context.meta.get_progress_token().expect("a progress token");
                for i in 1..=1000u32 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let p = ProgressNotificationParam::new(token.clone(), f64::from(i));
                    let _ = context.peer.notify_progress(p).await;
                    let _ = self.events.send(("REPORTED", i.to_string()));
                }
                Ok(text("reported").into())
            }
            "ask" => {
                let task = context
                    .extensions
                    .get::<TaskContext>()
                    .cloned()
                    .ok_or_else(|| ErrorData::internal_error("not a task", None))?;
                let answer = task
                    .input("name", question())
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let name = answer["content"]["name"].as_str().unwrap_or("?").to_owned();
                Ok(text(&format!("hello {name}")).into())
            }
            _ => Ok(Tools::work(self.events.clone(), name).await.into()),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let manager = self.manager.as_ref().expect("a task manager");
        manager.get_task(&request.task_id).map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let manager = self.manager.as_ref().expect("a task manager");
        manager.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let manager = self.manager.as_ref().expect("a task manager");
        manager.cancel_task(&request.task_id)
    }
}

/// The tasks layer of the tests: `hang`, `nap` and `ask` tasks only, polled
/// every 20 ms.
pub(crate) fn layer() -> TasksLayer {
    TasksLayer::new()
        .tool("hang", TaskPolicy::required())
        .tool("ask", TaskPolicy::required())
        .tool("nap", TaskPolicy::required())
        .tool("report", TaskPolicy::required())
        .tool("quick", TaskPolicy::optional())
        .poll_interval(Duration::from_millis(20))
}

pub(crate) struct Harness {
    pub(crate) client: RmcpClient,
    pub(crate) events: mpsc::UnboundedReceiver<(&'static str, String)>,
    /// Every line the server wrote, in order.
    written: Arc<Mutex<Vec<Value>>>,
    _running: RunningService<RoleClient, RouteProgress<()>>,
}

/// `Tools` (with `manager`) served over pipes — through `Cancellable` with
/// `layer` when given, by rmcp alone otherwise — and an rmcp client
/// (`initialize`: a 2025-era session).
async fn start(layer: Option<TasksLayer>, manager: Option<TaskManager>) -> Harness {
    start_with(layer, manager, ClientLifecycleMode::Initialize).await
}

/// [`start`], the client starting with `lifecycle`.
async fn start_with(
    layer: Option<TasksLayer>,
    manager: Option<TaskManager>,
    lifecycle: ClientLifecycleMode,
) -> Harness {
    let (tx, events) = mpsc::unbounded_channel();
    let tools = Tools {
        events: tx,
        manager,
    };
    let (
        Relayed {
            client_r,
            client_w,
            written,
        },
        _relay,
    ) = relayed(|sr, sw| async move {
        match layer {
            Some(layer) => {
                let server = Cancellable::new(tools).tasks(layer);
                let _ = server.serve((sr, sw)).await.unwrap().waiting().await;
            }
            None => {
                let _ = tools.serve((sr, sw)).await.unwrap().waiting().await;
            }
        }
    });
    let running = rmcp::service::serve_client_with_lifecycle(
        RouteProgress::new(()),
        (client_r, client_w),
        lifecycle,
    )
    .await
    .unwrap();
    Harness {
        client: RmcpClient::new(&running),
        events,
        written,
        _running: running,
    }
}

pub(crate) fn call(tool: &str) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": tool, "arguments": {}}))
}

/// `req` with the tasks extension declared.
pub(crate) fn declared(mut req: McpRequest) -> McpRequest {
    declare_extension(&mut req).unwrap();
    req
}

pub(crate) fn task_request(method: &str, id: &str, extra: Value) -> McpRequest {
    let mut params = json!({"taskId": id});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    declared(McpRequest::without_id(method).with_params(params))
}

impl Harness {
    pub(crate) async fn send(&self, req: McpRequest) -> Result<Value, BoxError> {
        self.client.clone().oneshot(req).await
    }

    /// Waits for the event `kind` of the tool `name`.
    pub(crate) async fn event(&mut self, kind: &str, name: &str) {
        loop {
            let (k, n) = self.events.recv().await.expect("server gone");
            if k == kind && n == name {
                return;
            }
        }
    }

    /// Polls `tasks/get` for task `id` until `done` holds, at most 5 s.
    pub(crate) async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let task = self
                    .send(task_request("tasks/get", id, json!({})))
                    .await
                    .unwrap();
                if done(&task) {
                    return task;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the task did not get there within 5 s")
    }
}

/// The JSON-RPC error code of an rmcp client's error.
pub(crate) fn code(err: &BoxError) -> i32 {
    match err.downcast_ref::<rmcp::ServiceError>() {
        Some(rmcp::ServiceError::McpError(e)) => e.code.0,
        _ => panic!("not an error response: {err:?}"),
    }
}

pub(crate) fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_task_that_never_looks_at_its_token_is_dropped_at_tasks_cancel() {
    let mut h = start(Some(layer()), None).await;
    let created = h.send(declared(call("hang"))).await.unwrap();
    let id = task_id(&created);
    h.event("STARTED", "hang").await;
    let ack = h
        .send(task_request("tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    h.event("DROPPED", "hang").await;
    let task = h
        .send(task_request("tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(task["status"], "cancelled", "{task}");
}

#[tokio::test]
async fn a_task_that_never_looks_at_its_token_is_dropped_at_its_ttl() {
    let ttl = Duration::from_millis(300);
    let mut h = start(Some(layer().ttl(Some(ttl))), None).await;
    let created = h.send(declared(call("hang"))).await.unwrap();
    let id = task_id(&created);
    assert_eq!(created["ttlMs"], 300, "{created}");
    h.event("DROPPED", "hang").await;
    let task = h.wait_for(&id, |t| t["status"] != "working").await;
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["error"]["message"].as_str().unwrap().contains("TTL"),
        "{task}"
    );
}

#[tokio::test]
async fn a_tasks_input_request_reaches_the_client_and_its_answer_the_handler() {
    let h = start(Some(layer()), None).await;
    let created = h.send(declared(call("ask"))).await.unwrap();
    let id = task_id(&created);
    let task = h.wait_for(&id, |t| t["status"] == "input_required").await;
    assert_eq!(
        task["inputRequests"]["name"]["method"], "elicitation/create",
        "{task}"
    );
    let answer = json!({"name": {"action": "accept", "content": {"name": "Ada"}}});
    h.send(task_request(
        "tasks/update",
        &id,
        json!({"inputResponses": answer}),
    ))
    .await
    .unwrap();
    let task = h.wait_for(&id, |t| t["status"] == "completed").await;
    assert_eq!(task["result"]["content"][0]["text"], "hello Ada", "{task}");
}

/// The tasks layer takes any `TaskStore` (the Redis one of
/// `tower-mcp-cancel-redis` as it is): [`with_any_store`] compiles for
/// every store type, and a store of another crate's (the test utilities'
/// `FaultyStore`, over the in-memory one) is the one the wrapper's tasks go
/// to.
fn with_any_store<S: TaskStore>(tools: Tools, store: S) -> Cancellable<Tools> {
    Cancellable::new(tools).tasks(
        TasksLayer::with_store(store)
            .tool("hang", TaskPolicy::required())
            .poll_interval(Duration::from_millis(20)),
    )
}

#[tokio::test]
async fn the_tasks_go_to_the_store_given() {
    let store = FaultyStore::new(MemoryStore::new());
    let (tx, mut events) = mpsc::unbounded_channel();
    let server = with_any_store(
        Tools {
            events: tx,
            manager: None,
        },
        store.clone(),
    );
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = server.serve(tokio::io::split(server_io)).await.unwrap();
        let _ = running.waiting().await;
    });
    let running = rmcp::serve_client(RouteProgress::new(()), tokio::io::split(client_io))
        .await
        .unwrap();
    let client = RmcpClient::new(&running);
    let created = client
        .clone()
        .oneshot(declared(call("hang")))
        .await
        .unwrap();
    let id = task_id(&created);
    assert_eq!(store.calls(Op::Create), 1);
    assert!(
        store.get(&id).await.unwrap().is_some(),
        "the record is there"
    );
    let cancel = task_request("tasks/cancel", &id, json!({}));
    client.oneshot(cancel).await.unwrap();
    while events.recv().await.expect("server gone") != ("DROPPED", "hang".to_owned()) {}
    assert!(store.calls(Op::Finish) >= 1, "its end went to the store");
}

/// Its request was answered with the `CreateTaskResult`: the progress the
/// handler goes on sending with that request's token is not written.
#[tokio::test]
async fn a_tasks_progress_is_not_written_after_its_create_task_result() {
    let mut h = start(Some(layer()), None).await;
    let created = h.send(declared(call("report"))).await.unwrap();
    task_id(&created);
    h.event("REPORTED", "5").await;
    let written = h.written.lock().unwrap();
    let progress: Vec<_> = written
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .collect();
    assert!(
        progress.is_empty(),
        "written after the answer: {progress:?}"
    );
}

#[tokio::test]
async fn a_client_without_the_extension_gets_a_plain_call_or_the_missing_capability() {
    let h = start(Some(layer()), None).await;
    let plain = h.send(call("quick")).await.unwrap();
    assert_eq!(plain["content"][0]["text"], "quick", "{plain}");
    let err = h.send(call("hang")).await.unwrap_err();
    assert_eq!(code(&err), -32021, "{err:?}");
    // A task-eligible call that ends at once is answered as usual.
    let quick = h.send(declared(call("quick"))).await.unwrap();
    assert_eq!(quick["content"][0]["text"], "quick", "{quick}");
}

#[tokio::test]
async fn the_extension_is_advertised_and_rmcps_own_task_methods_are_not_called() {
    let h = start(Some(layer()), None).await;
    let info = h._running.peer().peer_info().expect("initialized").clone();
    assert!(info.capabilities.supports_tasks(), "{info:?}");
    // `tasks/get` of an unknown task: the layer's answer (the handler's
    // would panic: it has no manager).
    let err = h
        .send(task_request("tasks/get", "nope", json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), -32602, "{err:?}");
}

/// `TaskCallLayer` over `client`, and a receiver told the task id of
/// each `tasks/get` it sends (the call knows its task's id by then: a
/// call dropped before the `CreateTaskResult` reached it cannot cancel
/// a task it never heard of).
pub(crate) fn polling(
    client: RmcpClient,
) -> (
    impl tower::Service<McpRequest, Response = Value, Error = BoxError, Future = impl Send + 'static>
        + Send
        + 'static,
    mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .map_request(move |req: McpRequest| {
            if req.method() == "tasks/get" {
                let params: Value = req.params_as().unwrap_or_default();
                let _ = tx.send(params["taskId"].as_str().unwrap_or_default().to_owned());
            }
            req
        })
        .service(client);
    (client, rx)
}

/// `nap` through `TaskCallLayer` over `client`: one call, with the task's
/// result.
pub(crate) async fn nap_as_one_call(client: RmcpClient) {
    let client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(client);
    let out = client.oneshot(call("nap")).await.unwrap();
    assert_eq!(out["content"][0]["text"], "rested", "{out}");
}

/// The client side: `TaskCallLayer` over `RmcpClient`.
mod client {
    use super::*;

    /// Calls `hang` through `TaskCallLayer`, drops the call once it polls
    /// (it knows the task's id then), and waits for the handler's drop.
    async fn drop_once_polled(h: &mut Harness) {
        let (client, mut polled) = polling(h.client.clone());
        let pending = tokio::spawn(client.oneshot(call("hang")));
        h.event("STARTED", "hang").await;
        polled.recv().await;
        pending.abort();
        h.event("DROPPED", "hang").await;
    }

    #[tokio::test]
    async fn a_call_that_becomes_a_task_is_one_call() {
        let h = start(Some(layer()), None).await;
        nap_as_one_call(h.client.clone()).await;
    }

    /// Dropping the call sends `tasks/cancel`: the server's handler, which
    /// never looks at its token, is dropped.
    #[tokio::test]
    async fn dropping_the_call_cancels_the_task_on_this_crates_server() {
        let mut h = start(Some(layer()), None).await;
        drop_once_polled(&mut h).await;
    }

    /// Against rmcp's own `TaskManager` server: the call is one call, and
    /// its drop sends `tasks/cancel`, which the manager's work (watching
    /// for it, as rmcp's docs have it) stops on.
    #[tokio::test]
    async fn dropping_the_call_cancels_the_task_on_rmcps_task_manager() {
        let manager = TaskManager::new();
        let mut h = start(None, Some(manager.clone())).await;
        drop_once_polled(&mut h).await;
        tokio::time::timeout(Duration::from_secs(5), async {
            while manager.running_task_count() != 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the manager's task ended");
    }

    /// In a 2026-era session rmcp puts the client's own capabilities in
    /// each request's `_meta`: the extension `TaskCallLayer` declared is
    /// kept (it was lost, and the call refused `-32021`).
    #[tokio::test]
    async fn a_call_that_becomes_a_task_is_one_call_in_a_2026_session() {
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        };
        let h = start_with(Some(layer()), None, lifecycle).await;
        nap_as_one_call(h.client.clone()).await;
    }

    #[tokio::test]
    async fn a_task_of_rmcps_task_manager_is_one_call_with_its_result() {
        let manager = TaskManager::new();
        let h = start(None, Some(manager)).await;
        nap_as_one_call(h.client.clone()).await;
    }
}
