//! Figure 3: stdio throughput, pipelined echo calls against each server.

use std::fmt::Write as _;

use crate::report::{verdict, Tables};
use crate::stdio;

pub(crate) async fn figure3(smoke: bool, t: &mut Tables) {
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
