//! Figure 9: the cost of a request with a wire budget. Pipelined `tools/call
//! echo` over stdio against our server (figure 3's), with the budget key
//! off, and on with requests without a budget, with the same `_meta` bytes
//! under a key the server does not read, and with a budget (30 s,
//! shorter than the server's `tools/call` policy: the budget is the deadline
//! the server enforces); rounds interleaved, so that noise hits every row.

use std::fmt::Write as _;

use crate::report::Tables;
use crate::stdio;

/// The `_meta` key of the budget (the examples' key).
const KEY: &str = "io.github.tower-mcp-cancel/budgetMs";
/// A key of the same length that the server does not read.
const PADDING_KEY: &str = "io.github.tower-mcp-cancel/paddedMs";

pub(crate) async fn figure9(smoke: bool, t: &mut Tables) {
    let (n, rounds, warm) = if smoke {
        (2_000, 1, 500)
    } else {
        (50_000, 5, 5_000)
    };
    let window = 64;
    let budget = format!(r#"{{"{KEY}":30000}}"#);
    // The same bytes under a key the server does not read: what a request
    // with that `_meta` costs without a budget (parsing, the handler's copy).
    let padding = format!(r#"{{"{PADDING_KEY}":30000}}"#);
    // (row, server's key on, the requests' `_meta`)
    let rows: [(&str, bool, Option<&str>); 4] = [
        ("budget key off, no budget (figure 3)", false, None),
        ("budget key on, no budget", true, None),
        ("budget key on, the same bytes under another key", true, Some(&padding)),
        ("budget key on, budget 30 s in each request", true, Some(&budget)),
    ];
    eprintln!("figure 9: {n} pipelined echo calls, window {window}, {rounds} rounds");
    let mut conns = Vec::new();
    for (_, key_on, meta) in &rows {
        let env: &[(&str, &str)] = if *key_on {
            &[("OURS_BUDGET_KEY", KEY)]
        } else {
            &[]
        };
        let mut c = stdio::Conn::open_with_env(stdio::OURS, env).await;
        stdio::pipelined_with_meta(&mut c, 1, warm, window, *meta).await;
        conns.push(c);
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    let mut errors = vec![0u64; rows.len()];
    for r in 0..rounds {
        for (i, c) in conns.iter_mut().enumerate() {
            let first = 1_000_000 * (r as u64 + 1);
            let res = stdio::pipelined_with_meta(c, first, n, window, rows[i].2).await;
            eprintln!(
                "  {:44} round {r}: {:>9.0} req/s ({:?}, {} errors)",
                rows[i].0,
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
    let base = median(&rates[0]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| requests | requests/s (median of {rounds} × {n}) | range | µs per request | vs. key off | errors |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    for (i, (row, _, _)) in rows.iter().enumerate() {
        let m = median(&rates[i]);
        let lo = rates[i].iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = rates[i].iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "| {row} | {m:.0} | {lo:.0}–{hi:.0} | {:.2} | {:+.1} % | {} |",
            1e6 / m,
            (base / m - 1.0) * 100.0,
            errors[i]
        );
    }
    t.insert("fig9", out);
}
