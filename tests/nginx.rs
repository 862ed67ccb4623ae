//! The example HTTP server behind nginx (the Debian package, run
//! unprivileged from a temporary directory with its own configuration, on
//! loopback ports): what a reverse proxy must keep of the transport.
//!
//! * A client that goes away at the proxy still cancels: nginx closes its
//!   upstream connection (`proxy_ignore_client_abort off`), the server
//!   drops the handler — before the first byte of the answer, and in the
//!   middle of an SSE stream.
//! * SSE progress is not buffered: the `gated` tool makes its next progress
//!   notification only after a `release` call, and the test releases a step
//!   only once the previous notification came through nginx — a proxy that
//!   buffered would hold it back and the wait would fail.
//!
//! nginx comes from `.ci/run` (`apt-get install nginx`). Without it the
//! test is skipped with a message, except in CI (`CI=true`), where it fails.
#![cfg(all(feature = "http", unix))]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A guard against hangs, not a synchronisation.
const BOUND: Duration = Duration::from_secs(20);

/// The nginx binary: on `PATH`, or where Debian puts it.
fn nginx() -> Option<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nginx"));
    candidates.into_iter().find(|p| p.is_file())
}

#[path = "support/example.rs"]
mod example_bin;
use example_bin::example;

/// A free loopback port (the kernel's pick, released for nginx to bind).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The proxy settings the README recommends, with every path in `dir`.
fn config(dir: &Path, port: u16, upstream: &str) -> String {
    let d = dir.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location /mcp {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            proxy_ignore_client_abort off;
        }}
    }}
}}
"#
    )
}

/// The example server's `--events` lines (`STARTED 3 <ns>`, `DROPPED 3 <ns>`).
struct Events {
    rx: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Events {
    async fn wait(&mut self, kind: &str, id: i64) {
        let want = format!("{kind} {id} ");
        self.wait_for(&want, |l| l.starts_with(&want)).await;
    }

    /// Waits for the server's log line of request `id`'s end, with `outcome`.
    async fn ended(&mut self, id: i64, outcome: &str) {
        let (req, out) = (
            format!("jsonrpc.request.id=\"{id}\""),
            format!("outcome={outcome}"),
        );
        self.wait_for(&out, |l| {
            l.contains("request ended") && l.contains(&req) && l.contains(&out)
        })
        .await;
    }

    async fn wait_for(&mut self, what: &str, hit: impl Fn(&str) -> bool) {
        let found = tokio::time::timeout(BOUND, async {
            while let Some(line) = self.rx.recv().await {
                let found = hit(&line);
                self.seen.push(line);
                if found {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        assert!(found, "no `{what}` from the server; saw {:#?}", self.seen);
    }
}

struct Deployment {
    _server: Child,
    _nginx: Child,
    proxy: String,
    events: Events,
    dir: PathBuf,
}

async fn deploy(nginx_bin: &Path) -> Deployment {
    let mut server = Command::new(example("http_server"))
        .args(["--listen", "127.0.0.1:0", "--events"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example http_server");
    // The server prints the address it bound.
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(BOUND, stdout.next_line())
        .await
        .expect("the server printed its address")
        .unwrap()
        .unwrap_or_default();
    let upstream = first
        .strip_prefix("listening on http://")
        .and_then(|a| a.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();
    assert!(
        !upstream.ends_with(":0"),
        "the real port is printed: {upstream}"
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            let _ = tx.send(line);
        }
    });

    let dir = std::env::temp_dir().join(format!("tmc-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    std::fs::write(dir.join("nginx.conf"), config(&dir, port, &upstream)).unwrap();
    let nginx = Command::new(nginx_bin)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nginx");
    // nginx is ready when it accepts (a readiness poll of a process we
    // started, not a wait for an effect under test).
    let proxy = format!("127.0.0.1:{port}");
    let ready = tokio::time::timeout(BOUND, async {
        loop {
            if TcpStream::connect(&proxy).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        ready.is_ok(),
        "nginx did not start: {}",
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
    Deployment {
        _server: server,
        _nginx: nginx,
        proxy,
        events: Events {
            rx,
            seen: Vec::new(),
        },
        dir,
    }
}

/// A raw HTTP/1.1 POST of a modern `tools/call` of `tool` through nginx.
async fn call(proxy: &str, id: i64, tool: &str, args: Value, progress: bool) -> TcpStream {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    if progress {
        meta["progressToken"] = json!(format!("p{id}"));
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta}})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {proxy}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(proxy).await.expect("connect to nginx");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    stream
}

/// Reads from `stream` until `needle` has come (bounded); what was read.
async fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
    let found = tokio::time::timeout(BOUND, async {
        let mut chunk = [0u8; 4096];
        while !seen.contains(needle) {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        true
    })
    .await
    .unwrap_or(false);
    assert!(found, "`{needle}` did not come through nginx; got {seen:?}");
}

#[tokio::test]
async fn behind_nginx_disconnects_cancel_and_progress_is_not_buffered() {
    let Some(nginx_bin) = nginx() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("nginx is not installed; .ci/run installs it (apt-get install nginx)");
        }
        eprintln!("SKIPPED: nginx is not installed (apt-get install nginx); the deployment test did not run");
        return;
    };
    let mut d = deploy(&nginx_bin).await;

    // 1. The client goes away before the first byte of the answer.
    let silent = call(&d.proxy, 1, "slow", json!({"seconds": 3600}), false).await;
    d.events.wait("STARTED", 1).await;
    drop(silent);
    d.events.wait("DROPPED", 1).await;
    d.events.ended(1, "client_disconnected").await;

    // 2. The client goes away in the middle of the SSE stream.
    let mut streaming = call(&d.proxy, 2, "gated", json!({"steps": 3}), true).await;
    let mut seen = String::new();
    read_until(&mut streaming, &mut seen, "text/event-stream").await;
    read_until(&mut streaming, &mut seen, r#""progress":1.0"#).await;
    drop(streaming);
    d.events.wait("DROPPED", 2).await;

    // 3. Each progress notification arrives before the next one is made:
    // the handler makes step i+1 only after a release, sent once step i
    // came through nginx.
    let mut gated = call(&d.proxy, 3, "gated", json!({"steps": 3}), true).await;
    let mut seen = String::new();
    for step in 1..=3 {
        read_until(&mut gated, &mut seen, &format!(r#""progress":{step}.0"#)).await;
        assert!(
            !seen.contains(&format!(r#""progress":{}.0"#, step + 1)),
            "step {} came before its release: {seen}",
            step + 1
        );
        let mut release = call(&d.proxy, 100 + step, "release", json!({}), false).await;
        let mut answer = String::new();
        read_until(&mut release, &mut answer, "released one step").await;
    }
    read_until(&mut gated, &mut seen, "3 gated steps").await;
    d.events.wait("DONE", 3).await;
    d.events.ended(3, "completed").await;

    // The example's log: no colour codes on a pipe, and nothing at `info`
    // per progress notification.
    let log = &d.events.seen;
    assert!(log.iter().all(|l| !l.contains('\x1b')), "{log:#?}");
    assert!(
        !log.iter().any(|l| l.contains("notifications/progress")),
        "{log:#?}"
    );

    let _ = std::fs::remove_dir_all(&d.dir);
}
