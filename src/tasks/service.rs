//! [`Tasks`]: the service [`TasksLayer`](super::TasksLayer) makes, and what it answers.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tower_service::Service;

use super::context::{TaskContext, TaskCore};
use super::executor::RecordSeed;
use super::future::{promote, ResponseFuture, TasksResponse};
use super::policy::Mode;
use super::record::{mint_id, TaskChange, TaskEnd, TaskRecord, EXTENSION};
use super::shared::Shared;
use super::store::{StoreError, TaskSignal};
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;
use crate::notify::TaskSink;
use crate::state::Stamp;
use crate::{CancelReason, McpRequest, RequestView};

/// The service of a [`TasksLayer`](super::TasksLayer) over `S`.
#[derive(Clone)]
pub struct Tasks<S> {
    inner: S,
    layer: Shared,
}

impl<S: fmt::Debug> fmt::Debug for Tasks<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S> Tasks<S> {
    pub(crate) fn new(inner: S, layer: Shared) -> Self {
        Self { inner, layer }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// The params the layer reads, in one pass.
#[derive(Deserialize, Default)]
struct Peek<'a> {
    #[serde(default, borrow, rename = "taskId")]
    task_id: Option<Cow<'a, str>>,
    #[serde(default, rename = "inputResponses")]
    input_responses: Option<Map<String, Value>>,
    #[serde(default, rename = "_meta")]
    meta: Option<MetaPeek>,
}

#[derive(Deserialize, Default)]
struct MetaPeek {
    #[serde(default, rename = "io.modelcontextprotocol/clientCapabilities")]
    capabilities: Option<CapabilitiesPeek>,
}

#[derive(Deserialize, Default)]
struct CapabilitiesPeek {
    #[serde(default)]
    extensions: Option<HashMap<String, IgnoredAny>>,
}

impl Peek<'_> {
    fn declared(&self) -> bool {
        self.meta
            .as_ref()
            .and_then(|m| m.capabilities.as_ref())
            .and_then(|c| c.extensions.as_ref())
            .is_some_and(|e| e.contains_key(EXTENSION))
    }
}

fn peek(req: &McpRequest) -> Result<Peek<'_>, serde_json::Error> {
    match req.params() {
        Some(p) => serde_json::from_str(p.get()),
        None => Ok(Peek::default()),
    }
}

/// `-32021`: the request did not declare the tasks extension.
pub(crate) fn missing_capability(what: &str) -> ErrorObject {
    ErrorObject::new(
        ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!("Missing required client capability: {what} needs the {EXTENSION} extension"),
    )
    .with_data(serde_json::json!({
        "requiredCapabilities": {"extensions": {EXTENSION: {}}}
    }))
}

fn unknown_task() -> ErrorObject {
    ErrorObject::new(
        ErrorObject::INVALID_PARAMS,
        "Failed to retrieve task: Task not found",
    )
}

fn invalid(message: String) -> ErrorObject {
    ErrorObject::new(ErrorObject::INVALID_PARAMS, message)
}

impl<S> Service<McpRequest> for Tasks<S>
where
    S: Service<McpRequest>,
    S::Response: Serialize + Send + 'static,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
{
    type Response = TasksResponse<S::Response>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: McpRequest) -> Self::Future {
        match req.method() {
            "tools/call" => self.tools_call(req),
            "tasks/get" | "tasks/update" | "tasks/cancel" => self.task_method(&req),
            "server/discover" => ResponseFuture::discover(self.inner.call(req)),
            "subscriptions/listen" => self.listen(req),
            _ => ResponseFuture::inner(self.inner.call(req)),
        }
    }
}

impl<S> Tasks<S>
where
    S: Service<McpRequest>,
    S::Response: Serialize + Send + 'static,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
{
    fn tools_call(&mut self, mut req: McpRequest) -> ResponseFuture<S::Future, S::Response> {
        let config = &self.layer.config;
        // The tool's name was read with the params (`McpRequest::tool_name`):
        // the params are parsed again only for a tool that may be a task.
        let tool = req.tool_name().unwrap_or_default();
        let policy = config.tools.get(tool).copied().unwrap_or(config.default);
        if policy.mode() == Mode::Never {
            return ResponseFuture::inner(self.inner.call(req));
        }
        // Malformed params are the handler's to refuse.
        let declared = match peek(&req) {
            Ok(p) => p.declared(),
            Err(_) => return ResponseFuture::inner(self.inner.call(req)),
        };
        match policy.mode() {
            Mode::Required if !declared => {
                let what = format!("tool {:?}", crate::sanitize::for_log(tool));
                return ResponseFuture::error(missing_capability(&what));
            }
            _ if !declared => return ResponseFuture::inner(self.inner.call(req)),
            _ => {}
        }
        let principal = self.layer.principal(req.extensions());
        if config.bind.is_some() && principal.is_none() {
            // Nobody could ever see such a task: it runs as a plain call.
            if policy.mode() == Mode::Required {
                return ResponseFuture::error(ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    format!(
                        "tool {:?} runs only as a task, and tasks are bound to a principal this request does not have",
                        crate::sanitize::for_log(tool)
                    ),
                ));
            }
            return ResponseFuture::inner(self.inner.call(req));
        }
        let tool = tool.to_owned();
        let id = match mint_id() {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "no task id: the call runs as a plain request");
                return ResponseFuture::inner(self.inner.call(req));
            }
        };
        let core = Arc::new(TaskCore::new(
            id,
            tool,
            self.layer.store.clone(),
            config.ttl,
        ));
        // The work runs under its own cancellation; this executor owns its
        // drop, so the layers inside leave a cancelled future to its grace.
        core.cancellation.own_grace(config.run.grace);
        let outer = req.cancellation().cloned();
        let transport_shutdown = req
            .extensions()
            .get::<crate::request::TransportShutdown>()
            .map(|s| s.0.clone());
        req.set_cancellation(core.cancellation.clone());
        req.extensions_mut().insert(TaskContext::new(core.clone()));
        req.extensions_mut().insert(TaskSink(core.clone()));
        let work = self.inner.call(req);
        // A limit inside this layer (a `TimeoutLayer` below it) offered its
        // deadline to the work's cancellation while being called: the
        // task's TTL is capped to it, so `ttlMs` says when the work ends.
        core.set_limit(
            core.cancellation
                .request_state()
                .deadlines()
                .offered()
                .map(Stamp::at),
        );
        ResponseFuture::boxed(promote(
            self.layer.clone(),
            core,
            outer,
            work,
            policy.delay(),
            RecordSeed {
                principal,
                transport_shutdown,
            },
        ))
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: answered from the store
    /// and the executor, never by the inner service.
    fn task_method(&self, req: &McpRequest) -> ResponseFuture<S::Future, S::Response> {
        let p = match peek(req) {
            Ok(p) => p,
            Err(e) => return ResponseFuture::error(invalid(format!("invalid params: {e}"))),
        };
        let method = req.method().to_owned();
        if !p.declared() {
            return ResponseFuture::error(missing_capability(&method));
        }
        let Some(id) = p.task_id.map(Cow::into_owned) else {
            return ResponseFuture::error(invalid(format!("{method}: params.taskId is required")));
        };
        let principal = self.layer.principal(req.extensions());
        let answers = p.input_responses.unwrap_or_default();
        let layer = self.layer.clone();
        ResponseFuture::boxed(async move {
            let record = layer.read(&id).await.map_err(store_error)?;
            let record = match record {
                Some(r) if layer.visible(&r, principal.as_ref()) => r,
                _ => return Err(unknown_task().into()),
            };
            match method.as_str() {
                "tasks/get" => Ok(record.to_json(Some("complete"))),
                "tasks/cancel" => {
                    cancel(&layer, &record).await?;
                    Ok(serde_json::json!({"resultType": "complete"}))
                }
                _ => {
                    update(&layer, &record, &answers).await?;
                    Ok(serde_json::json!({"resultType": "complete"}))
                }
            }
        })
    }
    /// A `subscriptions/listen` that asks for task ids only is served here
    /// (`notifications/tasks`); one that asks for other notifications too
    /// goes to the inner service, which does not acknowledge the task ids.
    fn listen(&mut self, req: McpRequest) -> ResponseFuture<S::Future, S::Response> {
        let Ok(p) = req.params_as::<ListenPeek>() else {
            return ResponseFuture::inner(self.inner.call(req));
        };
        let Some(ids) = p.notifications.task_ids else {
            return ResponseFuture::inner(self.inner.call(req));
        };
        let declared = p
            .meta
            .and_then(|m| m.capabilities)
            .and_then(|c| c.extensions)
            .is_some_and(|e| e.contains_key(EXTENSION));
        if !declared {
            return ResponseFuture::error(missing_capability("notifications/tasks"));
        }
        if !p.notifications.others.is_empty() {
            return ResponseFuture::inner(self.inner.call(req));
        }
        let Some(subscription) = req.id().cloned() else {
            return ResponseFuture::inner(self.inner.call(req));
        };
        let principal = self.layer.principal(req.extensions());
        let ctx = crate::RequestContext::of(&req);
        ResponseFuture::boxed(super::listen::listen(
            self.layer.clone(),
            ctx,
            subscription,
            ids,
            principal,
        ))
    }
}

#[derive(Deserialize)]
struct ListenPeek {
    #[serde(default)]
    notifications: NotificationsPeek,
    #[serde(default, rename = "_meta")]
    meta: Option<MetaPeek>,
}

#[derive(Deserialize, Default)]
struct NotificationsPeek {
    #[serde(default, rename = "taskIds")]
    task_ids: Option<Vec<String>>,
    #[serde(flatten)]
    others: Map<String, Value>,
}

/// `tasks/cancel`: the task's end is `cancelled` at once (first writer
/// wins: a task already ended keeps its end, and the ack is the same),
/// then its work is stopped: token, grace, drop — here, or on the replica
/// that runs it, told through the store.
async fn cancel(layer: &Shared, record: &TaskRecord) -> Result<(), BoxError> {
    if record.status.is_terminal() {
        return Ok(());
    }
    // Its work ended here, the end not yet in the store: that end is the
    // truth (the record read `working` only because the store failed it).
    if let Some(end) = layer.executor.unwritten(&record.id) {
        layer
            .store
            .finish(&record.id, end, layer.config.run.retention)
            .await
            .map_err(store_error)?;
        return Ok(());
    }
    let end = TaskEnd::Cancelled(Some("cancelled by the client (tasks/cancel)".into()));
    let ended = match layer
        .store
        .finish(&record.id, end, layer.config.run.retention)
        .await
    {
        Ok(ended) => ended,
        // The write may have landed with its answer lost: the store says.
        Err(e) => match layer.store.get(&record.id).await {
            Ok(Some(r)) if r.status.is_terminal() => true,
            _ => return Err(store_error(e).into()),
        },
    };
    if let Some(core) = layer.executor.get(&record.id) {
        core.cancellation
            .cancel(CancelReason::peer(Some("tasks/cancel")));
    } else if let (true, Some(owner)) = (ended, remote_owner(layer, record)) {
        // The cancel is recorded: a lost signal is found by the owner's
        // re-read of its tasks, so a failed send still acks.
        let signal = TaskSignal::Cancel {
            id: record.id.clone(),
        };
        if let Err(e) = layer.store.signal_owner(owner, signal).await {
            tracing::debug!(target: "tower_mcp_cancel::task", error = %e, "owner not signalled");
        }
    }
    Ok(())
}

/// The owner of `record` when it is another replica.
fn remote_owner<'r>(layer: &Shared, record: &'r TaskRecord) -> Option<&'r str> {
    record
        .owner
        .as_deref()
        .filter(|o| *o != layer.executor.owner())
}

fn store_error(e: StoreError) -> ErrorObject {
    ErrorObject::new(ErrorObject::INTERNAL_ERROR, e.to_string())
}

/// `tasks/update`: the answers to outstanding input requests go to the
/// waiting handler (here, or on the replica that runs it, through the
/// store); keys not outstanding are ignored. The answered keys leave the
/// record before the ack.
async fn update(
    layer: &Shared,
    record: &TaskRecord,
    answers: &Map<String, Value>,
) -> Result<(), BoxError> {
    let Some(core) = layer.executor.get(&record.id) else {
        return update_remote(layer, record, answers).await;
    };
    // The store first: a write that fails answers this request with an
    // error and leaves the handler's input requests waiting.
    let keys = core.pending_keys(answers);
    if keys.is_empty() {
        return Ok(());
    }
    if let Err(e) = layer
        .store
        .update(&record.id, TaskChange::AnswerInputs(keys.clone()))
        .await
    {
        // The write may have landed with its answer lost: the store says.
        match layer.store.get(&record.id).await {
            Ok(Some(r))
                if !r.status.is_terminal()
                    && keys.iter().all(|k| !r.input_requests.contains_key(k)) => {}
            _ => return Err(store_error(e).into()),
        }
    }
    for (key, tx) in core.take_pending(answers) {
        let _ = tx.send(answers.get(&key).cloned().unwrap_or_default());
    }
    Ok(())
}

/// `tasks/update` for a task another replica runs: the answers to its
/// outstanding requests are handed to the store for the owner first, then
/// their keys leave the record.
async fn update_remote(
    layer: &Shared,
    record: &TaskRecord,
    answers: &Map<String, Value>,
) -> Result<(), BoxError> {
    let Some(owner) = remote_owner(layer, record) else {
        return Ok(());
    };
    let outstanding: Map<String, Value> = answers
        .iter()
        .filter(|(k, _)| record.input_requests.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if outstanding.is_empty() {
        return Ok(());
    }
    let keys = outstanding.keys().cloned().collect();
    let signal = TaskSignal::Input {
        id: record.id.clone(),
        answers: outstanding,
    };
    layer
        .store
        .signal_owner(owner, signal)
        .await
        .map_err(store_error)?;
    layer
        .store
        .update(&record.id, TaskChange::AnswerInputs(keys))
        .await
        .map_err(store_error)?;
    Ok(())
}
