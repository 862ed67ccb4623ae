//! The handler the task tests share, and its drop probes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tower::BoxError;
use tower_mcp_cancel::tasks::TaskContext;
use tower_mcp_cancel::{McpRequest, RequestContext};

/// Resolves its receiver when dropped.
pub(crate) struct OnDrop(Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// The probes of the handler's futures, by tool call (in call order).
#[derive(Clone, Default)]
pub(crate) struct Probes(Arc<Mutex<Vec<oneshot::Receiver<()>>>>);

impl Probes {
    fn arm(&self) -> OnDrop {
        let (tx, rx) = oneshot::channel();
        self.0.lock().unwrap().push(rx);
        OnDrop(Some(tx))
    }

    /// The drop of the `n`th call's future (0-based).
    pub(crate) fn take(&self, n: usize) -> oneshot::Receiver<()> {
        let mut v = self.0.lock().unwrap();
        let (_tx, placeholder) = oneshot::channel();
        std::mem::replace(&mut v[n], placeholder)
    }
}

/// Tools: `sleep {ms}` (answers after that long, reporting a status each
/// second), `ask {}` (one input request, answers with it).
pub(crate) fn handler(
    probes: Probes,
) -> impl Fn(McpRequest) -> futures_util::future::BoxFuture<'static, Result<Value, BoxError>> + Clone
{
    move |req: McpRequest| {
        let probe = probes.arm();
        Box::pin(async move {
            let _probe = probe;
            let p: Value = req.params_as()?;
            match p["name"].as_str() {
                Some("sleep") => {
                    let ms = p["arguments"]["ms"].as_u64().unwrap_or(0);
                    let ctx = RequestContext::of(&req);
                    let mut left = ms;
                    let mut step = 0.0;
                    while left > 0 {
                        let d = left.min(1000);
                        tokio::time::sleep(Duration::from_millis(d)).await;
                        left -= d;
                        step += 1.0;
                        ctx.progress(step, None, Some(format!("slept {step} s")))
                            .await;
                    }
                    Ok(json!({"content": [{"type": "text", "text": format!("slept {ms} ms")}]}))
                }
                Some("ask") => {
                    let task = TaskContext::of(&req).ok_or("not a task")?;
                    let answer = task
                        .input(
                            "name",
                            json!({"method": "elicitation/create", "params": {"message": "name?"}}),
                        )
                        .await?;
                    let name = answer["content"]["name"].as_str().unwrap_or("?").to_owned();
                    Ok(json!({"content": [{"type": "text", "text": format!("Hello, {name}!")}]}))
                }
                _ => Err("unknown tool".into()),
            }
        })
    }
}
