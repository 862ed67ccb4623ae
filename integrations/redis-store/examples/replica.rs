//! One replica of an MCP server whose tasks live in Redis: run two (or
//! more) on different ports with the same `--redis`, put them behind a
//! balancer without stickiness, and they behave as one server for tasks.
//!
//! ```text
//! redis-server --port 6379 --save '' --appendonly no &
//! cargo run -p tower-mcp-cancel-redis --example replica -- --listen 127.0.0.1:8081 --redis redis://127.0.0.1:6379/ --events
//! cargo run -p tower-mcp-cancel-redis --example replica -- --listen 127.0.0.1:8082 --redis redis://127.0.0.1:6379/ --events
//! ```
//!
//! Tool `slow_compute {seconds}` runs as a task when the request declares
//! the tasks extension. With `--events`, its work prints `DONE <id>` when
//! it ends and `DROPPED <id>` when it is dropped (a `tasks/cancel` on any
//! replica, its TTL), keyed by the id of the request that created it.
//! It also prints `RUNS <taskId>` when the work of a call that may become a
//! task starts, and `SERVED <method> <taskId>` for each `tasks/*` request
//! it answers. `--task-ttl SECONDS` sets the TTL (default 600), `--lease
//! SECONDS` the owner lease (default 10).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, BoxError, ServiceBuilder};
use tower_mcp_cancel::tasks::{TaskContext, TaskPolicy, TasksLayer};
use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_redis::RedisStore;

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next().and(args.next())
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn exit(message: String) -> ! {
    eprintln!("{message}");
    std::process::exit(2)
}

/// Prints `DROPPED <id>` if the work's future is dropped before its end.
struct Event {
    id: String,
    done: bool,
    on: bool,
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.on {
            println!("{} {}", if self.done { "DONE" } else { "DROPPED" }, self.id);
        }
    }
}

async fn tool(req: McpRequest, events: bool) -> Result<Value, BoxError> {
    let p: Value = req.params_as()?;
    match p["name"].as_str() {
        Some("slow_compute") => {
            let seconds = p["arguments"]["seconds"]
                .as_f64()
                .unwrap_or(5.0)
                .clamp(0.0, 86_400.0);
            let id = req.id().map(|i| i.to_string()).unwrap_or_default();
            if let (true, Some(task)) = (events, TaskContext::of(&req)) {
                println!("RUNS {}", task.id());
            }
            let mut event = Event {
                id,
                done: false,
                on: events,
            };
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            event.done = true;
            Ok(
                json!({"content": [{"type": "text", "text": format!("computed for {seconds} s")}], "isError": false}),
            )
        }
        _ => Ok(json!({"content": [{"type": "text", "text": "unknown tool"}], "isError": true})),
    }
}

#[tokio::main]
async fn main() {
    let addr: SocketAddr = arg("--listen")
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()
        .unwrap_or_else(|e| exit(format!("bad --listen address: {e}")));
    let url = arg("--redis").unwrap_or_else(|| exit("--redis URL is required".into()));
    let ttl = match arg("--task-ttl") {
        Some(s) => s
            .parse::<u64>()
            .map(Duration::from_secs)
            .unwrap_or_else(|e| exit(format!("bad --task-ttl {s:?}: {e}"))),
        None => Duration::from_secs(600),
    };
    let events = flag("--events");
    let mut store = RedisStore::builder(url);
    if let Some(s) = arg("--lease") {
        let lease = s
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or_else(|| exit(format!("bad --lease {s:?}: seconds expected")));
        store = store.lease(lease);
    }
    let store = store
        .connect()
        .await
        .unwrap_or_else(|e| exit(format!("cannot use Redis: {e}")));
    let tasks = TasksLayer::with_store(store)
        .tool("slow_compute", TaskPolicy::optional())
        .ttl(Some(ttl));
    let svc = StreamableHttpService::new(
        ServiceBuilder::new()
            .map_request(move |req: McpRequest| {
                if events && req.method().starts_with("tasks/") {
                    let id = req
                        .params_as::<Value>()
                        .ok()
                        .and_then(|p| p["taskId"].as_str().map(str::to_owned));
                    println!("SERVED {} {}", req.method(), id.unwrap_or_default());
                }
                req
            })
            .layer(tasks)
            .service(service_fn(move |req| tool(req, events))),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| exit(format!("cannot listen on {addr}: {e}")));
    let bound = listener.local_addr().unwrap_or(addr);
    println!("listening on http://{bound}/mcp");
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    serve(listener, svc, shutdown).await;
}
