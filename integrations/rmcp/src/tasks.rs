//! Tasks through [`Cancellable`]: with [`Cancellable::tasks`], a
//! `tools/call` runs under this crate's [`TasksLayer`], which may take the
//! handler's future out of the request and own it as a task, and
//! `tasks/get`, `tasks/update` and `tasks/cancel` are answered from the
//! layer's store.
//!
//! rmcp decodes the request and calls the handler's typed methods; the
//! tasks layer reads the wire request ([`McpRequest`]). Each of these calls
//! is therefore given to the layer as the wire request it came as — the
//! params rmcp decoded, with the `_meta` that says whether the client
//! declared the extension as rmcp judged it (per request, or at
//! `initialize`) — and the handler's call travels beside it, in the
//! request's extensions, to the innermost service, which makes it with the
//! context rmcp built (its `ct` the work's token, the [`TaskContext`] in
//! its `extensions`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use ::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult, GetTaskResult,
    InputRequiredResult, ServerCapabilities, TASKS_EXTENSION_ID,
};
use ::rmcp::service::RequestContext;
use ::rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};
use tower::{BoxError, ServiceBuilder, ServiceExt as _};
use tower_mcp_cancel::integration::{ProgressRegistry, Registration};
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::tasks::{TaskContext, TasksLayer, TasksResponse};
use tower_mcp_cancel::{CancelOnDisconnectLayer, Cancellation, McpRequest};
use tower_service::Service as TowerService;

use super::request::convert;
use super::{cancel_cause, error_data, Cancellable};

/// The key of the client's capabilities in a request's `_meta`.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Declares the extension in `capabilities` (`server/discover`,
/// `initialize`, `get_info`).
pub(super) fn advertise(capabilities: &mut ServerCapabilities) {
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .entry(TASKS_EXTENSION_ID.to_owned())
        .or_default();
}

/// The request's `_meta` as the tasks layer reads it: rmcp's, with the
/// extension declared when rmcp finds the client declared it (in this
/// request's `_meta`, or, in a 2025-era session, at `initialize`).
fn wire_meta(context: &RequestContext<RoleServer>) -> Value {
    let mut meta = match serde_json::to_value(&context.meta) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let declared = context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks());
    if declared {
        let caps = meta.entry(CLIENT_CAPABILITIES).or_insert_with(|| json!({}));
        if !caps.is_object() {
            *caps = json!({});
        }
        if let Some(caps) = caps.as_object_mut() {
            let ext = caps.entry("extensions").or_insert_with(|| json!({}));
            if !ext.is_object() {
                *ext = json!({});
            }
            if let Some(ext) = ext.as_object_mut() {
                ext.entry(TASKS_EXTENSION_ID).or_insert_with(|| json!({}));
            }
        }
    }
    Value::Object(meta)
}

/// The wire request of one rmcp call: `params` (what rmcp decoded) with the
/// `_meta` of [`wire_meta`].
fn wire_request<P: Serialize>(
    method: &str,
    params: &P,
    context: &RequestContext<RoleServer>,
) -> Result<McpRequest, ErrorData> {
    let mut params = match serde_json::to_value(params) {
        Ok(Value::Object(p)) => p,
        Ok(_) => Map::new(),
        Err(e) => return Err(ErrorData::internal_error(e.to_string(), None)),
    };
    params.insert("_meta".to_owned(), wire_meta(context));
    Ok(McpRequest::new(convert::<RequestId>(&context.id), method).with_params(params))
}

/// One call of the handler's `call_tool`: its params and context.
type Call = (CallToolRequestParams, RequestContext<RoleServer>);

/// What rmcp takes for the tasks layer's answer to a `tasks/*` request.
pub(super) trait TaskAnswer: Sized {
    /// The answer, read from the layer's JSON.
    fn read(value: Value) -> Result<Self, serde_json::Error>;
}

/// `tasks/get`: the task.
impl TaskAnswer for GetTaskResult {
    fn read(value: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }
}

/// `tasks/update`, `tasks/cancel`: an acknowledgement, which rmcp writes
/// itself.
impl TaskAnswer for () {
    fn read(_: Value) -> Result<Self, serde_json::Error> {
        Ok(())
    }
}

/// The handler's `tools/call`, on its way to the innermost service: taken
/// once, by the call the layers let through.
#[derive(Clone)]
struct PendingCall(Arc<Mutex<Option<Call>>>);

impl PendingCall {
    fn take(&self) -> Option<Call> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The handler's answer to a `tools/call`, as the tasks layer stores it (a
/// task's result) and serializes it.
struct Answer(CallToolResponse);

impl Serialize for Answer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            CallToolResponse::Complete(r) => r.serialize(s),
            CallToolResponse::InputRequired(r) => r.serialize(s),
            CallToolResponse::Task(r) => r.serialize(s),
            _ => Err(serde::ser::Error::custom(
                "a tools/call answer this integration does not know",
            )),
        }
    }
}

/// A `tools/call` answer the tasks layer made (a `CreateTaskResult`), or a
/// handler's answer it serialized (a call that ended within its policy's
/// delay), as rmcp's type.
fn tool_response(value: Value) -> Result<CallToolResponse, ErrorData> {
    fn parse<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
        serde_json::from_value(value)
            .map_err(|e| ErrorData::internal_error(format!("the tasks layer's answer: {e}"), None))
    }
    Ok(match value.get("resultType").and_then(Value::as_str) {
        Some("task") => CallToolResponse::Task(parse::<CreateTaskResult>(value)?),
        Some("input_required") => {
            CallToolResponse::InputRequired(parse::<InputRequiredResult>(value)?)
        }
        _ => CallToolResponse::Complete(parse::<CallToolResult>(value)?),
    })
}

/// The innermost service: makes the handler's `tools/call` with the
/// context rmcp built, whose `ct` is the token of the request's (or, once
/// the call is a task, the task's) cancellation, and with the request's
/// [`TaskContext`] in its `extensions`, for the handler's input requests
/// and status messages.
struct ToolCall<H> {
    handler: Arc<H>,
    registry: ProgressRegistry,
}

impl<H> Clone for ToolCall<H> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            registry: self.registry.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<H: ServerHandler> TowerService<McpRequest> for ToolCall<H> {
    type Response = Answer;
    type Error = BoxError;
    type Future = BoxFuture<Answer>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        let call = req.extensions().get::<PendingCall>().and_then(|p| p.take());
        let Some((params, mut context)) = call else {
            return Box::pin(std::future::ready(Err(
                "no tools/call of the handler to make".into(),
            )));
        };
        if let Some(cancellation) = req.cancellation() {
            context.ct = cancellation.token();
            context.extensions.insert(cancellation.clone());
        }
        let task = TaskContext::of(&req);
        if let Some(task) = &task {
            context.extensions.insert(task.clone());
        }
        let registration = req.progress_token().map(|token| {
            self.registry
                .register(token.clone(), req.progress_tap().cloned())
        });
        let handler = self.handler.clone();
        let call = async move { handler.call_tool(params, context).await };
        Box::pin(Unannounced {
            registration,
            task,
            call: Box::pin(call),
        })
    }
}

/// The handler's call, its progress registered until it ends or becomes a
/// task: a task's progress is never written (the request that carried its
/// token was answered with the `CreateTaskResult`); its status message is
/// set with [`TaskContext::status`].
struct Unannounced<F> {
    registration: Option<Registration>,
    task: Option<TaskContext>,
    call: Pin<Box<F>>,
}

impl<F: Future<Output = Result<CallToolResponse, ErrorData>>> Future for Unannounced<F> {
    type Output = Result<Answer, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Checked before the handler runs on: what it sends in this poll
        // is refused once its call is a task.
        if self.registration.is_some() && self.task.as_ref().is_some_and(TaskContext::is_task) {
            self.registration = None;
        }
        self.call
            .as_mut()
            .poll(cx)
            .map(|out| out.map(Answer).map_err(|e| Box::new(e) as BoxError))
    }
}

impl<H: ServerHandler> Cancellable<H> {
    /// Sends one request through the layers with the tasks layer `tasks`
    /// among them — `CancelOnDisconnectLayer`, the progress layer (it
    /// bounds a task's creating request), `tasks`, the timeout layer (it
    /// bounds the work, task or not: a task's TTL is capped to it) — raced
    /// against rmcp's `ct` like every request.
    fn through_tasks(
        &self,
        tasks: TasksLayer,
        req: Result<McpRequest, ErrorData>,
        context: &RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<TasksResponse<Answer>, ErrorData>> + Send + 'static {
        let cause = cancel_cause(context);
        let cancellation = Cancellation::new();
        let call = req.map(|req| {
            ServiceBuilder::new()
                .layer(CancelOnDisconnectLayer::new())
                .option_layer(self.progress.clone())
                .layer(tasks)
                .option_layer(self.timeout.clone())
                .service(ToolCall {
                    handler: self.handler.clone(),
                    registry: self.registry.clone(),
                })
                .oneshot(req.with_cancellation(cancellation.clone()))
        });
        async move {
            let call = call?;
            tower_mcp_cancel::integration::run_cancellable(call, cause, &cancellation)
                .await
                .map_err(|e| error_data(&*e))
        }
    }

    /// `tools/call` under the tasks layer: the handler's call may become a
    /// task, answered with a `CreateTaskResult`.
    pub(super) fn task_tool_call(
        &self,
        tasks: TasksLayer,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + Send + 'static {
        let req = wire_request("tools/call", &request, &context).map(|req| {
            let pending = PendingCall(Arc::new(Mutex::new(Some((request, context.clone())))));
            req.with_extension(pending)
        });
        let out = self.through_tasks(tasks, req, &context);
        async move {
            match out.await? {
                TasksResponse::Inner(Answer(answer)) => Ok(answer),
                TasksResponse::Tasks(value) => tool_response(value),
            }
        }
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: answered by the tasks
    /// layer, from its store.
    pub(super) fn task_method<P, T>(
        &self,
        tasks: TasksLayer,
        method: &'static str,
        params: P,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<T, ErrorData>> + Send + 'static
    where
        P: Serialize,
        T: TaskAnswer,
    {
        let req = wire_request(method, &params, &context);
        let out = self.through_tasks(tasks, req, &context);
        async move {
            let value = match out.await? {
                TasksResponse::Tasks(value) => value,
                TasksResponse::Inner(_) => {
                    return Err(ErrorData::internal_error(
                        format!("{method} was not answered by the tasks layer"),
                        None,
                    ))
                }
            };
            T::read(value).map_err(|e| {
                ErrorData::internal_error(format!("the tasks layer's {method} answer: {e}"), None)
            })
        }
    }
}
