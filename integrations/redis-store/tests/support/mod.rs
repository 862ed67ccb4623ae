//! A real `redis-server` for the tests and the bench: started on a free
//! loopback port in a temporary directory, without persistence, stopped
//! (and its directory removed) on drop; and the tasks layer over a handler.

#![allow(dead_code, unreachable_pub)]

pub mod cluster;
pub mod fleet;
pub mod process;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_mcp_cancel::tasks::{Tasks, TasksLayer, EXTENSION};
use tower_mcp_cancel::McpRequest;

use process::Node;

/// A single `redis-server`, without persistence, in its own temporary
/// directory (removed on drop).
pub struct Redis {
    node: Node,
    pub port: u16,
    dir: PathBuf,
}

impl Redis {
    /// A started server; `None` (with a message) when `redis-server` is not
    /// installed and this is not CI; in CI (`CI` set) its absence fails.
    pub fn start() -> Option<Self> {
        if !process::tools(&["redis-server"]) {
            return None;
        }
        let port = process::free_port();
        let dir = process::temp_dir("redis");
        let args = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .map(str::to_owned);
        let node = Node::spawn("redis-server", port, &dir, &args);
        let redis = Self { node, port, dir };
        redis.until_it_answers();
        Some(redis)
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts it (again) on its port, and waits (bounded) until it answers.
    pub fn restart(&mut self) {
        self.node.restart();
        self.until_it_answers();
    }

    fn until_it_answers(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.pong() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer in 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Stops it (SIGKILL: it goes away as a crash would).
    pub fn stop(&mut self) {
        self.node.kill();
    }

    /// Pauses it (SIGSTOP): its connections stay open, nothing is
    /// answered until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.node.pause();
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        self.node.resume();
    }

    /// Runs a command through a plain connection (for what the store does
    /// not do: killing clients, removing a lease).
    pub async fn command(&self, cmd: &redis::Cmd) -> redis::Value {
        self.node.command(cmd).await.unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.node.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How long [`until_status`] waits: a bound, not a synchronisation.
pub const STATUS_BOUND: Duration = Duration::from_secs(20);

/// The task's record, read through `svc` (`tasks/get`).
pub async fn status(svc: &mut Svc, id: &str) -> serde_json::Value {
    send(svc, task_req(9, "tasks/get", id, json!({})))
        .await
        .unwrap()
}

/// Reads the task through `svc` until its status is `want`, within
/// [`STATUS_BOUND`].
pub async fn until_status(svc: &mut Svc, id: &str, want: &str) -> serde_json::Value {
    tokio::time::timeout(STATUS_BOUND, async {
        loop {
            let got = status(svc, id).await;
            if got["status"] == want {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("task {id} never read {want}"))
}

/// Resolves its receiver when dropped: the work's future is gone.
pub struct OnDrop(pub Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[derive(Clone)]
pub struct Probe(pub std::sync::Arc<std::sync::Mutex<Option<OnDrop>>>);

pub fn probe() -> (Probe, oneshot::Receiver<()>) {
    let (tx, rx) = oneshot::channel();
    (
        Probe(std::sync::Arc::new(std::sync::Mutex::new(Some(OnDrop(
            Some(tx),
        ))))),
        rx,
    )
}

pub type Svc = Tasks<tower::util::BoxCloneSyncService<McpRequest, Value, BoxError>>;

pub fn stack<F, Fut>(layer: TasksLayer, handler: F) -> Svc
where
    F: Fn(McpRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Value, BoxError>> + Send + 'static,
{
    layer.layer(tower::util::BoxCloneSyncService::new(service_fn(handler)))
}

/// `sleep {ms}`: holds the request's probe, sleeps, answers.
pub async fn sleeper(req: McpRequest) -> Result<Value, BoxError> {
    let ms = req.params_as::<Value>()?["arguments"]["ms"]
        .as_u64()
        .unwrap_or(0);
    let _probe = req
        .extensions()
        .get::<Probe>()
        .and_then(|p| p.0.lock().unwrap().take());
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(json!({"content": [], "isError": false}))
}

fn declared() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}})
}

pub fn call(id: i64, tool: &str, args: Value) -> McpRequest {
    McpRequest::new(id, "tools/call")
        .with_params(json!({"name": tool, "arguments": args, "_meta": declared()}))
}

pub fn task_req(id: i64, method: &str, task_id: &str, extra: Value) -> McpRequest {
    let mut params = json!({"taskId": task_id, "_meta": declared()});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    McpRequest::new(id, method).with_params(params)
}

pub async fn send(svc: &mut Svc, req: McpRequest) -> Result<Value, BoxError> {
    let out = svc.ready().await?.call(req).await?;
    Ok(serde_json::to_value(out).unwrap())
}

/// Creates a task; its id.
pub async fn create(svc: &mut Svc, req: McpRequest) -> String {
    let created = send(svc, req).await.unwrap();
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_owned()
}

/// The panics seen so far, by the name of the thread they happened on (a
/// test's own name on a current-thread runtime, where its spawned tasks
/// run too): a panic in a spawned task is caught by tokio and fails no
/// test by itself.
static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Records every panic from now on (the default report still printed).
pub fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("?").to_owned();
            PANICS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((thread, info.to_string()));
            previous(info);
        }));
    });
}

/// Fails when this thread panicked since [`watch_panics`].
pub fn assert_no_panic() {
    let thread = std::thread::current().name().unwrap_or("?").to_owned();
    // Not held while asserting: the hook takes the lock.
    let mine: Vec<_> = PANICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|(t, _)| *t == thread)
        .cloned()
        .collect();
    assert!(mine.is_empty(), "a panic in a spawned task: {mine:?}");
}
