//! `transport::http::serve`: a client that cancels many streams on one
//! HTTP/2 connection keeps it (hyper's default allowance of 20 reset streams
//! would send `GOAWAY too_many_resets`), every cancelled handler is dropped,
//! and graceful shutdown returns once the requests in flight have ended.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::net::SocketAddr;

use http_support::*;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};

const STREAMS: i64 = 100;

/// The test tools served by `serve` on 127.0.0.1, until `shutdown` fires.
async fn start(shutdown: &CancellationToken) -> (SocketAddr, Tools, Events, JoinHandle<()>) {
    let (tools, events) = Tools::new();
    let svc = tower::Layer::layer(&StreamableHttpService::new(()), tools.service());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener, svc, shutdown.clone()));
    (addr, tools, events, server)
}

async fn echo(conn: &mut Conn, id: i64) {
    let res = bounded(conn.send(post(
        &tool_call(id, "echo", json!({"text": "still here"})),
        &modern_headers("echo"),
    )))
    .await
    .expect("the connection was closed");
    let body = text(res).await;
    assert!(body.contains("still here"), "{body}");
}

#[tokio::test]
async fn h2_client_cancelling_100_streams_keeps_its_connection() {
    let shutdown = CancellationToken::new();
    let (addr, _tools, mut events, _server) = start(&shutdown).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;

    // 100 calls that hang, all started, then all cancelled at once.
    let calls: Vec<_> = (1..=STREAMS)
        .map(|id| {
            conn.send(post(
                &tool_call(id, "hang", json!({})),
                &modern_headers("hang"),
            ))
        })
        .collect();
    let mut started = 0;
    while started < STREAMS {
        if let Event::Started(_) = events.next().await {
            started += 1;
        }
    }
    drop(calls);
    let mut dropped = std::collections::HashSet::new();
    while dropped.len() < STREAMS as usize {
        match events.next().await {
            Event::Dropped(id) => assert!(dropped.insert(id)),
            Event::Done(id) => panic!("handler {id} completed instead of being dropped"),
            _ => {}
        }
    }
    echo(&mut conn, 1000).await;

    for e in events.drain() {
        assert!(
            !matches!(e, Event::Done(ref id) if *id != RequestId::from(1000)),
            "{e:?}"
        );
    }
}

/// One HTTP/2 frame: length, type, flags, stream id, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The rapid-reset pattern in one write, in raw frames so that every
/// stream is reset before the server can accept it: 100 × (HEADERS of
/// `GET /`, RST_STREAM CANCEL), then a PING. hyper's default allowance (20)
/// answers with `GOAWAY ENHANCE_YOUR_CALM`; `serve` answers the PING.
#[tokio::test]
async fn h2_streams_reset_before_accept_keep_the_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    const GOAWAY: u8 = 0x7;

    let shutdown = CancellationToken::new();
    let (addr, _tools, _events, _server) = start(&shutdown).await;
    let mut burst = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    burst.extend(frame(SETTINGS, 0, 0, &[]));
    for i in 0..STREAMS as u32 {
        let stream = 2 * i + 1;
        // HPACK static table: :method GET, :scheme http, :path /.
        burst.extend(frame(HEADERS, 0x5, stream, &[0x82, 0x86, 0x84]));
        burst.extend(frame(RST_STREAM, 0, stream, &8u32.to_be_bytes())); // CANCEL
    }
    burst.extend(frame(PING, 0, 0, b"stillher"));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&burst).await.unwrap();

    bounded(async {
        loop {
            let mut head = [0u8; 9];
            tcp.read_exact(&mut head)
                .await
                .expect("the server closed the connection");
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await.unwrap();
            match (head[3], head[4]) {
                (GOAWAY, _) => panic!("GOAWAY {:?}", String::from_utf8_lossy(&payload[8..])),
                (PING, 0x1) => return assert_eq!(payload, b"stillher"),
                _ => {}
            }
        }
    })
    .await;
}

#[tokio::test]
async fn graceful_shutdown_returns_once_requests_in_flight_end() {
    let shutdown = CancellationToken::new();
    let (addr, tools, mut events, server) = start(&shutdown).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;
    let call = conn.send(post(
        &tool_call(1, "wait_release", json!({})),
        &modern_headers("wait_release"),
    ));
    let call = tokio::spawn(call);
    events.until(|e| matches!(e, Event::Started(_))).await;

    shutdown.cancel();
    tokio::task::yield_now().await;
    assert!(!server.is_finished(), "returned with a request in flight");

    tools.release.notify_one();
    let res = bounded(call)
        .await
        .unwrap()
        .expect("the call in flight completed");
    assert!(text(res).await.contains("released"));
    events
        .until(|e| matches!(e, Event::Done(id) if *id == RequestId::from(1)))
        .await;
    bounded(server).await.unwrap();
}

#[tokio::test]
async fn with_a_drain_grace_serve_lets_a_request_in_flight_finish() {
    let shutdown = CancellationToken::new();
    let (tools, mut events) = Tools::new();
    let config = StreamableHttpService::new(())
        .shutdown(shutdown.clone())
        .drain_grace(std::time::Duration::from_secs(3600));
    let svc = tower::Layer::layer(&config, tools.service());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve(listener, svc, shutdown.clone()));

    let mut conn = Conn::connect(addr, Proto::H1).await;
    let call = tokio::spawn(conn.send(post(
        &tool_call(1, "wait_release", json!({})),
        &modern_headers("wait_release"),
    )));
    events.until(|e| matches!(e, Event::Started(_))).await;

    // Without a grace the shutdown would cancel the call (503); with one it
    // runs on, and serve waits for it.
    shutdown.cancel();
    tokio::task::yield_now().await;
    assert!(!server.is_finished(), "returned with a request in flight");
    tools.release.notify_one();
    let res = bounded(call).await.unwrap().expect("answered");
    assert_eq!(res.status(), 200);
    assert!(text(res).await.contains("released"));
    bounded(server).await.unwrap();
}

/// The adapter hands out the MCP service it wraps: shared, mutable, and
/// back by value.
#[test]
fn the_adapter_reaches_its_mcp_service() {
    let mut adapter = StreamableHttpService::new(1u8);
    *adapter.get_mut() += 1;
    assert_eq!((*adapter.get_ref(), adapter.into_inner()), (2, 2));
}
