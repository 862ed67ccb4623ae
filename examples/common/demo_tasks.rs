//! The main demo's step 7: tasks (feature `tasks`). A long tool call
//! becomes a task on the server; the client's `TaskCallLayer` turns it back
//! into one call, so the client's timeout bounds the whole task, and
//! dropping the call sends `tasks/cancel`, which drops the task's handler
//! future on the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::tasks::{TaskCallLayer, TaskPolicy, TasksLayer};
use tower_mcp_cancel::transport::http::{serve, HttpClient, StreamableHttpService};
use tower_mcp_cancel::{McpRequest, ProgressObserver, RequestContext, TimeoutLayer};

/// Says when the task's handler future is dropped before it finished.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        if !self.0.load(Ordering::SeqCst) {
            println!("   server: the task's handler future was DROPPED (tasks/cancel)");
        }
    }
}

/// `build {steps}`: 100 ms a step, each reported as the task's status.
async fn build(req: McpRequest) -> Result<serde_json::Value, BoxError> {
    let done = Arc::new(AtomicBool::new(false));
    let _probe = Dropped(done.clone());
    let steps = req.params_as::<serde_json::Value>()?["arguments"]["steps"]
        .as_u64()
        .unwrap_or(10);
    let ctx = RequestContext::of(&req);
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_millis(100)).await;
        ctx.progress(
            step as f64,
            Some(steps as f64),
            Some(format!("step {step}/{steps}")),
        )
        .await;
    }
    done.store(true, Ordering::SeqCst);
    Ok(
        serde_json::json!({"resultType": "complete", "content": [{"type": "text", "text": format!("built in {steps} steps")}]}),
    )
}

fn call(steps: u64) -> McpRequest {
    McpRequest::without_id("tools/call")
        .with_params(serde_json::json!({"name": "build", "arguments": {"steps": steps}}))
        .with_extension(ProgressObserver::new(|p| {
            if let Some(m) = &p.message {
                println!("   client: {m}");
            }
        }))
}

pub(crate) async fn tasks_part() {
    println!("\n7. Tasks over Streamable HTTP: `build` becomes a task on the server;");
    println!("   the client's TaskCallLayer polls it, and its TimeoutLayer(450 ms) bounds the whole task");
    let tasks = TasksLayer::new()
        .tool("build", TaskPolicy::optional())
        .poll_interval(Duration::from_millis(100));
    let drained = tasks.handle();
    let server = ServiceBuilder::new()
        .layer(tasks)
        .service(service_fn(build));
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => return println!("   (skipped: cannot listen on loopback: {e})"),
    };
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        StreamableHttpService::new(server),
        shutdown.clone(),
    ));
    let Ok(uri) = format!("http://{addr}/mcp").parse() else {
        return;
    };
    let http = HttpClient::new(uri);

    let mut client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(450)))
        .layer(TaskCallLayer::new())
        .service(http.clone());
    let t = Instant::now();
    let r = match client.ready().await {
        Ok(c) => c.call(call(10)).await,
        Err(e) => Err(e),
    };
    match r {
        Ok(v) => println!("   client: unexpected result {v}"),
        Err(e) => println!(
            "   client: {e} ({:?}): the call was dropped, tasks/cancel sent",
            t.elapsed()
        ),
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), drained.drained()).await;

    println!("   the same call with no timeout: one call, the task's result");
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(http);
    let t = Instant::now();
    match client.ready().await {
        Ok(c) => match c.call(call(3)).await {
            Ok(v) => println!(
                "   client: {} after {:?}",
                v["content"][0]["text"].as_str().unwrap_or("?"),
                t.elapsed()
            ),
            Err(e) => println!("   client: failed: {e}"),
        },
        Err(e) => println!("   client: failed: {e}"),
    }
    shutdown.cancel();
}
