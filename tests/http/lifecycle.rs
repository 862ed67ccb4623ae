//! The server's lifecycle: work it runs outside a request's response
//! (a 2025-era handler whose client hung up) is reached by shutdown and the
//! drain grace, counted by the in-flight bound, and waited for by `serve`;
//! a `subscriptions/listen` the server tears down ends with
//! `notifications/cancelled`; every connection state has a timer.
//!
//! Time is paused in every test. The adapter is called directly where no
//! socket is needed; `serve` tests run the server in the test's runtime on
//! loopback sockets, where the paused clock advances only once no socket
//! event is ready (tokio polls the sockets before it moves the clock).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::http::{serve, Server, StreamableHttpService};
use tower_mcp_cancel::{BoxError, CancelReason, Cancelled, McpRequest};

use crate::support::drain::{service, GRACE};
use crate::support::http::{tool_call, Tools};

/// A 2025-era POST (`MCP-Protocol-Version: 2025-11-25`, no modern `_meta`).
fn legacy_post(id: i64, method: &str, params: Value) -> Request<Full<Bytes>> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(Full::new(serde_json::to_vec(&body).unwrap().into()))
        .unwrap()
}

/// A 2026 POST of `body` (which carries its `_meta`).
fn modern_post(body: &Value) -> Request<Full<Bytes>> {
    let method = body["method"].as_str().unwrap();
    let mut b = Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = body["params"]["name"].as_str() {
        b = b.header("mcp-name", name);
    }
    b.body(Full::new(serde_json::to_vec(body).unwrap().into()))
        .unwrap()
}

/// Starts a request whose response is awaited in a task: aborting the task
/// is the client hanging up.
fn start<S>(svc: &S, req: Request<Full<Bytes>>) -> tokio::task::JoinHandle<(StatusCode, String)>
where
    S: Service<
            Request<Full<Bytes>>,
            Response = Response<tower_mcp_cancel::transport::http::ResponseBody>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let svc = svc.clone();
    tokio::spawn(async move {
        let res = svc.oneshot(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    })
}

/// The JSON-RPC messages of an SSE body (its `data:` lines) or a JSON body.
fn messages(body: &str) -> Vec<Value> {
    let data: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if data.is_empty() {
        serde_json::from_str(body).into_iter().collect()
    } else {
        data
    }
}

// ---------------------------------------------------------------------------
// subscriptions/listen torn down by the server

#[tokio::test(start_paused = true)]
async fn a_listen_torn_down_by_the_server_ends_its_stream_with_notifications_cancelled() {
    let mcp = service_fn(|req: McpRequest| async move {
        assert_eq!(req.method(), "subscriptions/listen");
        Err::<Value, BoxError>(Box::new(Cancelled::new(CancelReason::Other(
            "subscription closed by the server".into(),
        ))))
    });
    let svc = StreamableHttpService::new(mcp);
    let listen = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
    "notifications": {"toolsListChanged": true},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let (status, body) = start(&svc, modern_post(&listen)).await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let last = messages(&body).pop().unwrap_or(Value::Null);
    assert_eq!(last["method"], "notifications/cancelled", "{body}");
    assert_eq!(last["params"]["requestId"], 7, "{body}");
    assert!(last["params"]["reason"].is_string(), "{body}");
    assert!(last.get("id").is_none(), "a notification: {body}");
}

#[tokio::test]
async fn the_http_client_ends_a_listen_the_server_tore_down_as_cancelled() {
    use tower_mcp_cancel::transport::http::HttpClient;
    let mcp = service_fn(|req: McpRequest| async move {
        if req.method() == "subscriptions/listen" {
            return Err::<Value, BoxError>(Box::new(Cancelled::new(CancelReason::Other(
                "subscription closed by the server".into(),
            ))));
        }
        Ok(json!({"resultType": "complete"}))
    });
    let shutdown = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        StreamableHttpService::new(mcp),
        shutdown.clone(),
    ));

    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let listen = McpRequest::new(7, "subscriptions/listen")
        .with_params(json!({"notifications": {"toolsListChanged": true}}));
    let err = tokio::time::timeout(crate::support::http::WAIT, client.oneshot(listen))
        .await
        .expect("the call ended")
        .expect_err("a torn-down listen has no result");
    let cancelled = err
        .downcast_ref::<Cancelled>()
        .unwrap_or_else(|| panic!("not Cancelled: {err}"));
    assert!(
        matches!(cancelled.reason(), CancelReason::Peer(Some(r)) if r.contains("subscription closed")),
        "{cancelled:?}"
    );
    shutdown.cancel();
}
