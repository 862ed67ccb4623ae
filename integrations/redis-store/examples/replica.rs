//! One replica of an MCP server whose tasks live in Redis: run two (or
//! more) on different ports with the same Redis, put them behind a
//! balancer without stickiness, and they behave as one server for tasks.
//!
//! ```text
//! redis-server --port 6379 --save '' --appendonly no &
//! cargo run -p tower-mcp-cancel-redis --example replica -- --listen 127.0.0.1:8081 --redis redis://127.0.0.1:6379/ --events
//! cargo run -p tower-mcp-cancel-redis --example replica -- --listen 127.0.0.1:8082 --redis redis://127.0.0.1:6379/ --events
//! ```
//!
//! `--redis-cluster URL,URL,…` uses a Redis Cluster instead (some of its
//! nodes), `--sentinel URL[,URL…] --sentinel-master NAME` the primary that
//! Sentinels name (`--primary-password-env VAR`: its password, read from
//! that environment variable); `--acknowledged-by N` makes creations and ends wait for
//! N Redis replicas. `--help` lists every flag.
//!
//! Tool `slow_compute {seconds}` runs as a task when the request declares
//! the tasks extension. Prints `listening on http://ADDR/mcp` on stdout.
//! With `--events`, one line per event on stderr, `<KIND> <id> <unix-ns>`
//! as the root's example servers print them: `DONE <request id>` when the
//! work ends, `DROPPED <request id>` when it is dropped (a `tasks/cancel`
//! on any replica, its TTL), keyed by the id (as JSON) of the request that
//! created it; `RUNS <taskId>` when the work of a call that may become a
//! task starts; `SERVED_GET`, `SERVED_CANCEL`, `SERVED_UPDATE`,
//! `SERVED_LIST`, … `<taskId>` for each `tasks/*` request it answers.

#[path = "../../../examples/common/cli.rs"]
mod cli;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::{service_fn, BoxError, ServiceBuilder};
use tower_mcp_cancel::tasks::{TaskContext, TaskPolicy, TasksLayer};
use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_redis::{RedisStore, RedisStoreBuilder};

/// One replica of an MCP server (Streamable HTTP at /mcp) whose tasks
/// live in Redis; tool `slow_compute {seconds}`.
#[derive(clap::Parser, Debug)]
#[command(name = "replica")]
#[command(group(clap::ArgGroup::new("topology").required(true).args(["redis", "redis_cluster", "sentinel"])))]
struct Cli {
    /// The address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// One Redis node.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// The seed nodes of a Redis Cluster.
    #[arg(long, value_name = "URL,URL,…", value_delimiter = ',')]
    redis_cluster: Vec<String>,
    /// The Sentinels watching the primary named by --sentinel-master.
    #[arg(
        long,
        value_name = "URL[,URL…]",
        value_delimiter = ',',
        requires = "sentinel_master"
    )]
    sentinel: Vec<String>,
    /// The name the Sentinels know the primary by.
    #[arg(long, value_name = "NAME", requires = "sentinel")]
    sentinel_master: Option<String>,
    /// The environment variable holding the password of the primary the
    /// Sentinels name (`requirepass`; a Sentinel's own goes in its URL).
    #[arg(long, value_name = "VAR", requires = "sentinel")]
    primary_password_env: Option<String>,
    /// The ACL user of the primary, with --primary-password-env.
    #[arg(long, value_name = "NAME", requires = "primary_password_env")]
    primary_user: Option<String>,
    /// How many Redis replicas must acknowledge a task's creation and its
    /// end (WAIT) before they count: 0 is the primary's answer alone.
    #[arg(long, value_name = "N", default_value_t = 0)]
    acknowledged_by: usize,
    /// A task's TTL (500ms, 30s, 5m, 1h, or seconds).
    #[arg(long, value_name = "DURATION", default_value = "600", value_parser = cli::duration)]
    task_ttl: Duration,
    /// How long a vanished replica's tasks stay `working` before they read
    /// `failed` (the owner lease).
    #[arg(long, value_name = "DURATION", default_value = "10", value_parser = cli::duration)]
    lease: Duration,
    /// `<KIND> <id> <unix-ns>` lines on stderr (see the example's docs).
    #[arg(long)]
    events: bool,
}

impl Cli {
    fn store(&self) -> Result<RedisStoreBuilder, String> {
        let mut store = if let Some(url) = &self.redis {
            RedisStore::builder(url)
        } else if !self.redis_cluster.is_empty() {
            RedisStore::cluster(self.redis_cluster.clone())
        } else {
            let master = self.sentinel_master.clone().unwrap_or_default();
            RedisStore::sentinel(self.sentinel.clone(), master)
        };
        if let Some(var) = &self.primary_password_env {
            let password =
                std::env::var(var).map_err(|e| format!("--primary-password-env {var}: {e}"))?;
            store = store.primary_auth(self.primary_user.as_deref(), &password);
        }
        Ok(store
            .lease(self.lease)
            .acknowledged_by(self.acknowledged_by))
    }
}

/// `<kind> <id> <unix-ns>` on stderr when `on`, in one write.
fn emit(on: bool, kind: &str, id: &str) {
    if on {
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let line = format!("{kind} {id} {ns}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

/// Reports `DROPPED <id>` if the work's future is dropped before its end,
/// `DONE <id>` when it ended.
struct Event {
    id: String,
    done: bool,
    on: bool,
}

impl Drop for Event {
    fn drop(&mut self) {
        emit(
            self.on,
            if self.done { "DONE" } else { "DROPPED" },
            &self.id,
        );
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
            if let Some(task) = TaskContext::of(&req) {
                emit(events, "RUNS", task.id());
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

fn exit(message: String) -> ! {
    eprintln!("{message}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let cli: Cli = cli::parse();
    let events = cli.events;
    let store = cli
        .store()
        .unwrap_or_else(|e| exit(e))
        .connect()
        .await
        .unwrap_or_else(|e| exit(format!("cannot use Redis: {e}")));
    let tasks = TasksLayer::with_store(store)
        .tool("slow_compute", TaskPolicy::optional())
        .ttl(Some(cli.task_ttl));
    let svc = StreamableHttpService::new(
        ServiceBuilder::new()
            .map_request(move |req: McpRequest| {
                if let Some(verb) = req.method().strip_prefix("tasks/") {
                    let id = req
                        .params_as::<Value>()
                        .ok()
                        .and_then(|p| p["taskId"].as_str().map(str::to_owned));
                    let kind = format!("SERVED_{}", verb.to_ascii_uppercase());
                    emit(events, &kind, &id.unwrap_or_default());
                }
                req
            })
            .layer(tasks)
            .service(service_fn(move |req| tool(req, events))),
    );
    let addr = cli.listen;
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
