//! Figures 3 and 4: a driver writing raw JSON-RPC lines to a stdio server
//! child and reading its stdout (responses) and stderr (handler events).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, Semaphore};
use tower_mcp_cancel_benchmarks::{mono_ns, Event, Kind};

/// A server under test: display name and binary name (next to this one).
#[derive(Clone, Copy, Debug)]
pub struct Server {
    pub name: &'static str,
    pub bin: &'static str,
}

pub const OURS: Server = Server {
    name: "tower-mcp-cancel (full stack)",
    bin: "ours_stdio",
};
pub const RMCP: Server = Server {
    name: "rmcp 3.11",
    bin: "rmcp_stdio",
};
pub const TOWER_MCP: Server = Server {
    name: "tower-mcp 0.25",
    bin: "tower_mcp_stdio",
};
pub const RMCP_CANCEL: Server = Server {
    name: "rmcp 3.11 + tower-mcp-cancel",
    bin: "rmcp_cancel_stdio",
};
pub const TOWER_MCP_CANCEL: Server = Server {
    name: "tower-mcp 0.25 + tower-mcp-cancel",
    bin: "tower_mcp_cancel_stdio",
};

fn bin_path(bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().expect("bin dir").join(bin)
}

#[derive(Deserialize)]
struct Reply {
    id: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    method: Option<String>,
}

/// What the stdout reader saw.
#[derive(Default)]
struct Seen {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
}

/// A running child with readers on both of its output pipes.
pub struct Conn {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    seen: Arc<Mutex<Seen>>,
    /// One permit per response (figure 3's window).
    replies: Arc<Semaphore>,
    /// A response for `id` arrived (the handshake, figure 4).
    reply_ids: mpsc::UnboundedReceiver<String>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl Conn {
    /// Spawns the server and does the 2025-11-25 `initialize` handshake
    /// (rmcp and tower-mcp refuse calls before it; ours answers it too).
    pub async fn open(server: Server) -> Conn {
        Self::open_with_env(server, &[]).await
    }

    /// [`open`](Self::open), with these environment variables for the
    /// server.
    pub async fn open_with_env(server: Server, env: &[(&str, &str)]) -> Conn {
        let mut child = Command::new(bin_path(server.bin))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "off")
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e} (build the benchmarks package)", server.bin));
        let stdin = BufWriter::with_capacity(64 * 1024, child.stdin.take().unwrap());
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let replies = Arc::new(Semaphore::new(0));
        let (id_tx, reply_ids) = mpsc::unbounded_channel();
        {
            let seen = seen.clone();
            let replies = replies.clone();
            tokio::spawn(async move {
                let mut r = BufReader::with_capacity(64 * 1024, stdout);
                let mut line = String::new();
                loop {
                    line.clear();
                    match r.read_line(&mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    let Ok(reply) = serde_json::from_str::<Reply>(&line) else {
                        continue;
                    };
                    if reply.method.is_some() {
                        continue; // a notification (progress, log)
                    }
                    let id = reply.id.map(|v| v.to_string()).unwrap_or_default();
                    {
                        let mut s = seen.lock().unwrap();
                        if reply.error.is_some() {
                            s.errors += 1;
                            if s.first_error.is_none() {
                                s.first_error = Some(line.trim().to_owned());
                            }
                        } else {
                            s.ok += 1;
                        }
                    }
                    let _ = id_tx.send(id);
                    replies.add_permits(1);
                }
            });
        }
        let (ev_tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if let Some(ev) = Event::parse(&line) {
                    let _ = ev_tx.send(ev);
                }
            }
        });
        let mut conn = Conn {
            child,
            stdin,
            seen,
            replies,
            reply_ids,
            events,
        };
        conn.send(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#).await;
        conn.flush().await;
        let got = tokio::time::timeout(Duration::from_secs(10), conn.reply_ids.recv())
            .await
            .ok()
            .flatten();
        assert_eq!(
            got.as_deref(),
            Some("\"init\""),
            "{}: no initialize answer",
            server.name
        );
        conn.replies.acquire().await.unwrap().forget();
        conn.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        conn.flush().await;
        conn
    }

    async fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
    }

    async fn flush(&mut self) {
        self.stdin.flush().await.unwrap();
    }

    /// Ends the child: stdin closed, then killed if it lingers.
    pub async fn close(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Figure 3's result for one round.
pub struct Throughput {
    pub requests: u64,
    pub elapsed: Duration,
    pub errors: u64,
}

impl Throughput {
    pub fn per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// `n` pipelined `tools/call echo` with at most `window` in flight.
pub async fn pipelined(conn: &mut Conn, first_id: u64, n: u64, window: usize) -> Throughput {
    pipelined_with_meta(conn, first_id, n, window, None).await
}

/// [`pipelined`], each request's params with `"_meta": meta` (a JSON
/// object's text) when given.
pub async fn pipelined_with_meta(
    conn: &mut Conn,
    first_id: u64,
    n: u64,
    window: usize,
    meta: Option<&str>,
) -> Throughput {
    let meta = meta.map(|m| format!(r#","_meta":{m}"#)).unwrap_or_default();
    let errors_before = conn.seen.lock().unwrap().errors;
    let done = conn.replies.clone();
    let start = Instant::now();
    let mut in_flight = 0usize;
    let mut answered = 0u64;
    for i in 0..n {
        while in_flight >= window {
            // Window full: flush what is queued, then wait for answers.
            conn.flush().await;
            let permit = done.acquire().await.unwrap();
            permit.forget();
            in_flight -= 1;
            answered += 1;
        }
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}}{meta}}}}}"#,
            first_id + i
        );
        conn.send(&line).await;
        in_flight += 1;
        // Take answers already there without waiting.
        while let Ok(p) = done.try_acquire() {
            p.forget();
            in_flight -= 1;
            answered += 1;
        }
    }
    conn.flush().await;
    while answered < n {
        done.acquire().await.unwrap().forget();
        answered += 1;
    }
    let elapsed = start.elapsed();
    while conn.reply_ids.try_recv().is_ok() {}
    let seen = conn.seen.lock().unwrap();
    if seen.errors > errors_before {
        eprintln!("  errors: {:?}", seen.first_error);
    }
    Throughput {
        requests: n,
        elapsed,
        errors: seen.errors - errors_before,
    }
}

/// One figure-4 sample.
#[derive(Clone, Debug, Default)]
pub struct CancelSample {
    /// `notifications/cancelled` written → handler future dropped.
    pub dropped: Option<Duration>,
    /// → the cancellation token fired.
    pub token: Option<Duration>,
    /// The handler ran to completion.
    pub done: bool,
    /// A response was written for the cancelled id.
    pub answered: bool,
}

/// `slow` (never checks its token) started, then cancelled; waits for the
/// handler's fate until `wait_for` after the cancel.
pub async fn cancel_once(
    conn: &mut Conn,
    id: u64,
    slow_secs: f64,
    wait_for: Duration,
) -> CancelSample {
    while conn.reply_ids.try_recv().is_ok() {}
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{"seconds":{slow_secs},"interval_ms":100}}}}}}"#
    );
    conn.send(&line).await;
    conn.flush().await;
    let key = id.to_string();
    // Wait until the handler runs.
    let started = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(ev) = conn.events.recv().await {
            if ev.id == key && ev.kind == Kind::Start {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    assert!(started, "slow {id} never started");
    let cancel = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"bench"}}}}"#
    );
    conn.send(&cancel).await;
    let t0 = mono_ns();
    conn.flush().await;
    let mut s = CancelSample::default();
    let deadline = tokio::time::Instant::now() + wait_for;
    loop {
        let ev = match tokio::time::timeout_at(deadline, conn.events.recv()).await {
            Ok(Some(ev)) => ev,
            _ => break,
        };
        if ev.id != key {
            continue;
        }
        let after = Duration::from_nanos(ev.ns.saturating_sub(t0));
        match ev.kind {
            Kind::Dropped => s.dropped = Some(after),
            Kind::Token => s.token = Some(after),
            Kind::Done => s.done = true,
            Kind::Start => {}
        }
        if s.dropped.is_some() || s.done {
            break;
        }
    }
    // The handler's fate is known: give the token watcher (and a response
    // for the id, which should not come) up to 100 ms more.
    let late = tokio::time::Instant::now() + Duration::from_millis(100);
    while s.token.is_none() && (s.dropped.is_some() || s.done) {
        match tokio::time::timeout_at(late, conn.events.recv()).await {
            Ok(Some(ev)) if ev.id == key && ev.kind == Kind::Token => {
                s.token = Some(Duration::from_nanos(ev.ns.saturating_sub(t0)));
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    if s.done {
        if let Ok(Some(rid)) = tokio::time::timeout_at(late, conn.reply_ids.recv()).await {
            if rid == key {
                s.answered = true;
            }
        }
    }
    // Give a response for the id (which should not come) a moment.
    tokio::task::yield_now().await;
    while let Ok(rid) = conn.reply_ids.try_recv() {
        if rid == key {
            s.answered = true;
        }
    }
    // keep the window semaphore in step with the replies seen
    while let Ok(p) = conn.replies.try_acquire() {
        p.forget();
    }
    s
}
