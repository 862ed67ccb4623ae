//! stdio, both sides: completed, error, cancelled by the peer, timeout
//! (deadline, idle, maximum), transport closed, shutdown, caller dropped.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{Cancellation, McpRequest, ProgressResetLayer, TimeoutLayer};

use crate::capture::{assert_field, Capture};
use crate::support::stdio::pipe;

const SERVER: &str = "mcp.server.request";
const CLIENT: &str = "mcp.client.request";

#[tokio::test(start_paused = true)]
async fn server_spans_carry_the_request_and_each_outcome() {
    let (cap, _guard) = Capture::install();
    let (mut peer, r, w) = pipe(64 * 1024);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(StdioServer::new().shutdown(shutdown.clone()).serve(
        crate::server(),
        r,
        w,
    ));

    peer.request(json!(1), "ok", json!({})).await;
    peer.until_response(json!(1)).await;
    let ok = cap.ended(SERVER, "1").await;
    assert_field(&ok, "mcp.request.outcome", "completed");
    assert_field(&ok, "mcp.method.name", "ok");
    assert_field(&ok, "rpc.system.name", "jsonrpc");
    assert_field(&ok, "network.transport", "pipe");
    assert_field(&ok, "mcp.transport", "stdio");
    assert_field(&ok, "otel.kind", "server");
    assert!(!ok.contains_key("error.type"), "{ok:?}");
    assert_field(&ok, "mcp.era", "legacy");

    peer.request(json!(11), "tools/call", json!({"name": "get\nweather"}))
        .await;
    peer.until_response(json!(11)).await;
    let tool = cap.ended(SERVER, "11").await;
    assert_field(&tool, "gen_ai.tool.name", "get weather");
    assert_field(&tool, "gen_ai.operation.name", "execute_tool");
    assert_field(&tool, "otel.name", "tools/call get weather");
    assert_field(&tool, "mcp.era", "legacy");

    // A 2026 request says its revision in `_meta`.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    peer.request(json!(12), "ok", json!({"_meta": meta})).await;
    peer.until_response(json!(12)).await;
    assert_field(&cap.ended(SERVER, "12").await, "mcp.era", "2026");
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"});
    peer.request(json!(13), "ok", json!({"_meta": meta})).await;
    peer.until_response(json!(13)).await;
    assert_field(&cap.ended(SERVER, "13").await, "mcp.era", "legacy");
    assert!(!ok.contains_key("gen_ai.tool.name"));

    peer.request(json!("two"), "fail", json!({})).await;
    peer.until_response(json!("two")).await;
    let fail = cap.ended(SERVER, "two").await;
    assert_field(&fail, "mcp.request.outcome", "error");
    assert_field(&fail, "error.type", "-32602");
    assert_field(&fail, "rpc.response.status_code", "-32602");
    assert_field(&fail, "otel.status_code", "ERROR");

    peer.request(json!(3), "hang", json!({})).await;
    peer.sync(json!(30)).await; // 3 is running
    peer.cancel(json!(3), "user\npressed stop").await;
    let cancelled = cap.ended(SERVER, "3").await;
    assert_field(&cancelled, "mcp.request.outcome", "cancelled");
    assert_field(&cancelled, "mcp.cancel.reason", "user pressed stop");
    assert!(
        !cancelled.contains_key("error.type"),
        "a cancellation is not a failure: {cancelled:?}"
    );

    peer.request(json!(4), "hang", json!({})).await;
    // The paused clock runs to the server's 10 s deadline.
    peer.until_response(json!(4)).await;
    let timed_out = cap.ended(SERVER, "4").await;
    assert_field(&timed_out, "mcp.request.outcome", "timeout_deadline");
    assert_field(&timed_out, "error.type", "timeout");

    peer.request(json!(5), "hang", json!({})).await;
    peer.sync(json!(50)).await;
    shutdown.cancel();
    let shut = cap.ended(SERVER, "5").await;
    assert_field(&shut, "mcp.request.outcome", "shutdown");
    assert!(!shut.contains_key("error.type"));
    served.await.unwrap().unwrap();

    // One `request ended` line per request (the two pings included).
    let lines = cap.end_lines(SERVER);
    assert_eq!(lines.len(), 10, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains_key("duration_ms")));
    let deadline = lines
        .iter()
        .find(|l| l["outcome"] == "timeout_deadline")
        .unwrap();
    assert_eq!(deadline["duration_ms"], "10000", "the paused clock's 10 s");
}

#[tokio::test(start_paused = true)]
async fn end_of_input_is_transport_closed() {
    let (cap, _guard) = Capture::install();
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(StdioServer::new().serve(crate::server(), r, w));
    peer.request(json!(1), "hang", json!({})).await;
    peer.sync(json!(2)).await;
    peer.close().await;
    served.await.unwrap().unwrap();
    let closed = cap.ended(SERVER, "1").await;
    assert_field(&closed, "mcp.request.outcome", "transport_closed");
}

#[tokio::test(start_paused = true)]
async fn client_spans_tell_the_timeouts_and_a_dropped_call_apart() {
    let (cap, _guard) = Capture::install();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let (cr, cw) = tokio::io::split(client_io);
    let served = tokio::spawn(StdioServer::new().serve(crate::server(), sr, sw));
    let client = StdioClient::new(cr, cw);

    let call = |req: McpRequest| client.clone().oneshot(req);
    call(McpRequest::new(1, "ok")).await.unwrap();
    let ok = cap.ended(CLIENT, "1").await;
    assert_field(&ok, "mcp.request.outcome", "completed");
    assert_field(&ok, "otel.kind", "client");
    assert_field(&ok, "network.transport", "pipe");

    call(McpRequest::new(2, "fail")).await.unwrap_err();
    let fail = cap.ended(CLIENT, "2").await;
    assert_field(&fail, "mcp.request.outcome", "error");
    assert_field(&fail, "error.type", "-32602");

    let deadline = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(client.clone());
    // The reason travels in the request's cancellation, which the layer
    // cancels before it drops the call.
    deadline
        .oneshot(McpRequest::new(3, "hang").with_cancellation(Cancellation::new()))
        .await
        .unwrap_err();
    let t = cap.ended(CLIENT, "3").await;
    assert_field(&t, "mcp.request.outcome", "timeout_deadline");
    assert_field(&t, "error.type", "timeout");
    // The server's side of it: cancelled by its peer, with the reason.
    let s = cap.ended(SERVER, "3").await;
    assert_field(&s, "mcp.request.outcome", "cancelled");
    assert_field(&s, "mcp.cancel.reason", "request timed out after 1s");

    let idle = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(2)))
        .service(client.clone());
    idle.oneshot(McpRequest::new(4, "hang")).await.unwrap_err();
    assert_field(
        &cap.ended(CLIENT, "4").await,
        "mcp.request.outcome",
        "timeout_idle",
    );

    let max = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_secs(5)).max(Duration::from_secs(1)))
        .service(client.clone());
    max.oneshot(McpRequest::new(5, "hang")).await.unwrap_err();
    assert_field(
        &cap.ended(CLIENT, "5").await,
        "mcp.request.outcome",
        "timeout_max",
    );

    let mut svc = client.clone();
    let pending = svc.ready().await.unwrap().call(McpRequest::new(6, "hang"));
    tokio::select! {
        biased;
        _ = pending => panic!("hang answered"),
        _ = std::future::ready(()) => {} // the call is dropped here
    }
    let dropped = cap.ended(CLIENT, "6").await;
    assert_field(&dropped, "mcp.request.outcome", "caller_dropped");
    assert!(!dropped.contains_key("error.type"));

    client.shutdown().await.unwrap();
    served.await.unwrap().unwrap();
}
