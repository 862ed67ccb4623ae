//! The tasks layer over a bare service: every rule, with the paused clock
//! and drop probes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tower::{service_fn, BoxError, Service, ServiceExt};

use super::*;
use crate::jsonrpc::ErrorObject;
use crate::{McpRequest, RequestContext};

/// Resolves its receiver when dropped: proof that a future was dropped.
struct OnDrop(Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

fn probe() -> (OnDrop, oneshot::Receiver<()>) {
    let (tx, rx) = oneshot::channel();
    (OnDrop(Some(tx)), rx)
}

fn declared() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}})
}

fn call(id: i64, tool: &str, args: Value, declare: bool) -> McpRequest {
    let mut params = json!({"name": tool, "arguments": args});
    if declare {
        params["_meta"] = declared();
    }
    McpRequest::new(id, "tools/call").with_params(params)
}

fn task_req(id: i64, method: &str, task_id: &str, extra: Value) -> McpRequest {
    let mut params = json!({"taskId": task_id, "_meta": declared()});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    McpRequest::new(id, method).with_params(params)
}

type Svc = Tasks<tower::util::BoxCloneSyncService<McpRequest, Value, BoxError>>;

fn stack<F, Fut>(layer: TasksLayer, handler: F) -> Svc
where
    F: Fn(McpRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Value, BoxError>> + Send + 'static,
{
    use tower::Layer;
    layer.layer(tower::util::BoxCloneSyncService::new(service_fn(handler)))
}

async fn send(svc: &mut Svc, req: McpRequest) -> Result<Value, BoxError> {
    let out = svc.ready().await?.call(req).await?;
    Ok(serde_json::to_value(out).unwrap())
}

fn code(err: &BoxError) -> i64 {
    err.downcast_ref::<ErrorObject>()
        .expect("an ErrorObject")
        .code
}

/// A handler: `sleep {ms}` sleeps, then answers; it holds a drop probe
/// sent through the request's extensions.
async fn sleeper(req: McpRequest) -> Result<Value, BoxError> {
    let args: Value = req.params_as::<Value>()?["arguments"].clone();
    // Signals when this future is dropped (or ends).
    let _probe = req
        .extensions()
        .get::<Probe>()
        .and_then(|p| p.0.lock().unwrap().take());
    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
    Ok(json!({"content": [{"type": "text", "text": "done"}], "isError": false}))
}

#[derive(Clone)]
struct Probe(Arc<std::sync::Mutex<Option<OnDrop>>>);

fn with_probe(req: McpRequest) -> (McpRequest, oneshot::Receiver<()>) {
    let (p, rx) = probe();
    (
        req.with_extension(Probe(Arc::new(std::sync::Mutex::new(Some(p))))),
        rx,
    )
}

fn layer() -> TasksLayer {
    TasksLayer::new()
        .tool("sleep", TaskPolicy::optional())
        .tool("must", TaskPolicy::required())
        .poll_interval(Duration::from_millis(100))
}

async fn create(svc: &mut Svc, req: McpRequest) -> String {
    let created = send(svc, req).await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working");
    created["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_of_a_declaring_client_becomes_a_task_that_completes() {
    let mut svc = stack(layer(), sleeper);
    let id = create(&mut svc, call(1, "sleep", json!({"ms": 1000}), true)).await;
    assert_eq!(id.len(), 32);
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["resultType"], "complete");
    assert_eq!(got["status"], "working");
    assert_eq!(got["pollIntervalMs"], 100);
    tokio::time::sleep(Duration::from_millis(1001)).await;
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "done");
}

#[tokio::test(start_paused = true)]
async fn without_the_extension_the_call_is_plain_and_a_required_tool_is_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let mut svc = stack(layer(), move |req| {
        seen.fetch_add(1, Ordering::SeqCst);
        sleeper(req)
    });
    let plain = send(&mut svc, call(1, "sleep", json!({"ms": 50}), false))
        .await
        .unwrap();
    assert_eq!(plain["content"][0]["text"], "done");
    let err = send(&mut svc, call(2, "must", json!({}), false))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY);
    let data = err
        .downcast_ref::<ErrorObject>()
        .unwrap()
        .data
        .clone()
        .unwrap();
    assert_eq!(
        data["requiredCapabilities"]["extensions"][EXTENSION],
        json!({})
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a refused call never reaches the handler"
    );
    // tasks/* from a request that did not declare the extension
    let req = McpRequest::new(3, "tasks/get").with_params(json!({"taskId": "x"}));
    let err = send(&mut svc, req).await.unwrap_err();
    assert_eq!(code(&err), ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY);
    // A call that ends at its first poll is answered as it is.
    let quick = send(&mut svc, call(4, "sleep", json!({"ms": 0}), true))
        .await
        .unwrap();
    assert_eq!(quick["content"][0]["text"], "done");
}

#[tokio::test(start_paused = true)]
async fn tasks_cancel_drops_the_work_at_once_and_is_idempotent() {
    let mut svc = stack(layer(), sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let id = create(&mut svc, req).await;
    let ack = send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    let start = tokio::time::Instant::now();
    dropped.await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "dropped without waiting for any timer"
    );
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled");
    let again = send(&mut svc, task_req(4, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(again, json!({"resultType": "complete"}));
    let err = send(&mut svc, task_req(5, "tasks/cancel", "nope", json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INVALID_PARAMS);
    let err = send(&mut svc, task_req(6, "tasks/get", "nope", json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INVALID_PARAMS);
}

#[tokio::test(start_paused = true)]
async fn a_completion_in_the_grace_is_dropped_and_the_task_stays_cancelled() {
    let layer = layer().grace(Duration::from_millis(200));
    let handle = layer.handle();
    let cleaned = Arc::new(AtomicUsize::new(0));
    let c = cleaned.clone();
    let mut svc = stack(layer, move |req: McpRequest| {
        let c = c.clone();
        async move {
            let token = RequestContext::of(&req).token();
            token.cancelled().await;
            tokio::time::sleep(Duration::from_millis(100)).await; // cleanup
            c.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"content": [], "late": true}))
        }
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    handle.drained().await;
    assert_eq!(
        cleaned.load(Ordering::SeqCst),
        1,
        "the cleanup ran within the grace"
    );
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "cancelled");
    assert!(got.get("result").is_none(), "{got}");
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_its_token_is_dropped_when_the_grace_ends() {
    let mut svc = stack(layer().grace(Duration::from_millis(300)), sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 60_000}), true));
    let id = create(&mut svc, req).await;
    send(&mut svc, task_req(2, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    dropped.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn the_ttl_is_a_hard_maximum_on_time_then_the_record_is_retained() {
    let layer = layer()
        .ttl(Some(Duration::from_secs(10)))
        .retention(Duration::from_secs(30));
    let mut svc = stack(layer, sleeper);
    let (req, dropped) = with_probe(call(1, "sleep", json!({"ms": 3_600_000}), true));
    let start = tokio::time::Instant::now();
    let id = create(&mut svc, req).await;
    dropped.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "failed");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TTL elapsed"),
        "{got}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    let err = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap_err();
    assert_eq!(code(&err), ErrorObject::INVALID_PARAMS);
}

#[tokio::test(start_paused = true)]
async fn a_handler_may_extend_its_own_ttl() {
    let layer = layer().ttl(Some(Duration::from_secs(10)));
    let mut svc = stack(layer, |req: McpRequest| async move {
        let task = TaskContext::of(&req).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(task.extend_ttl(Duration::from_secs(20)).await);
        tokio::time::sleep(Duration::from_secs(15)).await;
        Ok(json!({"content": [], "ranFor": 16}))
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["ttlMs"], 30_000);
    tokio::time::sleep(Duration::from_secs(15)).await;
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "{got}");
}

#[tokio::test(start_paused = true)]
async fn promotion_after_a_delay_keeps_short_calls_plain() {
    let layer = TasksLayer::new().tool(
        "sleep",
        TaskPolicy::optional().after(Duration::from_secs(2)),
    );
    let mut svc = stack(layer, sleeper);
    let quick = send(&mut svc, call(1, "sleep", json!({"ms": 1_500}), true))
        .await
        .unwrap();
    assert_eq!(quick["content"][0]["text"], "done");
    let start = tokio::time::Instant::now();
    let id = create(&mut svc, call(2, "sleep", json!({"ms": 5_000}), true)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(3_001)).await;
    let got = send(&mut svc, task_req(3, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(
        got["status"], "completed",
        "the work went on across the promotion: {got}"
    );
}

#[tokio::test(start_paused = true)]
async fn input_requests_park_the_task_until_tasks_update_answers_them() {
    let mut svc = stack(layer(), |req: McpRequest| async move {
        let task = TaskContext::of(&req).unwrap();
        let ask = json!({"method": "elicitation/create", "params": {"message": "name?"}});
        let answer = task.input("name", ask.clone()).await?;
        assert!(matches!(
            task.input("name", ask).await,
            Err(InputError::KeyReused(_))
        ));
        Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}))
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "input_required", "{got}");
    assert_eq!(got["inputRequests"]["name"]["method"], "elicitation/create");
    let stray = json!({"inputResponses": {"other": {"action": "accept"}}});
    send(&mut svc, task_req(3, "tasks/update", &id, stray))
        .await
        .unwrap();
    let got = send(&mut svc, task_req(4, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(
        got["status"], "input_required",
        "a key not outstanding is ignored"
    );
    let answer =
        json!({"inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}}});
    let ack = send(&mut svc, task_req(5, "tasks/update", &id, answer))
        .await
        .unwrap();
    assert_eq!(ack, json!({"resultType": "complete"}));
    let got = send(&mut svc, task_req(6, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert!(
        got.get("inputRequests").is_none(),
        "an answered key is gone at once: {got}"
    );
    tokio::task::yield_now().await;
    let got = send(&mut svc, task_req(7, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["result"]["content"][0]["text"], "Luca");
}

#[tokio::test(start_paused = true)]
async fn progress_becomes_the_status_message_and_nothing_else() {
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let go = Arc::new(std::sync::Mutex::new(Some(go_rx)));
    let mut svc = stack(layer(), move |req: McpRequest| {
        let go = go.lock().unwrap().take();
        async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let ctx = RequestContext::of(&req);
            assert!(
                ctx.progress(1.0, Some(4.0), Some("step 1 of 4".into()))
                    .await
            );
            assert!(!ctx.notify("notifications/message", &json!({})).await);
            if let Some(go) = go {
                let _ = go.await;
            }
            Ok(json!({"content": []}))
        }
    });
    let id = create(&mut svc, call(1, "sleep", json!({}), true)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let got = send(&mut svc, task_req(2, "tasks/get", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(got["statusMessage"], "step 1 of 4", "{got}");
    go_tx.send(()).unwrap();
}

mod races;

/// SECURITY.md's table of limits states the tasks' defaults: it must say
/// what the code does.
#[test]
fn the_security_table_states_the_tasks_defaults() {
    const SECURITY: &str = include_str!("../../../SECURITY.md");
    let default_of = |limit: &str| {
        let row = SECURITY
            .lines()
            .find(|l| l.starts_with("| ") && l[2..].starts_with(limit))
            .unwrap_or_else(|| panic!("no row for {limit}"));
        row.split('|').nth(2).unwrap().trim().to_owned()
    };
    let layer = TasksLayer::new();
    let run = &layer.shared.config.run;
    let secs = |d: Duration| format!("{} s", d.as_secs());
    assert_eq!(
        default_of("tasks running per tasks layer"),
        run.max_tasks.to_string()
    );
    assert_eq!(
        default_of("task records in the in-memory store"),
        MemoryStore::DEFAULT_CAPACITY.to_string()
    );
    assert_eq!(
        default_of("a task's time to live"),
        secs(layer.shared.config.ttl.unwrap())
    );
    assert_eq!(default_of("an ended task's record"), secs(run.retention));
    assert_eq!(
        default_of("one call of the task store"),
        secs(layer.shared.watched.timeout())
    );
    assert_eq!(
        default_of("the task client's failed polls"),
        TaskCallLayer::new().poll_retries_value().to_string()
    );
    assert_eq!(
        default_of("the task client's background"),
        secs(TaskCallLayer::new().cancel_timeout_value())
    );
}

mod ends;
mod replicas;
