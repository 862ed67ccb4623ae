//! The tables' plumbing: percentiles, durations as printed and parsed,
//! verdicts, the run's machine line, and rewriting BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub(crate) fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

pub(crate) fn fmt_d(d: Duration) -> String {
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

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

/// Tables by marker name.
pub(crate) type Tables = BTreeMap<&'static str, String>;

/// Parses a duration as `Debug` formats one and h2load prints one
/// ("3.6ms", "812.5µs", "812.5us", "1.2s", "15ns").
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
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

pub(crate) fn machine() -> String {
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
pub(crate) fn rewrite(path: &Path, tables: &Tables) -> std::io::Result<()> {
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
