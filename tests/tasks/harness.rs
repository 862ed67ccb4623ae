//! What the fault tests share: the tasks layer over a bare service (public
//! API only), tools for each way a handler can end, a record of each call
//! (its drop probe, its task id, what its input request got), and a poll
//! of `tasks/get` until the task is terminal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::{TaskContext, Tasks, TasksLayer, EXTENSION};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{McpRequest, RequestContext};

/// The bound the lead's fix promises: a task whose end could not be
/// written is terminal within this long of the store healing (retried
/// with backoff). One constant, to adjust in one place.
pub(crate) const END_BOUND: Duration = Duration::from_secs(10);

/// A guard against hangs on the paused clock (it jumps there only when
/// nothing else can run): far longer than any bound under test.
pub(crate) const HANG: Duration = Duration::from_secs(3600);

/// One call of a tool: its drop probe, its task id, and what its input
/// request got (the error text and when).
#[derive(Clone, Debug, Default)]
pub(crate) struct Call {
    pub(crate) probe: DropProbe,
    pub(crate) task_id: Arc<Mutex<Option<String>>>,
    pub(crate) input: Arc<Mutex<Option<(Instant, String)>>>,
}

impl Call {
    pub(crate) fn task_id(&self) -> Option<String> {
        self.task_id.lock().unwrap().clone()
    }

    /// What the handler's input request got, and when.
    pub(crate) fn input(&self) -> Option<(Instant, String)> {
        self.input.lock().unwrap().clone()
    }
}

/// The calls of the tools, in call order.
#[derive(Clone)]
pub(crate) struct Calls {
    list: Arc<Mutex<Vec<Call>>>,
    count: Arc<watch::Sender<usize>>,
}

impl Default for Calls {
    /// Also starts keeping unplanned panics ([`crate::panics`]).
    fn default() -> Self {
        crate::panics::watch();
        Self {
            list: Arc::default(),
            count: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Calls {
    fn arm(&self) -> Call {
        let call = Call::default();
        let mut list = self.list.lock().unwrap();
        list.push(call.clone());
        self.count.send_replace(list.len());
        call
    }

    /// The `n`th call (0-based), once it started.
    pub(crate) async fn get(&self, n: usize) -> Call {
        let mut rx = self.count.subscribe();
        tokio::time::timeout(HANG, rx.wait_for(|c| *c > n))
            .await
            .expect("the call never started")
            .unwrap();
        self.list.lock().unwrap()[n].clone()
    }
}

/// The tools, each `{ms}` in its arguments:
/// * `sleep`: sleeps `ms`, answers `done`;
/// * `fail`: sleeps `ms`, fails with "the handler failed";
/// * `panic`: sleeps `ms`, panics;
/// * `cleanup`: waits for its token, then cleans up for `ms` and answers
///   (with `{"panic": true}`, panics instead);
/// * `status`: after 10 ms sets its status message, then sleeps `ms` and
///   answers;
/// * `ask`: asks for input `name`, answers `Hello, <name>!`; what its
///   request got is kept in its [`Call`].
///
/// Each call arms its [`Call`]'s drop guard, finished when the handler
/// ends on its own.
pub(crate) fn tools(
    calls: Calls,
) -> impl Fn(McpRequest) -> futures_util::future::BoxFuture<'static, Result<Value, BoxError>>
       + Clone
       + Send
       + Sync
       + 'static {
    move |req: McpRequest| {
        let call = calls.arm();
        Box::pin(async move {
            let guard = call.probe.guard();
            let task = TaskContext::of(&req);
            *call.task_id.lock().unwrap() = task.as_ref().map(|t| t.id().to_owned());
            let p: Value = req.params_as()?;
            let args = &p["arguments"];
            let ms = Duration::from_millis(args["ms"].as_u64().unwrap_or(0));
            let out = match p["name"].as_str().unwrap_or_default() {
                "sleep" => {
                    tokio::time::sleep(ms).await;
                    Ok(done())
                }
                "fail" => {
                    tokio::time::sleep(ms).await;
                    Err("the handler failed".into())
                }
                "panic" => {
                    tokio::time::sleep(ms).await;
                    panic!("the handler panicked on purpose");
                }
                "cleanup" => {
                    RequestContext::of(&req).token().cancelled().await;
                    tokio::time::sleep(ms).await;
                    if args["panic"] == true {
                        panic!("the handler panicked in its grace on purpose");
                    }
                    Ok(done())
                }
                "status" => {
                    let task = task.ok_or("not a task")?;
                    // A task by then (unless the policy's delay is longer).
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    task.status("working on it").await;
                    tokio::time::sleep(ms).await;
                    Ok(done())
                }
                "ask" => {
                    let task = task.ok_or("not a task")?;
                    let asked = task
                        .input(
                            "name",
                            json!({"method": "elicitation/create", "params": {}}),
                        )
                        .await;
                    let got = match &asked {
                        Ok(v) => v.to_string(),
                        Err(e) => format!("error: {e}"),
                    };
                    *call.input.lock().unwrap() = Some((Instant::now(), got));
                    let answer = asked?;
                    let name = answer["content"]["name"].as_str().unwrap_or("?");
                    Ok(json!({"content": [{"type": "text", "text": format!("Hello, {name}!")}]}))
                }
                other => Err(format!("unknown tool {other}").into()),
            };
            guard.finish();
            out
        })
    }
}

fn done() -> Value {
    json!({"content": [{"type": "text", "text": "done"}]})
}

fn declared() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}})
}

/// A `tools/call` of `tool` that declares the extension.
pub(crate) fn call(id: i64, tool: &str, args: Value) -> McpRequest {
    McpRequest::new(id, "tools/call")
        .with_params(json!({"name": tool, "arguments": args, "_meta": declared()}))
}

/// A `tasks/*` request for `task`, with `extra` params.
pub(crate) fn task_req(id: i64, method: &str, task: &str, extra: Value) -> McpRequest {
    let mut params = json!({"taskId": task, "_meta": declared()});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    McpRequest::new(id, method).with_params(params)
}

pub(crate) type Svc = Tasks<BoxCloneSyncService<McpRequest, Value, BoxError>>;

/// `layer` over the tools.
pub(crate) fn stack(layer: &TasksLayer, calls: &Calls) -> Svc {
    layer.layer(BoxCloneSyncService::new(service_fn(tools(calls.clone()))))
}

pub(crate) async fn send(svc: &Svc, req: McpRequest) -> Result<Value, BoxError> {
    let out = svc.clone().ready().await?.call(req).await?;
    Ok(serde_json::to_value(out).unwrap())
}

/// The JSON-RPC error code of a failed request.
pub(crate) fn code(err: &BoxError) -> Option<i64> {
    err.downcast_ref::<ErrorObject>().map(|e| e.code)
}

/// Creates a task: the call must answer a `CreateTaskResult`.
pub(crate) async fn create(svc: &Svc, req: McpRequest) -> String {
    let created = send(svc, req).await.expect("the call failed");
    assert_eq!(created["resultType"], "task", "not a task: {created}");
    created["taskId"].as_str().unwrap().to_owned()
}

/// The task's record as `tasks/get` reads it.
pub(crate) async fn get(svc: &Svc, id: &str) -> Result<Value, BoxError> {
    send(svc, task_req(900, "tasks/get", id, json!({}))).await
}

fn terminal(status: &Value) -> bool {
    matches!(status.as_str(), Some("completed" | "failed" | "cancelled"))
}

/// Polls `tasks/get` (every 100 ms of tokio's clock) until the task is
/// terminal, for at most `bound`; panics with its last record otherwise.
/// `Err`: the record is gone (an unknown task).
pub(crate) async fn terminal_within(svc: &Svc, id: &str, bound: Duration) -> Result<Value, String> {
    let start = Instant::now();
    loop {
        match get(svc, id).await {
            Ok(r) if terminal(&r["status"]) => return Ok(r),
            Ok(r) if start.elapsed() >= bound => {
                panic!("task still {} {bound:?} on: {r}", r["status"])
            }
            Ok(_) => {}
            Err(e) if code(&e) == Some(-32602) => return Err(e.to_string()),
            Err(e) if start.elapsed() >= bound => {
                panic!("tasks/get still failing {bound:?} on: {e}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (on tokio's clock, for at most [`HANG`]) until no task runs; the
/// message says how many still did.
pub(crate) async fn drained(handle: &tower_mcp_cancel::tasks::TasksHandle, what: &str) {
    if tokio::time::timeout(HANG, handle.drained()).await.is_err() {
        panic!(
            "{what}: drained() never resolved, running() = {}",
            handle.running()
        );
    }
}
