//! A request without `MCP-Protocol-Version`: rejected by default (`400`,
//! `-32020`); with `accept_missing_version(true)` taken as a
//! 2025-03-26 request, which then follows the `StatefulRequests` setting —
//! served and not cancelled by a disconnect by default, cancelled when so
//! configured, refused with `-32022` under `Reject`. A body that carries a
//! modern `_meta` protocol version stays rejected.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use http_support::*;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::transport::http::StatefulRequests;
use tower_mcp_cancel::CancelReason;

/// What a 2025-03-26 client sends: no version header, no `Mcp-Method`.
fn old_headers() -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
    ]
}

fn old_call(id: i64, name: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
}

async fn post_json(conn: &mut Conn, body: &Value) -> (u16, Value) {
    let res = bounded(conn.send(post(body, &old_headers())))
        .await
        .unwrap();
    let status = res.status().as_u16();
    let text = text(res).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn without_the_option_a_missing_version_is_rejected() {
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let (status, v) = post_json(&mut conn, &old_call(1, "echo", json!({"text": "hi"}))).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32020);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("MCP-Protocol-Version"));
    assert!(events.drain().is_empty(), "the handler never ran");
}

#[tokio::test]
async fn with_the_option_it_is_served_as_2025_03_26() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s.accept_missing_version(true)).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let (status, v) = post_json(&mut conn, &old_call(2, "echo", json!({"text": "old"}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"]["content"][0]["text"], "old");

    // A modern body (with _meta protocolVersion) that leaves the header out
    // is a broken modern client, not an old one: still rejected.
    let (status, v) = post_json(&mut conn, &tool_call(3, "echo", json!({"text": "x"}))).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32020);
}

#[tokio::test]
async fn assumed_2025_requests_are_not_cancelled_by_a_disconnect_by_default() {
    let (addr, tools, mut events) =
        serve_tools(Proto::H1, |s| s.accept_missing_version(true)).await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers = old_headers();
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream
        .write_all(&raw_post(&old_call(4, "wait_release", json!({})), &extra))
        .await
        .unwrap();
    events.until(|e| matches!(e, Event::Started(_))).await;
    drop(stream);
    let seen = events.until(|e| *e == CONN_CLOSED).await;
    assert!(
        seen.iter()
            .all(|e| !matches!(e, Event::Dropped(_) | Event::Token(..))),
        "{seen:?}"
    );
    tools.release.notify_one();
    let seen = events
        .until(|e| matches!(e, Event::Done(_) | Event::Dropped(_)))
        .await;
    assert_eq!(seen.last(), Some(&Event::Done(RequestId::from(4))));
}

#[tokio::test]
async fn assumed_2025_requests_follow_the_legacy_setting() {
    // Cancelled on disconnect when configured.
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| {
        s.accept_missing_version(true)
            .stateful_requests(StatefulRequests::ServeCancelOnDisconnect)
    })
    .await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers = old_headers();
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream
        .write_all(&raw_post(&old_call(5, "hang", json!({})), &extra))
        .await
        .unwrap();
    events.until(|e| matches!(e, Event::Started(_))).await;
    drop(stream);
    let (mut dropped, mut token) = (false, false);
    while !(dropped && token) {
        match events.next().await {
            Event::Dropped(i) if i == RequestId::from(5) => dropped = true,
            Event::Token(i, r) if i == RequestId::from(5) => {
                assert_eq!(r, Some(CancelReason::ClientDisconnected));
                token = true;
            }
            _ => {}
        }
    }

    // Refused, as 2025-03-26, under Reject.
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| {
        s.accept_missing_version(true)
            .stateful_requests(StatefulRequests::Reject)
    })
    .await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let (status, v) = post_json(&mut conn, &old_call(6, "echo", json!({}))).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32022);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("2025-03-26"));
}
