//! Figure 4: stdio cancellation latency, cancel to future dropped and to
//! token fired.

use std::fmt::Write as _;
use std::time::Duration;

use crate::report::{fmt_d, pct, verdict, Tables};
use crate::stdio;

pub(crate) async fn figure4(smoke: bool, t: &mut Tables) {
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
