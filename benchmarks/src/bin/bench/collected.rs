//! Figures 1, 2 and 7, collected from what the main crate's benches wrote
//! (criterion's estimates, `timer_lateness`'s output).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::report::{fmt_d, parse_duration, verdict, Tables};

pub(crate) fn figures12(dir: &Path, t: &mut Tables) {
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

pub(crate) fn figure7(file: &Path, t: &mut Tables) {
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
