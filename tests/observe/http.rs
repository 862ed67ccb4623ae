//! Streamable HTTP: the server's span of a request whose client went away
//! (client disconnected), its era (2026 or legacy), and the client's span.

use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};
use tower_mcp_cancel::McpRequest;

use crate::capture::{assert_field, Capture};

const SERVER: &str = "mcp.server.request";

fn post(body: Value, version: &str, method: &str) -> Request<Full<bytes::Bytes>> {
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method)
        .body(Full::new(serde_json::to_vec(&body).unwrap().into()))
        .unwrap()
}

fn modern(id: i64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}})
}

#[tokio::test(start_paused = true)]
async fn a_dropped_response_is_client_disconnected_and_the_era_is_recorded() {
    let (cap, _guard) = Capture::install();
    let svc = StreamableHttpService::new(crate::server());

    let res = svc
        .clone()
        .oneshot(post(modern(1, "ok"), "2026-07-28", "ok"))
        .await
        .unwrap();
    res.into_body().collect().await.unwrap();
    let ok = cap.ended(SERVER, "1").await;
    assert_field(&ok, "mcp.request.outcome", "completed");
    assert_field(&ok, "mcp.era", "2026");
    assert_field(&ok, "network.transport", "tcp");
    assert_field(&ok, "network.protocol.name", "http");
    assert_field(&ok, "mcp.transport", "http");

    let legacy = json!({"jsonrpc": "2.0", "id": 2, "method": "ok"});
    let res = svc
        .clone()
        .oneshot(post(legacy, "2025-06-18", "ok"))
        .await
        .unwrap();
    res.into_body().collect().await.unwrap();
    assert_field(&cap.ended(SERVER, "2").await, "mcp.era", "legacy");

    // The client goes away before the first byte: hyper drops the
    // response future.
    let mut call = Box::pin(
        svc.clone()
            .oneshot(post(modern(3, "hang"), "2026-07-28", "hang")),
    );
    assert!(futures_poll_once(&mut call).await.is_none());
    assert!(cap.span(SERVER, "3").is_some(), "the request is running");
    drop(call);
    let gone = cap.ended(SERVER, "3").await;
    assert_field(&gone, "mcp.request.outcome", "client_disconnected");
    assert!(!gone.contains_key("error.type"));
}

/// Polls `f` once.
async fn futures_poll_once<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut *f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test(flavor = "current_thread")]
async fn the_http_client_span_names_its_era() {
    let (cap, _guard) = Capture::install();
    let app =
        axum::Router::new().route_service("/mcp", StreamableHttpService::new(crate::server()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    client
        .clone()
        .oneshot(McpRequest::new(7, "ok"))
        .await
        .unwrap();
    let c = cap.ended("mcp.client.request", "7").await;
    assert_field(&c, "mcp.request.outcome", "completed");
    assert_field(&c, "mcp.era", "2026");
    assert_field(&c, "network.transport", "tcp");
    let s = cap.ended(SERVER, "7").await;
    assert_field(&s, "mcp.request.outcome", "completed");
}
