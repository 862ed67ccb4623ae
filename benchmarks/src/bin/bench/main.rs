//! The bench binary for figures 3–6 and 8 of BENCHMARKS.md (and the collector of
//! figures 1, 2 and 7, which criterion and `benches/timer_lateness.rs` of
//! the main crate measure). `benchmarks/run.sh` is the documented command.
//!
//! ```text
//! bench [--smoke] [--write BENCHMARKS.md] [--criterion DIR] [--lateness FILE] [--only 3,4,5,6,8]
//!       [--requests N] [--rounds R] [--servers ours,example,rmcp,tower-mcp,floor]
//! ```
//!
//! * `--smoke`: a few seconds, our servers only (no peers), small counts.
//! * `--write PATH`: rewrite the tables between the `<!-- bench:… -->`
//!   markers of PATH.
//! * `--criterion DIR`: the main crate's `target/criterion` (figures 1–2).
//! * `--lateness FILE`: the output of `cargo bench --bench timer_lateness`
//!   (figure 7).
//! * `--requests`, `--rounds`, `--servers`: figure 8's requests per run
//!   (200 000), rounds (5) and servers (see [`h2load::server`]).

mod h2load;
mod http;
mod mem;
mod stdio;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[global_allocator]
static ALLOC: mem::Counting = mem::Counting;

struct Args {
    smoke: bool,
    write: Option<PathBuf>,
    criterion: Option<PathBuf>,
    lateness: Option<PathBuf>,
    only: Vec<u32>,
    requests: Option<u64>,
    rounds: Option<usize>,
    servers: Option<Vec<String>>,
}

/// The figures the bench binary itself measures.
const OWN_FIGURES: [u32; 5] = [3, 4, 5, 6, 8];

fn args() -> Args {
    let mut a = Args {
        smoke: false,
        write: None,
        criterion: None,
        lateness: None,
        only: OWN_FIGURES.to_vec(),
        requests: None,
        rounds: None,
        servers: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => a.smoke = true,
            "--write" => a.write = it.next().map(PathBuf::from),
            "--criterion" => a.criterion = it.next().map(PathBuf::from),
            "--lateness" => a.lateness = it.next().map(PathBuf::from),
            "--only" => {
                a.only = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect()
            }
            "--requests" => a.requests = it.next().and_then(|s| s.parse().ok()),
            "--rounds" => a.rounds = it.next().and_then(|s| s.parse().ok()),
            "--servers" => {
                a.servers = it
                    .next()
                    .map(|s| s.split(',').map(|w| w.trim().to_owned()).collect())
            }
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    a
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn fmt_d(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.0} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

/// Tables by marker name.
type Tables = BTreeMap<&'static str, String>;

// ---------------------------------------------------------------- figure 3

async fn figure3(smoke: bool, t: &mut Tables) {
    let servers: Vec<stdio::Server> = if smoke || !cfg!(feature = "peers") {
        vec![stdio::OURS]
    } else {
        vec![stdio::OURS, stdio::RMCP, stdio::TOWER_MCP]
    };
    let (n, rounds, warm) = if smoke {
        (2_000, 1, 500)
    } else {
        (50_000, 5, 5_000)
    };
    let window = 64;
    eprintln!("figure 3: {n} pipelined echo calls, window {window}, {rounds} rounds");
    let mut conns = Vec::new();
    for s in &servers {
        let mut c = stdio::Conn::open(*s).await;
        stdio::pipelined(&mut c, 1, warm, window).await;
        conns.push(c);
    }
    // Rounds interleaved across servers, so that noise hits all of them.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
    let mut errors = vec![0u64; servers.len()];
    for r in 0..rounds {
        for (i, c) in conns.iter_mut().enumerate() {
            let first = 1_000_000 * (r as u64 + 1);
            let res = stdio::pipelined(c, first, n, window).await;
            eprintln!(
                "  {:32} round {r}: {:>9.0} req/s ({:?}, {} errors)",
                servers[i].name,
                res.per_sec(),
                res.elapsed,
                res.errors
            );
            rates[i].push(res.per_sec());
            errors[i] += res.errors;
        }
    }
    for c in conns {
        c.close().await;
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ours = median(&rates[0]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | requests/s (median of {rounds} × {n}) | range | ours ÷ this | errors |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    let mut ratios = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let m = median(&rates[i]);
        let lo = rates[i].iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = rates[i].iter().cloned().fold(0.0, f64::max);
        let ratio = ours / m;
        if i > 0 {
            ratios.push((s.name, ratio));
        }
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0}–{:.0} | {} | {} |",
            s.name,
            m,
            lo,
            hi,
            if i == 0 {
                "1.00× (baseline)".to_owned()
            } else {
                format!("{ratio:.2}×")
            },
            errors[i]
        );
    }
    if !ratios.is_empty() {
        let worst = ratios.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "\nTarget ≥ 2× both peers: {} (smallest ratio {worst:.2}×).",
            verdict(worst >= 2.0)
        );
    } else {
        let _ = writeln!(out, "\n(smoke run: peers not measured)");
    }
    t.insert("fig3", out);
}

// ---------------------------------------------------------------- figure 4

async fn figure4(smoke: bool, t: &mut Tables) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | samples | cancel → future dropped p50 / p99 / max | cancel → token fired p50 / p99 | handler ran to completion | response written for the cancelled id |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    let servers: Vec<(stdio::Server, usize, f64)> = if smoke {
        vec![(stdio::OURS, 20, 10.0)]
    } else if !cfg!(feature = "peers") {
        vec![(stdio::OURS, 500, 10.0)]
    } else {
        vec![
            (stdio::OURS, 500, 10.0),
            (stdio::RMCP, 10, 1.0),
            (stdio::RMCP_CANCEL, 200, 10.0),
            (stdio::TOWER_MCP, 10, 1.0),
            (stdio::TOWER_MCP_CANCEL, 200, 10.0),
        ]
    };
    let mut ours_p = (Duration::ZERO, Duration::ZERO);
    for (i, (s, samples, secs)) in servers.iter().enumerate() {
        eprintln!(
            "figure 4: {} × cancel of slow({secs} s) on {}",
            samples, s.name
        );
        let mut c = stdio::Conn::open(*s).await;
        let mut drops = Vec::new();
        let mut tokens = Vec::new();
        let (mut done, mut answered) = (0, 0);
        for k in 0..*samples {
            let r = stdio::cancel_once(
                &mut c,
                10 + k as u64,
                *secs,
                Duration::from_secs_f64(secs + 2.0),
            )
            .await;
            drops.extend(r.dropped);
            tokens.extend(r.token);
            done += r.done as usize;
            answered += r.answered as usize;
        }
        c.close().await;
        drops.sort();
        tokens.sort();
        let dropped = if drops.is_empty() {
            "never dropped".to_owned()
        } else {
            format!(
                "{} / {} / {}{}",
                fmt_d(pct(&drops, 0.5)),
                fmt_d(pct(&drops, 0.99)),
                fmt_d(*drops.last().unwrap()),
                if drops.len() < *samples {
                    format!(" ({} of {samples} dropped)", drops.len())
                } else {
                    String::new()
                }
            )
        };
        let token = if tokens.is_empty() {
            "never fired".to_owned()
        } else {
            format!(
                "{} / {}",
                fmt_d(pct(&tokens, 0.5)),
                fmt_d(pct(&tokens, 0.99))
            )
        };
        if i == 0 {
            ours_p = (pct(&drops, 0.5), pct(&drops, 0.99));
        }
        let _ = writeln!(
            out,
            "| {} | {samples} | {dropped} | {token} | {done} of {samples} | {answered} of {samples} |",
            s.name
        );
    }
    let _ = writeln!(
        out,
        "\nTarget p50 ≤ 100 µs: {} ({}); p99 ≤ 1 ms: {} ({}).",
        verdict(ours_p.0 <= Duration::from_micros(100)),
        fmt_d(ours_p.0),
        verdict(ours_p.1 <= Duration::from_millis(1)),
        fmt_d(ours_p.1)
    );
    if smoke {
        let _ = writeln!(out, "\n(smoke run: peers not measured)");
    }
    t.insert("fig4", out);
}

// ---------------------------------------------------------------- figure 5

async fn figure5(smoke: bool, t: &mut Tables) {
    use http::{Peer, When};
    let peers: Vec<Peer> = if smoke || !cfg!(feature = "peers") {
        vec![Peer::Ours]
    } else {
        vec![
            Peer::Ours,
            Peer::Rmcp,
            Peer::RmcpCancel,
            Peer::TowerMcp,
            Peer::TowerMcpCancel,
        ]
    };
    let addrs = http::start_servers(&peers);
    let mut events = tower_mcp_cancel_benchmarks::capture_events();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | HTTP | disconnect | samples | → future dropped p50 / p99 / max | → token fired p50 / p99 | ran to completion | failed |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut worst_ours = Duration::ZERO;
    for (peer, json_addr, sse_addr) in addrs {
        let (samples, secs) = match (peer, smoke) {
            (Peer::Ours, true) => (10, 10.0),
            (Peer::Ours, false) => (200, 10.0),
            // Wrapped peers drop the handler: as many samples as ours.
            (Peer::RmcpCancel | Peer::TowerMcpCancel, _) => (200, 10.0),
            _ => (10, 1.0),
        };
        let wait_for = Duration::from_secs_f64(secs + 2.0);
        let version = "2026-07-28";
        for proto in ["1.1", "2"] {
            for when in [When::BeforeFirstByte, When::MidSse] {
                let addr = if when == When::MidSse {
                    sse_addr
                } else {
                    json_addr
                };
                eprintln!(
                    "figure 5: {} HTTP/{proto} {when:?} × {samples}",
                    peer.name()
                );
                let mut h2 = if proto == "2" {
                    Some(http::H2::connect(addr).await)
                } else {
                    None
                };
                let mut drops = Vec::new();
                let mut tokens = Vec::new();
                let (mut done, mut failed) = (0, 0);
                let mut first_failure = None;
                for _ in 0..samples {
                    let s = match &mut h2 {
                        Some(h2) => h2.sample(&mut events, when, secs, version, wait_for).await,
                        None => {
                            http::h1_sample(&mut events, addr, when, secs, version, wait_for).await
                        }
                    };
                    if let Some(f) = s.failed {
                        failed += 1;
                        first_failure.get_or_insert(f);
                        continue;
                    }
                    drops.extend(s.dropped);
                    tokens.extend(s.token);
                    done += s.done as usize;
                }
                if let Some(f) = &first_failure {
                    eprintln!("  first failure: {f}");
                }
                drops.sort();
                tokens.sort();
                let ok = samples - failed;
                let dropped = if drops.is_empty() {
                    "never dropped".to_owned()
                } else {
                    format!(
                        "{} / {} / {}{}",
                        fmt_d(pct(&drops, 0.5)),
                        fmt_d(pct(&drops, 0.99)),
                        fmt_d(*drops.last().unwrap()),
                        if drops.len() < ok {
                            format!(" ({} of {ok})", drops.len())
                        } else {
                            String::new()
                        }
                    )
                };
                let token = if tokens.is_empty() {
                    "never fired".to_owned()
                } else {
                    format!(
                        "{} / {}",
                        fmt_d(pct(&tokens, 0.5)),
                        fmt_d(pct(&tokens, 0.99))
                    )
                };
                if peer == Peer::Ours {
                    worst_ours = worst_ours.max(if drops.len() == ok {
                        pct(&drops, 0.99)
                    } else {
                        Duration::MAX
                    });
                }
                let when_s = match when {
                    When::BeforeFirstByte => "before first byte",
                    When::MidSse => "mid-SSE",
                };
                let _ = writeln!(
                    out,
                    "| {} | {proto} | {when_s} | {samples} | {dropped} | {token} | {done} of {ok} | {failed}{} |",
                    peer.name(),
                    first_failure
                        .map(|f| format!(" ({})", f.chars().take(80).collect::<String>().replace('|', "/")))
                        .unwrap_or_default()
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\nTarget p99 ≤ 5 ms (ours, every cell): {} (worst cell p99 {}).",
        verdict(worst_ours <= Duration::from_millis(5)),
        if worst_ours == Duration::MAX {
            "a cell with undropped samples".to_owned()
        } else {
            fmt_d(worst_ours)
        }
    );
    if smoke {
        let _ = writeln!(out, "\n(smoke run: peers not measured)");
    }
    t.insert("fig5", out);
}

// ---------------------------------------------------------------- figure 6

fn figure6(smoke: bool, t: &mut Tables) {
    use mem::Stack;
    let big = 100_000;
    let small = 1_000;
    let (reps_big, reps_small) = if smoke { (1, 5) } else { (5, 101) };
    eprintln!("figure 6: {big} and {small} in flight, bare vs full stack");
    let bare_big = mem::median(Stack::Bare, big, reps_big);
    let full_big = mem::median(Stack::Full, big, reps_big);
    let bare_small = mem::median(Stack::Bare, small, reps_small);
    let full_small = mem::median(Stack::Full, small, reps_small);
    let per = |r: &mem::Run, n: usize| r.bytes as f64 / n as f64;
    let stack_bytes = per(&full_big, big) - per(&bare_big, big);
    let stack_allocs = (full_big.allocs as f64 - bare_big.allocs as f64) / big as f64;
    // What the stack adds per request (full − bare), at each size.
    let stack_big = full_big.ns_per_request(big) - bare_big.ns_per_request(big);
    let stack_small = full_small.ns_per_request(small) - bare_small.ns_per_request(small);
    let ratio = stack_big / stack_small;
    let bare_ratio = bare_big.ns_per_request(big) / bare_small.ns_per_request(small);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| in flight | service | bytes per in-flight request | allocations per request | issue + cancel per request |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    for (n, name, r) in [
        (big, "bare handler", &bare_big),
        (big, "full stack", &full_big),
        (small, "bare handler", &bare_small),
        (small, "full stack", &full_small),
    ] {
        let _ = writeln!(
            out,
            "| {n} | {name} | {:.0} B | {:.1} | {:.0} ns ({:.0} + {:.0}) |",
            per(r, n),
            r.allocs as f64 / n as f64,
            r.ns_per_request(n),
            r.issue.as_nanos() as f64 / n as f64,
            r.cancel.as_nanos() as f64 / n as f64,
        );
    }
    let _ = writeln!(
        out,
        "\nAttributable to the stack at {big} in flight: **{stack_bytes:.0} B** and {stack_allocs:.1} allocations per request — target ≤ 512 B: {}.",
        verdict(stack_bytes <= 512.0)
    );
    let _ = writeln!(
        out,
        "The stack's cost per request (full − bare: {stack_big:.0} ns at {big}, {stack_small:.0} ns at {small}) grows **{ratio:.2}×** from {small} to {big} in flight; the bare handler's own cost grows {bare_ratio:.2}× — target: within 1.1× of the bare handler's growth: {}.",
        verdict(ratio <= 1.1 * bare_ratio)
    );
    t.insert("fig6", out);
}

// ---------------------------------------------------------------- figure 8

fn figure8(a: &Args, t: &mut Tables) {
    if !h2load::have_h2load() {
        let msg = "h2load not found (Debian: `apt-get install nghttp2-client`; `benchmarks/run.sh` installs it): figure 8 not measured";
        if a.smoke {
            eprintln!("{msg}");
            return;
        }
        eprintln!("{msg}");
        std::process::exit(1);
    }
    let words: Vec<String> = match (&a.servers, a.smoke) {
        (Some(w), _) => w.clone(),
        (None, true) => vec!["ours".into(), "floor".into()],
        (None, false) => ["ours", "example", "rmcp", "tower-mcp", "floor"]
            .map(String::from)
            .to_vec(),
    };
    let servers: Vec<h2load::Server> = words.iter().map(|w| h2load::server(w)).collect();
    let (n, rounds) = if a.smoke {
        (a.requests.unwrap_or(2_000), a.rounds.unwrap_or(1))
    } else {
        (a.requests.unwrap_or(200_000), a.rounds.unwrap_or(5))
    };
    h2load::figure8(&servers, n, rounds, t);
    if a.smoke {
        if let Some(body) = t.get_mut("fig8") {
            body.push_str("\n(smoke run: peers not measured)\n");
        }
    }
}

// ---------------------------------------------------- figures 1, 2 and 7

fn figures12(dir: &Path, t: &mut Tables) {
    let mut found: BTreeMap<String, f64> = BTreeMap::new();
    let group = dir.join("per_call");
    let Ok(entries) = std::fs::read_dir(&group) else {
        eprintln!("no criterion results in {}", group.display());
        return;
    };
    for e in entries.flatten() {
        let b = std::fs::read_to_string(e.path().join("new/benchmark.json"));
        let est = std::fs::read_to_string(e.path().join("new/estimates.json"));
        let (Ok(b), Ok(est)) = (b, est) else { continue };
        let b: serde_json::Value = serde_json::from_str(&b).unwrap_or_default();
        let est: serde_json::Value = serde_json::from_str(&est).unwrap_or_default();
        let (Some(name), Some(ns)) = (
            b["function_id"].as_str(),
            est["median"]["point_estimate"].as_f64(),
        ) else {
            continue;
        };
        found.insert(name.to_owned(), ns);
    }
    let get = |k: &str| found.get(k).copied();
    let Some(base) = get("tower::timeout::Timeout") else {
        eprintln!("criterion results lack the baseline");
        return;
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| stack | time per call (criterion median) | ratio to `tower::timeout::Timeout` | target |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- |");
    let rows: [(&str, &str, Option<f64>); 4] = [
        (
            "baseline: bare service_fn",
            "bare `service_fn` (context)",
            None,
        ),
        (
            "tower::timeout::Timeout",
            "`tower::timeout::Timeout` (baseline)",
            None,
        ),
        ("TimeoutLayer", "`TimeoutLayer`", Some(1.05)),
        (
            "full stack",
            "full stack (`CancelOnDisconnectLayer` + `TimeoutLayer` + `ProgressResetLayer`)",
            // Issue #14's target.
            Some(2.0),
        ),
    ];
    for (key, label, target) in rows {
        let Some(ns) = get(key) else { continue };
        let r = ns / base;
        let target = match target {
            Some(x) => format!("≤ {x}× — {}", verdict(r <= x)),
            None => "–".to_owned(),
        };
        let _ = writeln!(out, "| {label} | {ns:.0} ns | {r:.2}× | {target} |");
    }
    t.insert("fig12", out);
}

/// Parses a duration as `Debug` formats one and h2load prints one
/// ("3.6ms", "812.5µs", "812.5us", "1.2s", "15ns").
fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_alphabetic() || c == 'µ')?);
    let v: f64 = num.parse().ok()?;
    let ns = match unit {
        "ns" => v,
        "µs" | "us" => v * 1e3,
        "ms" => v * 1e6,
        "s" => v * 1e9,
        _ => return None,
    };
    Some(Duration::from_nanos(ns as u64))
}

fn figure7(file: &Path, t: &mut Tables) {
    let Ok(text) = std::fs::read_to_string(file) else {
        eprintln!("no timer-lateness output at {}", file.display());
        return;
    };
    // (p50, p99, max) from the line starting with `prefix`.
    let row = |prefix: &str| {
        let line = text.lines().find(|l| l.starts_with(prefix))?;
        let field = |name: &str| {
            let i = line.find(name)? + name.len();
            line[i..].split_whitespace().next().and_then(parse_duration)
        };
        Some((field("p50 ")?, field("p99 ")?, field("max ")?))
    };
    let (Some(layer), Some(floor)) = (row("timer lateness"), row("floor lateness")) else {
        eprintln!(
            "cannot parse the timer-lateness lines in {}",
            file.display()
        );
        return;
    };
    let mut out = String::new();
    let _ = writeln!(out, "| deadlines | p50 | p99 | max | target |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    let _ = writeln!(
        out,
        "| `TimeoutLayer` | {} | {} | {} | p99 ≤ 2 ms — {} |",
        fmt_d(layer.0),
        fmt_d(layer.1),
        fmt_d(layer.2),
        verdict(layer.1 <= Duration::from_millis(2))
    );
    let _ = writeln!(
        out,
        "| `tokio::time::sleep_until` (floor) | {} | {} | {} | — |",
        fmt_d(floor.0),
        fmt_d(floor.1),
        fmt_d(floor.2),
    );
    t.insert("fig7", out);
}

// ---------------------------------------------------------------- output

fn machine() -> String {
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    format!("Last run: {date}; {cpus} cores ({model}), shared with other work (load average {load} at the end of the run); release build.\n")
}

/// Replaces the text between `<!-- bench:NAME begin -->` and
/// `<!-- bench:NAME end -->` for each table; markers that are missing are
/// reported, not added.
fn rewrite(path: &Path, tables: &Tables) -> std::io::Result<()> {
    let mut doc = std::fs::read_to_string(path)?;
    for (name, body) in tables {
        let begin = format!("<!-- bench:{name} begin -->");
        let end = format!("<!-- bench:{name} end -->");
        let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
            eprintln!("{}: no markers for {name}", path.display());
            continue;
        };
        if e < b {
            eprintln!("{}: markers for {name} out of order", path.display());
            continue;
        }
        doc.replace_range(b + begin.len()..e, &format!("\n{body}"));
    }
    std::fs::write(path, doc)
}

fn main() {
    let a = args();
    if !a.smoke && !cfg!(feature = "peers") {
        eprintln!("built without the `peers` feature: our servers only");
    }
    let mut tables = Tables::new();
    if let Some(dir) = &a.criterion {
        figures12(dir, &mut tables);
    }
    if let Some(f) = &a.lateness {
        figure7(f, &mut tables);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if a.only.contains(&6) {
        figure6(a.smoke, &mut tables);
    }
    if a.only.contains(&3) {
        rt.block_on(figure3(a.smoke, &mut tables));
    }
    if a.only.contains(&4) {
        rt.block_on(figure4(a.smoke, &mut tables));
    }
    if a.only.contains(&5) {
        rt.block_on(figure5(a.smoke, &mut tables));
    }
    if a.only.contains(&8) {
        figure8(&a, &mut tables);
    }
    let mut run = machine();
    if a.criterion.is_none() || a.lateness.is_none() || a.only != OWN_FIGURES {
        // A partial run: say which tables it rewrote.
        // Figures 1-2 come from --criterion, 7 from --lateness, 3-6 and 8 from --only.
        let mut figures: Vec<u32> = a
            .only
            .iter()
            .copied()
            .filter(|f| OWN_FIGURES.contains(f))
            .collect();
        if a.criterion.is_some() {
            figures.extend([1, 2]);
        }
        if a.lateness.is_some() {
            figures.push(7);
        }
        figures.sort_unstable();
        figures.dedup();
        let names: Vec<String> = figures.iter().map(u32::to_string).collect();
        run.pop();
        run.push_str(&format!(
            " {} {} only; the other tables are from earlier runs.\n",
            if names.len() == 1 {
                "Figure"
            } else {
                "Figures"
            },
            names.join(", ")
        ));
    }
    tables.insert("run", run);
    for (name, body) in &tables {
        println!("== {name}\n{body}");
    }
    if let Some(path) = &a.write {
        if let Err(e) = rewrite(path, &tables) {
            eprintln!("cannot rewrite {}: {e}", path.display());
            std::process::exit(1);
        }
        eprintln!("rewrote {}", path.display());
    }
}
