//! Figure 5: Streamable HTTP disconnect latency, HTTP/1.1 and HTTP/2,
//! before the first byte and mid-SSE.

use std::fmt::Write as _;
use std::time::Duration;

use crate::http;
use crate::report::{fmt_d, pct, verdict, Tables};

pub(crate) async fn figure5(smoke: bool, t: &mut Tables) {
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
