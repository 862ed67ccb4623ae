//! A scripted client transport for the task client's tests: each method
//! answers from its own queue, in order; every request is recorded with
//! the (paused) clock's time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tower::BoxError;
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::McpRequest;

/// One scripted answer.
pub(crate) type Answer = Result<Value, BoxError>;

/// A request as the transport saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) params: Value,
    pub(crate) at: Duration,
}

#[derive(Default)]
struct State {
    answers: HashMap<String, VecDeque<Answer>>,
    seen: Vec<Seen>,
}

/// The transport: clone it into the stack, keep one to script and inspect.
#[derive(Clone)]
pub(crate) struct Mock {
    state: Arc<Mutex<State>>,
    start: Instant,
}

impl Mock {
    pub(crate) fn new() -> Self {
        Self {
            state: Arc::default(),
            start: Instant::now(),
        }
    }

    /// Queues `answer` for the next `method` call.
    pub(crate) fn then(&self, method: &str, answer: Answer) -> &Self {
        let mut st = self.state.lock().unwrap();
        st.answers
            .entry(method.to_owned())
            .or_default()
            .push_back(answer);
        self
    }

    /// Every request so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The requests of `method` so far.
    pub(crate) fn calls(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method)
            .collect()
    }

    fn answer(&self, req: McpRequest) -> Answer {
        let params: Value = req.params_as().unwrap_or(Value::Null);
        let mut st = self.state.lock().unwrap();
        st.seen.push(Seen {
            method: req.method().to_owned(),
            params,
            at: self.start.elapsed(),
        });
        match st
            .answers
            .get_mut(req.method())
            .and_then(VecDeque::pop_front)
        {
            Some(answer) => answer,
            // An acknowledgement for a cancel nobody scripted.
            None if req.method() == "tasks/cancel" => Ok(json!({"resultType": "complete"})),
            None => Err(format!("the test scripted no answer for {}", req.method()).into()),
        }
    }

    /// The transport as a service.
    pub(crate) fn service(
        &self,
    ) -> impl tower::Service<
        McpRequest,
        Response = Value,
        Error = BoxError,
        Future = std::future::Ready<Answer>,
    > + Clone
           + Send
           + 'static {
        let me = self.clone();
        tower::service_fn(move |req: McpRequest| std::future::ready(me.answer(req)))
    }
}

/// The task's fields every answer carries.
pub(crate) fn task(id: &str, status: &str) -> Value {
    json!({
        "taskId": id,
        "status": status,
        "createdAt": "2026-07-28T10:00:00Z",
        "lastUpdatedAt": "2026-07-28T10:00:00Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 100
    })
}

/// A `CreateTaskResult` for task `id`, `working`.
pub(crate) fn created(id: &str) -> Value {
    with(task(id, "working"), json!({"resultType": "task"}))
}

/// A `tasks/get` answer: `id`, `status`, and `extra` merged in.
pub(crate) fn got(id: &str, status: &str, extra: Value) -> Value {
    with(
        with(task(id, status), json!({"resultType": "complete"})),
        extra,
    )
}

/// A `tasks/get` answer of a completed task.
pub(crate) fn completed(id: &str) -> Value {
    got(
        id,
        "completed",
        json!({"result": {"content": [{"type": "text", "text": "done"}]}}),
    )
}

/// `base` with the keys of `extra` set.
pub(crate) fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// `base` without `key`.
pub(crate) fn without(mut base: Value, key: &str) -> Value {
    if let Some(b) = base.as_object_mut() {
        b.remove(key);
    }
    base
}

/// A JSON-RPC error answer.
pub(crate) fn rpc_error(code: i64) -> BoxError {
    Box::new(ErrorObject::new(code, format!("error {code}")))
}

/// A `tools/call` request.
pub(crate) fn call() -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": "t", "arguments": {}}))
}
