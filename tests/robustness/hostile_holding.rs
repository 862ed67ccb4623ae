//! Hostile holding: what one peer cannot make the server hold.
//!
//! * a peer that stops reading gets backpressure (bounded queue, bounded
//!   memory, input no longer read) without a deadlock once it reads again;
//! * a flood of 100 000 unknown-id cancels leaves memory and the registry as
//!   they were and writes nothing;
//! * progress that does not increase cannot keep a request alive past its
//!   idle limit, and nothing keeps it past its hard maximum.
//!
//! Memory is measured by the counting allocator of [`crate::hostile`], on a
//! current-thread runtime (see there why).
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::hostile::{
    connect, live, next_started, peak_above, start_peak, work, work_service, KIB, MIB,
};
use crate::support::stdio as stdio_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::{pipe, Peer, BOUND};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tower::{ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::test_util::settle;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{Elapsed, Limit, McpRequest, ProgressResetLayer};

// ---------------------------------------------------------------------------
// A peer that stops reading; a flood of unknown cancels.

#[tokio::test]
async fn a_reader_that_stops_reading_gets_backpressure_with_flat_memory_and_no_deadlock() {
    const N: usize = 20_000;
    const MAX_IN_FLIGHT: usize = 16;
    let (tx, _rx) = mpsc::unbounded_channel();
    let cfg = StdioServer::new()
        .write_queue(4)
        .max_in_flight(MAX_IN_FLIGHT);
    let conn = connect(work_service(tx), cfg, 4 * 1024);
    let Peer { mut w, r } = conn.peer;
    let pad = "p".repeat(200);
    let lines: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut l = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": i, "method": "echo",
                "params": {"pad": pad}}))
            .unwrap();
            l.push(b'\n');
            l
        })
        .collect();

    let baseline = start_peak();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    // The peer writes everything and never reads (until told to).
    let writer = tokio::spawn(async move {
        for l in &lines {
            w.write_all(l).await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
        }
        w
    });
    settle().await;
    let stalled = written.load(Ordering::SeqCst);
    let live_at_stall = live();
    settle().await;
    settle().await;
    assert_eq!(
        written.load(Ordering::SeqCst),
        stalled,
        "the server stopped reading"
    );
    assert!(
        stalled < N,
        "the server read all {N} requests although nobody read its answers"
    );
    // In flight (at most MAX_IN_FLIGHT), the queue (4) and the writer's
    // message, the refusal the reader waits to queue, and what the two 4 KiB
    // pipes and the reader's buffer hold.
    assert!(
        stalled <= MAX_IN_FLIGHT + 4 + 2 + 64,
        "{stalled} requests accepted before backpressure"
    );
    assert!(conn.registry.len() <= MAX_IN_FLIGHT);
    let peak = peak_above(baseline);
    let growth = live() - live_at_stall;
    eprintln!(
        "stopped reader: {stalled} of {N} requests read, in flight {}, peak growth {peak} bytes, \
         growth while stalled {growth} bytes",
        conn.registry.len()
    );
    assert!(
        peak < MIB,
        "peak growth {peak} bytes while the peer did not read"
    );
    assert!(
        growth.abs() < 4 * KIB,
        "memory not flat while stalled: {growth} bytes"
    );

    // The peer reads again: every request gets exactly one answer (its
    // result, or a busy error), nothing is lost, nothing deadlocks.
    let mut r = r;
    let mut answered = vec![0u8; N];
    let mut busy = 0;
    for _ in 0..N {
        let line = tokio::time::timeout(BOUND, r.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        let id = v["id"].as_u64().unwrap_or_else(|| panic!("{v}")) as usize;
        answered[id] += 1;
        if v.get("error").is_some() {
            busy += 1;
        } else {
            assert_eq!(v["result"]["params"]["pad"], pad.as_str());
        }
    }
    assert!(
        answered.iter().all(|n| *n == 1),
        "each request answered exactly once"
    );
    eprintln!(
        "stopped reader: after reading again, {} results, {busy} busy errors",
        N - busy
    );
    let w = writer.await.unwrap();
    let peer = Peer { w, r };
    assert!(peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
}

/// Writes one `notifications/cancelled` line for each id in `ids` (even
/// ids as integers, odd ones as strings), as fast as the pipe takes them,
/// checking now and then that `registry` keeps its size.
async fn cancel_flood(
    w: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ids: std::ops::Range<usize>,
    registry: &InFlight,
) {
    let size = registry.len();
    let mut line = Vec::with_capacity(256);
    for i in ids {
        line.clear();
        let id = if i % 2 == 0 {
            json!(i)
        } else {
            json!(format!("unknown-{i}"))
        };
        serde_json::to_writer(
            &mut line,
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "flood"}}),
        )
        .unwrap();
        line.push(b'\n');
        w.write_all(&line).await.unwrap();
        if i % 1000 == 0 {
            assert_eq!(registry.len(), size, "registry unchanged during the flood");
        }
    }
}

#[tokio::test]
async fn a_flood_of_unknown_id_cancels_leaves_memory_and_registry_flat_and_writes_nothing() {
    const FLOOD: usize = 100_000;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut conn = connect(work_service(tx), StdioServer::new(), 64 * 1024);
    conn.peer.send(work(json!("keep"), "A", None)).await;
    let keep = next_started(&mut rx).await;
    // Warm-up, the same way: the pipe, the line buffers and the tasks'
    // storage reach their working size, which the measurement must not count.
    cancel_flood(&mut conn.peer.w, 0..20_000, &conn.registry).await;
    conn.peer.sync(json!("warm")).await;
    assert_eq!(conn.registry.len(), 1);

    let baseline = start_peak();
    cancel_flood(&mut conn.peer.w, 0..FLOOD, &conn.registry).await;
    // Nothing was written for any of them: the ping's answer is the next line.
    let lines = conn.peer.sync(json!("after")).await;
    let peak = peak_above(baseline);
    let growth = live() - baseline;
    eprintln!(
        "cancel flood: {FLOOD} unknown ids, peak growth {peak} bytes, net growth {growth} bytes"
    );
    assert_eq!(
        lines,
        vec![json!({"jsonrpc": "2.0", "id": "after", "result": {}})]
    );
    assert_eq!(conn.registry.len(), 1, "registry unchanged");
    assert!(
        !keep.probe.is_dropped() && !keep.cancellation.is_finished(),
        "the real request runs on"
    );
    assert!(
        peak < 256 * KIB,
        "peak growth {peak} bytes during the flood"
    );
    // A few tens of KiB of one-time buffer growth are seen (the same after
    // 20 000 cancels as after 100 000); keeping as little as one byte per
    // cancel would be 100 000 bytes.
    assert!(
        growth.abs() < 64 * KIB,
        "memory not back to flat: {growth} bytes"
    );
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
    assert!(keep.probe.was_cancelled());
}

// ---------------------------------------------------------------------------
// Progress that must not keep a request alive.

fn progress(token: &Value, value: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": token, "progress": value}})
}

#[tokio::test(start_paused = true)]
async fn progress_that_does_not_increase_cannot_keep_a_request_past_its_idle_limit() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(60)))
        .service(client.clone());
    let t0 = tokio::time::Instant::now();
    let mut call = tokio::spawn(svc.oneshot(McpRequest::new("victim", "tools/call")));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();

    // One real increase at 0.5 s: the idle limit now ends at 1.5 s.
    tokio::time::sleep(Duration::from_millis(500)).await;
    peer.send(progress(&token, json!(10))).await;
    // Then, every 100 ms, values that do not increase (smaller, equal, out
    // of range, of the wrong type), and progress for tokens that are not
    // this request's ("1" is not 1).
    let hostile: Vec<Vec<u8>> = [
        progress(&token, json!(9)),
        progress(&token, json!(10)),
        progress(&token, json!(-1e308)),
        progress(&token, json!(10.0)),
        progress(&token, json!("11")),
        progress(&token, json!(null)),
        progress(&json!("someone-else"), json!(1000)),
        progress(&json!(token.to_string()), json!(1000)),
    ]
    .iter()
    .map(|v| v.to_string().into_bytes())
    .chain([
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":1e400}}}}"#).into_bytes(),
        format!(r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":11"#).into_bytes(),
    ])
    .collect();
    let mut sent = 0;
    let mut next = hostile.iter().cycle();
    let err = loop {
        tokio::select! {
            r = &mut call => break r.unwrap().unwrap_err(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                peer.send_raw(next.next().unwrap()).await;
                sent += 1;
            }
        }
    };
    let elapsed = t0.elapsed();
    let elapsed_err = err
        .downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(elapsed_err.limit(), Limit::Idle);
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_millis(1510),
        "ended at {elapsed:?}: 1 s after the last increase (0.5 s)"
    );
    assert!(sent >= 9, "hostile progress kept coming ({sent} messages)");
    eprintln!(
        "non-increasing progress: idle limit fired at {elapsed:?} after {sent} hostile messages"
    );
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["method"].clone(), v["params"]["requestId"].clone()),
        (json!("notifications/cancelled"), json!("victim"))
    );
    assert_eq!(client.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_keeps_a_request_past_its_hard_maximum() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(3)))
        .service(client.clone());
    let t0 = tokio::time::Instant::now();
    let mut call = tokio::spawn(svc.oneshot(McpRequest::new("m", "tools/call")));
    let v = peer.recv().await.unwrap();
    let token = v["params"]["_meta"]["progressToken"].clone();
    // Strictly increasing progress every 100 ms, in ever bigger steps, plus
    // keep-alive-like noise: the idle limit never fires, the maximum does.
    let mut step = 1.0_f64;
    let mut sent = 0;
    let err = loop {
        tokio::select! {
            r = &mut call => break r.unwrap().unwrap_err(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                step *= 10.0;
                peer.send(progress(&token, json!(step.min(f64::MAX)))).await;
                peer.send(json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "still here"}})).await;
                sent += 1;
            }
        }
    };
    let elapsed = t0.elapsed();
    assert_eq!(
        err.downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("{err}"))
            .limit(),
        Limit::Max
    );
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_millis(3010),
        "ended at {elapsed:?}"
    );
    assert!(sent >= 29, "progress kept coming until the end ({sent})");
    eprintln!("increasing progress: hard maximum fired at {elapsed:?} after {sent} reports");
    let v = peer.recv().await.unwrap();
    assert_eq!(
        (v["method"].clone(), v["params"]["requestId"].clone()),
        (json!("notifications/cancelled"), json!("m"))
    );
}
