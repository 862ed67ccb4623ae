//! Server CPU per request over stdio (issue #14's measure for figure 3):
//! the server child's `utime + stime` from `/proc/<pid>/stat` over a round,
//! divided by the requests of the round. One pipelined client (this
//! process) keeps `--window` `tools/call` requests in flight.
//!
//! ```text
//! stdio_cpu [--requests N] [--rounds R] [--window W] [SERVER ...]
//! ```
//!
//! Servers (rounds are interleaved across them, so that the machine's noise
//! hits all of them; the median round is reported):
//!
//! * `ours`: `ours_stdio` (figure 3's server: `serve_stdio` around the full
//!   stack), `tools/call echo`.
//! * `ours-spin`: the same stack and driver (this binary, `serve-spin`) with
//!   a tool that spends ~50 µs of CPU per call: parallelism across the
//!   runtime's workers must still pay (requests/second is the figure there).
//! * `floor`: a Rust loop that parses each JSON line and answers it (this
//!   binary, `serve-floor`): the least a stdio server can cost.
//! * `spin:PATH`: another build of this binary (e.g. before a change),
//!   serving its `ours-spin` stack.
//! * any other word: the path of a server binary, driven with `echo`.

use std::io::{BufRead, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::Command;
use tokio::sync::Semaphore;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower::BoxError;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer,
};
use tower_mcp_cancel_benchmarks::load::{clock_tick, cpu_of, load_average, median};

/// CPU a `spin` call burns.
const SPIN: Duration = Duration::from_micros(50);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve-floor") => floor(),
        Some("serve-spin") => serve_spin(),
        _ => drive(args),
    }
}

// ------------------------------------------------------------- servers

/// The floor: parse each line, answer it, flush when no more input is
/// buffered.
fn floor() {
    let stdin = std::io::stdin();
    let mut input = std::io::BufReader::with_capacity(64 * 1024, stdin.lock());
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id") else { continue };
        let result = if msg["method"] == "tools/call" {
            let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("");
            json!({ "content": [{ "type": "text", "text": text }], "isError": false })
        } else {
            json!({})
        };
        let answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        serde_json::to_writer(&mut out, &answer).unwrap();
        out.write_all(b"\n").unwrap();
        if input.buffer().is_empty() {
            out.flush().unwrap();
        }
    }
}

#[tokio::main]
async fn serve_spin() {
    let handler = service_fn(|req: McpRequest| async move {
        match req.method() {
            "initialize" => Ok(json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "spin", "version": "0" },
            })),
            "tools/call" => {
                let start = Instant::now();
                let mut x = 0u64;
                while start.elapsed() < SPIN {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                Ok(
                    json!({ "content": [{ "type": "text", "text": x.to_string() }], "isError": false }),
                )
            }
            other => Err(Box::new(ErrorObject::new(
                ErrorObject::METHOD_NOT_FOUND,
                format!("Method not found: {other}"),
            )) as BoxError),
        }
    });
    let stack = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(
            TimeoutLayer::new(Duration::from_secs(60))
                .method("tools/call", Duration::from_secs(600)),
        )
        .layer(ProgressResetLayer::new(Duration::from_secs(30)))
        .service(handler);
    let code = match tower_mcp_cancel::transport::stdio::serve_stdio(stack).await {
        Ok(()) => 0,
        Err(_) => 1,
    };
    std::process::exit(code);
}

// ------------------------------------------------------------- driver

struct Target {
    name: String,
    program: String,
    args: Vec<String>,
}

fn target(word: &str) -> Target {
    let me = std::env::current_exe().expect("current_exe");
    let dir = me.parent().expect("bin dir");
    let (program, args) = match word {
        "ours" => (dir.join("ours_stdio").display().to_string(), vec![]),
        "ours-spin" => (me.display().to_string(), vec!["serve-spin".to_owned()]),
        "floor" => (me.display().to_string(), vec!["serve-floor".to_owned()]),
        other => match other.strip_prefix("spin:") {
            // Another build of this binary, serving its `spin` stack.
            Some(path) => (path.to_owned(), vec!["serve-spin".to_owned()]),
            None => (other.to_owned(), vec![]),
        },
    };
    Target {
        name: word.to_owned(),
        program,
        args,
    }
}

struct Conn {
    child: tokio::process::Child,
    pid: u32,
    stdin: BufWriter<tokio::process::ChildStdin>,
    answers: Arc<Semaphore>,
}

impl Conn {
    async fn open(t: &Target) -> Conn {
        let mut child = Command::new(&t.program)
            .args(&t.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env("RUST_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", t.program));
        let pid = child.id().expect("pid");
        let stdin = BufWriter::with_capacity(64 * 1024, child.stdin.take().unwrap());
        let stdout = child.stdout.take().unwrap();
        let answers = Arc::new(Semaphore::new(0));
        let a = answers.clone();
        tokio::spawn(async move {
            let mut r = BufReader::with_capacity(64 * 1024, stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.contains("\"error\"") {
                    eprintln!("error answer: {}", line.trim());
                }
                if line.contains("\"result\"") || line.contains("\"error\"") {
                    a.add_permits(1);
                }
            }
        });
        let mut c = Conn {
            child,
            pid,
            stdin,
            answers,
        };
        c.line(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#).await;
        c.stdin.flush().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), c.answers.acquire())
            .await
            .expect("initialize answered")
            .unwrap()
            .forget();
        c.line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        c
    }

    async fn line(&mut self, l: &str) {
        self.stdin.write_all(l.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
    }

    /// `n` pipelined calls, at most `window` in flight; wall time.
    async fn run(&mut self, tool: &str, first: u64, n: u64, window: u64) -> Duration {
        let start = Instant::now();
        let mut sent = 0u64;
        let mut done = 0u64;
        while sent < n {
            while sent - done >= window {
                self.stdin.flush().await.unwrap();
                self.answers.acquire().await.unwrap().forget();
                done += 1;
            }
            let l = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"hello"}}}}}}"#,
                first + sent
            );
            self.line(&l).await;
            sent += 1;
            while let Ok(p) = self.answers.try_acquire() {
                p.forget();
                done += 1;
            }
        }
        self.stdin.flush().await.unwrap();
        while done < n {
            self.answers.acquire().await.unwrap().forget();
            done += 1;
        }
        start.elapsed()
    }
}

/// Write system calls of process `pid` so far (`syscw` in proc(5)'s
/// `/proc/<pid>/io`); zero if unknown.
fn writes_of(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("syscw: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn is_spin(name: &str) -> bool {
    name == "ours-spin" || name.starts_with("spin:")
}

#[tokio::main(flavor = "current_thread")]
async fn drive(args: Vec<String>) {
    let mut n = 100_000u64;
    let mut rounds = 5usize;
    let mut window = 64u64;
    let mut words = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--requests" => {
                n = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--requests N")
            }
            "--rounds" => rounds = it.next().and_then(|s| s.parse().ok()).expect("--rounds R"),
            "--window" => window = it.next().and_then(|s| s.parse().ok()).expect("--window W"),
            w => words.push(w.to_owned()),
        }
    }
    if words.is_empty() {
        words = vec!["floor".into(), "ours".into(), "ours-spin".into()];
    }
    let tick = clock_tick();
    let targets: Vec<Target> = words.iter().map(|w| target(w)).collect();
    let mut conns = Vec::new();
    for t in &targets {
        let mut c = Conn::open(t).await;
        let tool = if is_spin(&t.name) { "spin" } else { "echo" };
        c.run(tool, 1, (n / 10).max(1000), window).await;
        conns.push(c);
    }
    let mut cpu = vec![Vec::new(); targets.len()];
    let mut rate = vec![Vec::new(); targets.len()];
    for r in 0..rounds {
        for (i, c) in conns.iter_mut().enumerate() {
            let tool = if is_spin(&targets[i].name) {
                "spin"
            } else {
                "echo"
            };
            let n = if tool == "spin" { n / 10 } else { n };
            let before = cpu_of(c.pid, tick);
            let writes_before = writes_of(c.pid);
            let wall = c.run(tool, 1_000_000 * (r as u64 + 1), n, window).await;
            let used = cpu_of(c.pid, tick) - before;
            let writes = writes_of(c.pid) - writes_before;
            let us = used.as_secs_f64() * 1e6 / n as f64;
            let rps = n as f64 / wall.as_secs_f64();
            let per_write = n as f64 / writes.max(1) as f64;
            eprintln!(
                "  {:10} round {r}: {us:6.2} µs CPU/request, {rps:8.0} req/s, {per_write:5.1} requests a write(2)",
                targets[i].name
            );
            cpu[i].push(us);
            rate[i].push(rps);
        }
    }
    println!(
        "| server | server CPU per request (median of {rounds}) | requests/s (median) |\n| --- | --- | --- |"
    );
    for (i, t) in targets.iter().enumerate() {
        println!(
            "| {} | {:.2} µs | {:.0} |",
            t.name,
            median(&cpu[i]),
            median(&rate[i])
        );
    }
    println!(
        "({n} echo / {} spin calls a round, window {window}; load average {})",
        n / 10,
        load_average()
    );
    for mut c in conns {
        drop(c.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(2), c.child.wait()).await;
        let _ = c.child.kill().await;
    }
}
