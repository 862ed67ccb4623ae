//! Hostile cancels: a cancel for another connection's id (stdio and HTTP,
//! same ids on both connections) affects nothing on the other. The test
//! service is [`crate::hostile`]'s.
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::hostile::{connect, next_started, work, work_service};
use crate::support::stdio as stdio_support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::BOUND;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::test_util::settle;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{CancelReason, McpRequest};

// ---------------------------------------------------------------------------
// Cross-connection cancels.

#[tokio::test(start_paused = true)]
async fn stdio_cancel_for_another_connections_id_affects_nothing() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let svc = work_service(tx);
    let mut a = connect(svc.clone(), StdioServer::new(), 64 * 1024);
    let mut b = connect(svc, StdioServer::new(), 64 * 1024);

    // The same ids on both connections, plus one id only A has.
    for (conn, id) in [("A", json!(1)), ("A", json!("x")), ("A", json!("only-a"))] {
        a.peer.send(work(id, conn, Some(10_000))).await;
    }
    for (conn, id) in [("B", json!(1)), ("B", json!("x"))] {
        b.peer.send(work(id, conn, Some(10_000))).await;
    }
    let mut started = Vec::new();
    for _ in 0..5 {
        started.push(next_started(&mut rx).await);
    }
    let find = |conn: &str, id: &str| {
        started
            .iter()
            .find(|s| s.conn == conn && s.id == id)
            .unwrap_or_else(|| panic!("{conn}/{id} started"))
    };

    // A cancels 1 (its own, and also B's id); B cancels "only-a" (A's only).
    a.peer.cancel(json!(1), "A gives up on 1").await;
    b.peer.cancel(json!("only-a"), "B aims at A").await;
    a.peer.sync(json!("sa")).await;
    b.peer.sync(json!("sb")).await;
    settle().await;

    let a1 = find("A", "1");
    assert!(a1.probe.was_cancelled(), "A's own request 1 was dropped");
    assert_eq!(
        a1.cancellation.reason(),
        Some(&CancelReason::peer(Some("A gives up on 1")))
    );
    for (conn, id) in [
        ("B", "1"),
        ("B", "\"x\""),
        ("A", "\"x\""),
        ("A", "\"only-a\""),
    ] {
        let s = find(conn, id);
        assert!(!s.probe.is_dropped(), "{conn}/{id} must still run");
        assert!(!s.cancellation.is_finished(), "{conn}/{id} not cancelled");
    }
    assert_eq!((a.registry.len(), b.registry.len()), (2, 2));

    // The survivors run to their end and are answered on their own
    // connection; A writes nothing for its cancelled 1.
    tokio::time::advance(Duration::from_secs(10)).await;
    let mut answered = Vec::new();
    for _ in 0..2 {
        let v = b.peer.recv().await.unwrap();
        assert_eq!(v["result"]["conn"], "B", "{v}");
        answered.push(v["id"].clone());
    }
    answered.sort_by_key(|v| v.to_string());
    assert_eq!(answered, vec![json!("x"), json!(1)]);
    let mut answered = Vec::new();
    for _ in 0..2 {
        let v = a.peer.recv().await.unwrap();
        assert_eq!(v["result"]["conn"], "A", "{v}");
        answered.push(v["id"].clone());
    }
    answered.sort_by_key(|v| v.to_string());
    assert_eq!(answered, vec![json!("only-a"), json!("x")]);
    assert!(find("B", "1").probe.is_finished());
    for conn in [a, b] {
        assert!(conn.peer.close().await.is_empty(), "nothing else written");
        conn.served.await.unwrap().unwrap();
        assert!(conn.registry.is_empty());
    }
}

use crate::support::http as http_support;

#[tokio::test]
async fn http_cancel_for_another_connections_id_affects_nothing() {
    use http_support::{
        modern_headers, post, raw_post, read_until, text, tool_call, Conn as Http, Proto,
    };
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let (tx, mut rx) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let svc = {
        let inner = work_service(tx);
        let release = release.clone();
        // `work` for connection B waits for the release instead of a timer.
        service_fn(move |req: McpRequest| {
            let inner = inner.clone();
            let release = release.clone();
            async move {
                let is_b = req.params_as::<Value>().unwrap_or_default()["arguments"]["conn"] == "B";
                let call = inner.oneshot(req);
                if !is_b {
                    return call.await;
                }
                tokio::pin!(call);
                tokio::select! {
                    biased;
                    r = &mut call => r,
                    () = release.notified() => Ok(json!({"resultType": "complete", "conn": "B", "released": true})),
                }
            }
        })
    };
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(StreamableHttpService::new(svc), Proto::H1, closed_tx).await;

    // Connection A (a raw socket) and connection B (hyper) both call id 1.
    let headers = modern_headers("work");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut a = tokio::net::TcpStream::connect(addr).await.unwrap();
    a.write_all(&raw_post(
        &tool_call(1, "work", json!({"conn": "A"})),
        &extra,
    ))
    .await
    .unwrap();
    let mut b = Http::connect(addr, Proto::H1).await;
    let b_call = tokio::spawn(b.send(post(&tool_call(1, "work", json!({"conn": "B"})), &headers)));
    let mut started = [next_started(&mut rx).await, next_started(&mut rx).await];
    started.sort_by(|x, y| x.conn.cmp(&y.conn));
    let [sa, sb] = started;
    assert_eq!((sa.conn.as_str(), sb.conn.as_str()), ("A", "B"));

    // A third connection posts notifications/cancelled for id 1: without
    // sessions it names no request, so it is accepted (202) and does nothing.
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "not yours"}});
    let mut cancel_headers = modern_headers("work");
    cancel_headers.retain(|(k, _)| *k != "Mcp-Name");
    cancel_headers.iter_mut().for_each(|(k, v)| {
        if *k == "Mcp-Method" {
            *v = "notifications/cancelled".into();
        }
    });
    let extra_c: Vec<(&str, &str)> = cancel_headers
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    c.write_all(&raw_post(&cancel, &extra_c)).await.unwrap();
    let seen = read_until(&mut c, "\r\n\r\n").await;
    assert!(seen.starts_with("HTTP/1.1 202"), "{seen}");

    // A closes its connection: that cancels A's request 1, and only it.
    drop(a);
    tokio::time::timeout(BOUND, async {
        while !sa.probe.is_dropped() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("A's handler dropped");
    assert_eq!(
        sa.cancellation.reason(),
        Some(&CancelReason::ClientDisconnected)
    );
    assert!(!sb.probe.is_dropped(), "B's request 1 still runs");
    assert!(!sb.cancellation.is_finished());

    // B's request is answered.
    release.notify_one();
    let res = tokio::time::timeout(BOUND, b_call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let body = text(res).await;
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        (v["id"].clone(), v["result"]["conn"].clone()),
        (json!(1), json!("B"))
    );
}
