//! Disconnect is cancellation: a client that goes away — before the first
//! byte or in the middle of the SSE stream, over HTTP/1.1 and HTTP/2 — drops
//! the handler future and fires its token with "client disconnected"; a
//! stream that reached its final response fires nothing; a legacy (2025-xx)
//! request is not cancelled by default. Every step waits on an event the
//! server side sends, never on a timer.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use http_body_util::BodyExt;
use http_support::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::transport::http::StatefulRequests;
use tower_mcp_cancel::CancelReason;

/// Waits for both the drop of the handler future and the token firing with
/// ClientDisconnected, in any order.
async fn expect_cancelled(events: &mut Events, id: i64) {
    let id = RequestId::from(id);
    let mut dropped = false;
    let mut token = false;
    while !(dropped && token) {
        match events.next().await {
            Event::Dropped(i) if i == id => dropped = true,
            Event::Token(i, reason) if i == id => {
                assert_eq!(reason, Some(CancelReason::ClientDisconnected));
                token = true;
            }
            Event::Done(i) if i == id => panic!("handler {i} completed instead of being dropped"),
            _ => {}
        }
    }
}

fn raw_headers(name: &str) -> Vec<(&'static str, String)> {
    modern_headers(name)
}

async fn raw_request(
    addr: std::net::SocketAddr,
    body: &serde_json::Value,
    headers: &[(&'static str, String)],
) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream.write_all(&raw_post(body, &extra)).await.unwrap();
    stream
}

#[tokio::test]
async fn h1_disconnect_before_first_byte_cancels() {
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    let stream = raw_request(addr, &tool_call(1, "hang", json!({})), &raw_headers("hang")).await;
    events.until(|e| matches!(e, Event::Started(_))).await;
    drop(stream); // the client vanishes: no response byte was ever sent
    expect_cancelled(&mut events, 1).await;
}

#[tokio::test]
async fn h1_disconnect_mid_sse_cancels() {
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    let mut stream = raw_request(
        addr,
        &tool_call(2, "hang", json!({"notify": true})),
        &raw_headers("hang"),
    )
    .await;
    let seen = read_until(&mut stream, "notifications/message").await;
    assert!(seen.contains("text/event-stream"), "{seen}");
    drop(stream);
    expect_cancelled(&mut events, 2).await;
}

#[tokio::test]
async fn h2_reset_before_first_byte_cancels() {
    let (addr, _tools, mut events) = serve_tools(Proto::H2, |s| s).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;
    let pending = conn.send(post(&tool_call(3, "hang", json!({})), &raw_headers("hang")));
    let call = tokio::spawn(pending);
    events.until(|e| matches!(e, Event::Started(_))).await;
    call.abort(); // drops the response future: hyper resets the stream
    expect_cancelled(&mut events, 3).await;
    // The connection itself is still fine for the next request.
    let res = bounded(conn.send(post(
        &tool_call(4, "echo", json!({"text": "still here"})),
        &raw_headers("echo"),
    )))
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn h2_reset_mid_sse_cancels() {
    let (addr, _tools, mut events) = serve_tools(Proto::H2, |s| s).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;
    let res = bounded(conn.send(post(
        &tool_call(5, "hang", json!({"notify": true})),
        &raw_headers("hang"),
    )))
    .await
    .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let frame = bounded(body.frame()).await.unwrap().unwrap();
    let data = frame.into_data().unwrap();
    assert!(String::from_utf8_lossy(&data).contains("notifications/message"));
    drop(body); // resets the stream
    expect_cancelled(&mut events, 5).await;
}

#[tokio::test]
async fn a_completed_stream_fires_nothing() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, tools, mut events) = serve_tools(proto, |s| s).await;
        let mut conn = Conn::connect(addr, proto).await;
        let res = bounded(conn.send(post(
            &tool_call(6, "notify", json!({})),
            &raw_headers("notify"),
        )))
        .await
        .unwrap();
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let body = text(res).await;
        assert!(body.contains("\"id\":6"), "{body}");
        events.until(|e| matches!(e, Event::Done(_))).await;
        // The request's cancellation is completed: a later cancel is a no-op,
        // so closing the connection now can fire nothing.
        let c = tools.last.lock().unwrap().clone().unwrap();
        assert!(c.is_finished() && !c.is_cancelled());
        drop(conn);
        assert!(!c.cancel(CancelReason::ClientDisconnected));
        assert!(!c.token().is_cancelled());
        assert!(events
            .drain()
            .iter()
            .all(|e| !matches!(e, Event::Token(..) | Event::Dropped(_))));
    }
}

fn legacy_headers() -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
        ("MCP-Protocol-Version", "2025-06-18".into()),
    ]
}

fn legacy_call(id: i64, name: &str) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {}}})
}

#[tokio::test]
async fn legacy_request_is_not_cancelled_by_disconnect_by_default() {
    let (addr, tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    let stream = raw_request(addr, &legacy_call(7, "wait_release"), &legacy_headers()).await;
    events.until(|e| matches!(e, Event::Started(_))).await;
    drop(stream);
    // The server has seen the disconnect once the connection task has ended.
    let seen = events.until(|e| *e == CONN_CLOSED).await;
    assert!(
        seen.iter()
            .all(|e| !matches!(e, Event::Dropped(_) | Event::Token(..))),
        "{seen:?}"
    );
    // The handler is still alive and runs to its end when released.
    tools.release.notify_one();
    let seen = events
        .until(|e| matches!(e, Event::Done(_) | Event::Dropped(_)))
        .await;
    assert_eq!(seen.last(), Some(&Event::Done(RequestId::from(7))));
    let c = tools.last.lock().unwrap().clone().unwrap();
    assert!(!c.is_cancelled());
}

#[tokio::test]
async fn legacy_request_cancelled_on_disconnect_when_configured() {
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| {
        s.stateful_requests(StatefulRequests::ServeCancelOnDisconnect)
    })
    .await;
    let stream = raw_request(addr, &legacy_call(8, "wait_release"), &legacy_headers()).await;
    events.until(|e| matches!(e, Event::Started(_))).await;
    drop(stream);
    expect_cancelled(&mut events, 8).await;
}

#[tokio::test]
async fn legacy_request_rejected_when_configured() {
    let (addr, _tools, _events) =
        serve_tools(Proto::H1, |s| s.stateful_requests(StatefulRequests::Reject)).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let res = bounded(conn.send(post(&legacy_call(9, "echo"), &legacy_headers())))
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert!(text(res).await.contains("-32022"));
}

fn listen_request(id: i64) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": {"toolsListChanged": true}
    }})
}

fn listen_headers() -> Vec<(&'static str, String)> {
    modern_headers("")
        .into_iter()
        .filter(|(k, _)| *k != "Mcp-Name")
        .map(|(k, v)| {
            if k == "Mcp-Method" {
                (k, "subscriptions/listen".to_string())
            } else {
                (k, v)
            }
        })
        .collect()
}

#[tokio::test]
async fn listen_stream_stays_open_and_client_close_ends_it() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, mut events) = serve_tools(proto, |s| s).await;
        let mut conn = Conn::connect(addr, proto).await;
        let res = bounded(conn.send(post(&listen_request(10), &listen_headers())))
            .await
            .unwrap();
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let mut body = res.into_body();
        let frame = bounded(body.frame()).await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(frame.data_ref().unwrap())
            .contains("subscriptions/acknowledged"));
        drop(body);
        if proto == Proto::H1 {
            drop(conn);
        }
        expect_cancelled(&mut events, 10).await;
    }
}

#[tokio::test]
async fn server_shutdown_ends_listen_gracefully() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let s2 = shutdown.clone();
    let (addr, _tools, mut events) = serve_tools(Proto::H1, move |s| s.shutdown(s2)).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let res = bounded(conn.send(post(&listen_request(11), &listen_headers())))
        .await
        .unwrap();
    let mut body = res.into_body();
    let first = bounded(body.frame()).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(first.data_ref().unwrap()).contains("acknowledged"));
    shutdown.cancel();
    let rest = bounded(body.collect()).await.unwrap().to_bytes();
    let rest = String::from_utf8_lossy(&rest);
    let data = rest
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .expect("a final event");
    let v: serde_json::Value = serde_json::from_str(data.trim()).unwrap();
    assert_eq!(v["id"], 11);
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        11
    );
    // The handler was dropped, its token fired with the shutdown reason.
    let seen = events.until(|e| matches!(e, Event::Token(..))).await;
    assert!(seen.contains(&Event::Token(
        RequestId::from(11),
        Some(CancelReason::Shutdown)
    )));
}
