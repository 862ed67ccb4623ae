//! Figure 8: `tools/call echo` over Streamable HTTP (2026-07-28, JSON
//! responses), HTTP/1.1 and HTTP/2 (h2c, prior knowledge), driven by
//! `h2load` (Debian's `nghttp2-client`). Each server is its own release
//! binary of this package (`ours_http`, `rmcp_http`, `tower_mcp_http`,
//! `floor_http`), all on the same hyper-util accept loop and the same
//! runtime (multi-threaded, 2 workers) — except the example server
//! (`examples/http_server` of the crate, as a user builds and runs it:
//! axum, tower-http, `transport::http::serve`); the server's CPU time per request
//! comes from its `/proc/<pid>/stat` (`utime + stime`) over each measured
//! run. Runs are interleaved across servers and protocols, so that the
//! machine's noise hits all of them; medians are reported.

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tower_mcp_cancel_benchmarks::load::{clock_tick, cpu_of, load_average, median};

use crate::report::{fmt_d, parse_duration, verdict, Tables};

/// The request every server gets: a 2026-07-28 `tools/call echo` with the
/// metadata headers a 2026 client sends.
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"h2load","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;

const HEADERS: [&str; 5] = [
    "content-type: application/json",
    "accept: application/json, text/event-stream",
    "mcp-protocol-version: 2026-07-28",
    "mcp-method: tools/call",
    "mcp-name: echo",
];

/// A server of the figure: its row name, binary (next to this one, or a
/// path) and arguments.
#[derive(Clone, Debug)]
pub struct Server {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// `ours`, `floor` or a peer: what the ratios compare.
    pub role: Role,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Ours,
    Peer,
    Floor,
    /// The crate's example server: compared with the floor.
    Example,
    /// Another build of ours (e.g. before a change): shown, not compared.
    Other,
}

fn bin_path(bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().expect("bin dir").join(bin)
}

/// The row name of the example server.
const EXAMPLE_NAME: &str = "tower-mcp-cancel example server (`examples/http_server`)";

/// The arguments every server run by path gets: a free port (the example
/// server listens on 8080 otherwise; `ours_http` takes the same flag).
const LISTEN_ANY: [&str; 2] = ["--listen", "127.0.0.1:0"];

/// Where the crate's example server is, as `cargo build --release
/// --all-features --examples` at the repository's root leaves it: in the
/// target directory this binary was built in (a shared `CARGO_TARGET_DIR`),
/// in `$CARGO_TARGET_DIR`, or in the root's own `target/`.
fn example_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut candidates = vec![exe
        .parent()
        .expect("bin dir")
        .join("examples")
        .join("http_server")];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join("release/examples/http_server"));
    }
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/examples/http_server"),
    );
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            eprintln!(
                "the example server is not built (looked at {candidates:?}): run `cargo build --release --all-features --examples` at the repository's root, or give `--servers example=PATH`"
            );
            std::process::exit(2)
        })
}

/// A server by word: `ours`, `ours-serve`, `floor`, `rmcp`, `rmcp-default`,
/// `tower-mcp`, `example` (the crate's `examples/http_server`, see
/// [`example_path`]), `example=PATH` (that binary as the example row), or
/// `NAME=PATH` (another build of `ours_http` or of the example, shown
/// without ratios). Servers run by path get `--listen 127.0.0.1:0`.
pub fn server(word: &str) -> Server {
    let s = |name: &str, bin: &str, args: &[&str], role| Server {
        name: name.to_owned(),
        program: bin_path(bin),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        role,
    };
    match word {
        "ours" => s(
            "tower-mcp-cancel (full stack)",
            "ours_http",
            &[],
            Role::Ours,
        ),
        "ours-serve" => s(
            "tower-mcp-cancel (full stack, `transport::http::serve`)",
            "ours_http",
            &["--serve"],
            Role::Other,
        ),
        "floor" => s(
            "floor (bare hyper + serde_json)",
            "floor_http",
            &[],
            Role::Floor,
        ),
        "rmcp" => s(
            "rmcp 3.11 (stateless, JSON responses)",
            "rmcp_http",
            &[],
            Role::Peer,
        ),
        "rmcp-default" => s(
            "rmcp 3.11 (default config)",
            "rmcp_http",
            &["--default"],
            Role::Other,
        ),
        "tower-mcp" => s(
            "tower-mcp 0.25 (stateless)",
            "tower_mcp_http",
            &[],
            Role::Peer,
        ),
        "example" => Server {
            name: EXAMPLE_NAME.to_owned(),
            program: example_path(),
            args: LISTEN_ANY.map(String::from).to_vec(),
            role: Role::Example,
        },
        other => {
            let (name, path) = other.split_once('=').unwrap_or((other, other));
            let (name, role) = match name {
                "example" => (EXAMPLE_NAME, Role::Example),
                _ => (name, Role::Other),
            };
            Server {
                name: name.to_owned(),
                program: PathBuf::from(path),
                args: LISTEN_ANY.map(String::from).to_vec(),
                role,
            }
        }
    }
}

/// Whether `h2load` can be run.
pub fn have_h2load() -> bool {
    Command::new("h2load")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Running {
    child: Child,
    url: String,
}

impl Running {
    fn start(s: &Server) -> Running {
        let mut child = Command::new(&s.program)
            .args(&s.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", s.program.display()));
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).expect("server's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{}: unexpected first line {line:?}", s.name))
            .to_owned();
        Running { child, url }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The protocol of a run and its h2load load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::H1 => "1.1",
            Proto::H2 => "2",
        }
    }

    /// HTTP/1.1: 64 connections, one request at a time each (no
    /// pipelining); HTTP/2: 4 connections × 16 concurrent streams. 64
    /// requests in flight either way.
    fn load_args(self) -> &'static [&'static str] {
        match self {
            Proto::H1 => &["--h1", "-c", "64", "-m", "1"],
            Proto::H2 => &["-c", "4", "-m", "16"],
        }
    }
}

/// What one h2load run reported.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub per_sec: f64,
    pub ok: u64,
    pub failed: u64,
    pub max: Duration,
    pub sd: Duration,
    pub mean: Duration,
    pub cpu_us: f64,
}

/// Parses h2load's summary.
fn parse(out: &str) -> Option<Run> {
    let mut r = Run::default();
    for line in out.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("finished in ") {
            // "finished in 1.23s, 81234.56 req/s, 12.3MB/s"
            let rps = rest.split(", ").nth(1)?.strip_suffix(" req/s")?;
            r.per_sec = rps.parse().ok()?;
        } else if let Some(rest) = line.strip_prefix("requests: ") {
            // "N total, N started, N done, N succeeded, N failed, N errored, N timeout"
            for part in rest.split(", ") {
                let mut it = part.split(' ');
                let (Some(n), Some(what)) = (it.next(), it.next()) else {
                    continue;
                };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "succeeded" => r.ok = n,
                    "failed" | "errored" | "timeout" => r.failed += n,
                    _ => {}
                }
            }
        } else if let Some(rest) = line.strip_prefix("status codes: ") {
            // Count non-2xx as failed too.
            for part in rest.split(", ").skip(1) {
                let n: u64 = part.split(' ').next()?.parse().unwrap_or(0);
                r.failed += n;
            }
        } else if let Some(rest) = line.strip_prefix("time for request:") {
            // min max mean sd +/-sd
            let f: Vec<&str> = rest.split_whitespace().collect();
            r.max = parse_duration(f.get(1)?)?;
            r.mean = parse_duration(f.get(2)?)?;
            r.sd = parse_duration(f.get(3)?)?;
        }
    }
    Some(r)
}

fn h2load(url: &str, body: &Path, proto: Proto, n: u64) -> Run {
    let mut cmd = Command::new("h2load");
    cmd.args(proto.load_args())
        .args(["-t", "1", "-n", &n.to_string(), "-d"])
        .arg(body);
    for h in HEADERS {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(url).output().expect("run h2load");
    let text = String::from_utf8_lossy(&out.stdout);
    parse(&text).unwrap_or_else(|| panic!("cannot read h2load's output:\n{text}"))
}

/// The command line of one run (for the figure's prose).
pub fn command_line(proto: Proto, n: u64) -> String {
    let mut s = format!(
        "h2load {} -t 1 -n {n} -d body.json",
        proto.load_args().join(" ")
    );
    for h in HEADERS {
        let _ = write!(s, " -H '{h}'");
    }
    s.push_str(" http://127.0.0.1:PORT/mcp");
    s
}

/// Runs figure 8 for `servers`: `rounds` interleaved rounds of `n`
/// requests per server and protocol, after a warm-up of `n / 10`.
pub fn figure8(servers: &[Server], n: u64, rounds: usize, t: &mut Tables) {
    let dir = std::env::temp_dir().join(format!("bench-fig8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let body = dir.join("body.json");
    std::fs::write(&body, BODY).expect("body file");
    let tick = clock_tick();
    let running: Vec<Running> = servers.iter().map(Running::start).collect();
    let protos = [Proto::H1, Proto::H2];
    eprintln!("figure 8: {n} echo calls per run, {rounds} rounds, h2load");
    for (s, r) in servers.iter().zip(&running) {
        for p in protos {
            let w = h2load(&r.url, &body, p, (n / 10).max(1000));
            eprintln!(
                "  warm-up {:50} HTTP/{}: {:.0} req/s, {} failed",
                s.name,
                p.name(),
                w.per_sec,
                w.failed
            );
        }
    }
    // runs[proto][server]
    let mut runs: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); servers.len()]; protos.len()];
    for round in 0..rounds {
        for (pi, p) in protos.iter().enumerate() {
            for (si, (s, r)) in servers.iter().zip(&running).enumerate() {
                let pid = r.child.id();
                let before = cpu_of(pid, tick);
                let mut run = h2load(&r.url, &body, *p, n);
                let used = cpu_of(pid, tick) - before;
                run.cpu_us = used.as_secs_f64() * 1e6 / n as f64;
                eprintln!(
                    "  round {round} HTTP/{} {:50} {:6.2} µs CPU/req {:8.0} req/s max {:>9} sd {:>9} failed {}",
                    p.name(),
                    s.name,
                    run.cpu_us,
                    run.per_sec,
                    fmt_d(run.max),
                    fmt_d(run.sd),
                    run.failed
                );
                runs[pi][si].push(run);
            }
        }
    }
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | HTTP | server CPU per request | requests/s | max latency | latency sd | failed |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- |");
    let med = |v: &[Run], f: fn(&Run) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let mut verdicts = String::new();
    for (pi, p) in protos.iter().enumerate() {
        let m = |si: usize| {
            let v = &runs[pi][si];
            (
                med(v, |r| r.cpu_us),
                med(v, |r| r.per_sec),
                med(v, |r| r.max.as_secs_f64()),
                med(v, |r| r.sd.as_secs_f64()),
                v.iter().map(|r| r.failed).sum::<u64>(),
            )
        };
        for (si, s) in servers.iter().enumerate() {
            let (cpu, rps, max, sd, failed) = m(si);
            let _ = writeln!(
                out,
                "| {} | {} | {cpu:.2} µs | {rps:.0} | {} | {} | {failed} |",
                s.name,
                p.name(),
                fmt_d(Duration::from_secs_f64(max)),
                fmt_d(Duration::from_secs_f64(sd)),
            );
        }
        let floor = servers.iter().position(|s| s.role == Role::Floor).map(m);
        if let Some(ours) = servers.iter().position(|s| s.role == Role::Ours) {
            let o = m(ours);
            let mut line = format!("HTTP/{}:", p.name());
            let mut peer_ok = true;
            let mut any_peer = false;
            for (si, s) in servers.iter().enumerate() {
                if s.role == Role::Peer {
                    let r = o.0 / m(si).0;
                    any_peer = true;
                    peer_ok &= r <= 0.5;
                    let _ = write!(line, " ours ÷ {} CPU {r:.2}×;", s.name);
                }
            }
            if any_peer {
                let _ = write!(line, " ≤ 0.5× every peer: {};", verdict(peer_ok));
            }
            if let Some(f) = floor {
                let (cpu, rps, max) = (o.0 / f.0, o.1 / f.1, o.2 / f.2);
                let _ = write!(
                    line,
                    " ours ÷ floor CPU {cpu:.2}× (≤ 1.3×: {}), throughput {:.0} % of the floor's (≥ 80 %: {}), max latency {max:.2}× the floor's (≤ 2×: {}).",
                    verdict(cpu <= 1.3),
                    rps * 100.0,
                    verdict(rps >= 0.8),
                    verdict(max <= 2.0)
                );
            }
            let _ = writeln!(verdicts, "- {line}");
        }
        // The example server as users run it (issue #25): held to the
        // floor's CPU per request like ours.
        let example = servers.iter().position(|s| s.role == Role::Example);
        if let (Some(e), Some(f)) = (example.map(m), floor) {
            let (cpu, rps, max) = (e.0 / f.0, e.1 / f.1, e.2 / f.2);
            let _ = writeln!(
                verdicts,
                "- HTTP/{}: example server ÷ floor CPU {cpu:.2}× (≤ 1.3×: {}), throughput {:.0} % of the floor's, max latency {max:.2}× the floor's.",
                p.name(),
                verdict(cpu <= 1.3),
                rps * 100.0,
            );
        }
    }
    let _ = writeln!(
        out,
        "\nMedians of {rounds} rounds × {n} requests per server and protocol (load average {} at the end); each run:\n\n```text\n{}\n{}\n```\n\n{verdicts}",
        load_average(),
        command_line(Proto::H1, n),
        command_line(Proto::H2, n)
    );
    t.insert("fig8", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_h2load_summary() {
        let out = "finished in 2.03s, 98512.34 req/s, 21.50MB/s\n\
requests: 200000 total, 200000 started, 200000 done, 199990 succeeded, 10 failed, 0 errored, 0 timeout\n\
status codes: 199990 2xx, 0 3xx, 2 4xx, 0 5xx\n\
time for request:      120us     12.34ms       640us       210us    91.02%\n";
        let r = parse(out).unwrap();
        assert_eq!(r.per_sec, 98512.34);
        assert_eq!(r.ok, 199990);
        assert_eq!(r.failed, 12);
        assert_eq!(r.max, Duration::from_micros(12_340));
        assert_eq!(r.sd, Duration::from_micros(210));
    }
}
