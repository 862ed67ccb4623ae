//! `HttpClient` against a 2025-era server (our adapter with legacy
//! sessions, behind a front that refuses modern requests the way
//! `server-everything` does: `400`, an error without an id): the modern
//! request first, the fallback to `initialize`, the session kept; `close`
//! DELETEs the session; a session the server ended is initialized again.
//! And a modern server is never taken for a legacy one: only a `400`
//! without a modern error is the signal, never another status or a
//! transport error, and not at all with `stateful_fallback(false)`.
//! Cancelling in a session is [`crate::legacy_client_cancel`]'s.
#![cfg(feature = "http")]

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tower::BoxError;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::transport::http::{
    HttpClient, ServerEra, SessionLimits, StreamableHttpService,
};
use tower_mcp_cancel::McpRequest;

use crate::support::http::{bounded, serve, serve_tools, Events, Proto, Tools};

/// A legacy-only server on loopback: modern requests (they carry
/// `Mcp-Method`) get `400` with an id-less error; the rest goes to the
/// adapter with legacy sessions. `initialize` is answered as 2025 servers do.
pub(crate) async fn legacy_server() -> (std::net::SocketAddr, Tools, Events) {
    legacy_server_with(Front::default()).await
}

/// [`legacy_server`], whose front, given `hold`, reports each
/// `notifications/cancelled` that reaches it on `hold.0` and passes it on
/// only when `hold.1` is notified.
pub(crate) async fn legacy_server_holding_cancels(
    hold: Option<(
        tokio::sync::mpsc::UnboundedSender<()>,
        std::sync::Arc<tokio::sync::Notify>,
    )>,
) -> (std::net::SocketAddr, Tools, Events) {
    legacy_server_with(Front {
        hold: hold.map(|(arrived, release)| ("notifications/cancelled", arrived, release)),
        ..Front::default()
    })
    .await
}

/// What the front of [`legacy_server_with`] does besides passing requests
/// on.
#[derive(Clone, Default)]
pub(crate) struct Front {
    /// Each message of this method is reported on the sender when it
    /// reaches the front, and passed on only when the `Notify` is notified.
    pub(crate) hold: Option<(
        &'static str,
        tokio::sync::mpsc::UnboundedSender<()>,
        std::sync::Arc<tokio::sync::Notify>,
    )>,
    /// Each body that reaches the front (parsed), reported.
    pub(crate) bodies: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    /// The status the adapter answered each `DELETE` with, reported.
    pub(crate) deletes: Option<tokio::sync::mpsc::UnboundedSender<u16>>,
    /// Modern requests are refused with an error that carries their own id
    /// (`-32600`), as some 2025 servers do, instead of an id-less one.
    pub(crate) refuse_with_id: bool,
    /// The adapter's session limits.
    pub(crate) limits: SessionLimits,
}

/// A legacy-only server (see [`legacy_server`]) behind `front`.
pub(crate) async fn legacy_server_with(front: Front) -> (std::net::SocketAddr, Tools, Events) {
    let (tools, events) = Tools::new();
    let inner = tools.service();
    let mcp = service_fn(move |req: McpRequest| {
        let inner = inner.clone();
        async move {
            if req.method() == "initialize" {
                return Ok::<_, BoxError>(json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "legacy", "version": "0"},
                }));
            }
            inner.oneshot(req).await
        }
    });
    let mcp = tower::util::BoxCloneService::new(mcp);
    let adapter = StreamableHttpService::new(mcp).stateful_sessions(front.limits);
    let front = service_fn(move |req: Request<Incoming>| {
        let adapter = adapter.clone();
        let front = front.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let json: Value = serde_json::from_slice(&body).unwrap_or_default();
            if let Some(bodies) = &front.bodies {
                let _ = bodies.send(json.clone());
            }
            if let Some((method, arrived, release)) = &front.hold {
                if json["method"] == *method {
                    let _ = arrived.send(());
                    release.notified().await;
                }
            }
            let delete = parts.method == http::Method::DELETE;
            let req = Request::from_parts(parts, Full::new(body));
            if req.headers().contains_key("mcp-method") {
                let id = if front.refuse_with_id {
                    json["id"].clone()
                } else {
                    Value::Null
                };
                let code = if front.refuse_with_id { -32600 } else { -32000 };
                let body = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": code, "message": "Bad Request: Server not initialized"}});
                let res = Response::builder()
                    .status(400)
                    .header("content-type", "application/json")
                    .body(
                        Full::new(Bytes::from(body.to_string()))
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                    .unwrap();
                return Ok::<_, Infallible>(res);
            }
            let fut: std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Response<_>, Infallible>> + Send>,
            > = Box::pin(adapter.oneshot(req));
            let res = match fut.await {
                Ok(res) => res,
                Err(never) => match never {},
            };
            if let (true, Some(deletes)) = (delete, &front.deletes) {
                let _ = deletes.send(res.status().as_u16());
            }
            Ok(res.map(|b| b.map_err(BoxError::from).boxed_unsync()))
        }
    });
    let addr = serve(front, Proto::H1, tools.recorder()).await;
    (addr, tools, events)
}

pub(crate) fn client(addr: std::net::SocketAddr) -> HttpClient {
    HttpClient::new(format!("http://{addr}/mcp").parse().unwrap())
}

pub(crate) fn call(name: &str, args: Value) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": name, "arguments": args}))
}

pub(crate) fn session_of(c: &HttpClient) -> String {
    match c.server_era() {
        ServerEra::Stateful {
            protocol_version,
            session_id,
        } => {
            assert_eq!(protocol_version, "2025-06-18");
            session_id.expect("a session")
        }
        other => panic!("not legacy: {other:?}"),
    }
}

pub(crate) async fn raw_status(
    addr: std::net::SocketAddr,
    method: http::Method,
    session: &str,
) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}});
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let res = bounded(client.request(req)).await.unwrap();
    let status = res.status().as_u16();
    let _ = res.into_body().collect().await;
    status
}

#[tokio::test]
async fn falls_back_to_initialize_and_keeps_the_session() {
    let (addr, _tools, _events) = legacy_server().await;
    let mut c = client(addr);
    assert_eq!(c.server_era(), ServerEra::Unknown);
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "old"}))),
    )
    .await
    .unwrap();
    assert_eq!(r["content"][0]["text"], "old");
    let session = session_of(&c);
    // Later calls go straight to the session (no second initialize).
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "again"}))),
    )
    .await
    .unwrap();
    assert_eq!(r["content"][0]["text"], "again");
    assert_eq!(session_of(&c), session);
}

#[tokio::test]
async fn close_deletes_the_session_and_an_ended_session_is_renewed() {
    let (addr, _tools, _events) = legacy_server().await;
    let mut c = client(addr);
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    let first = session_of(&c);
    bounded(c.close()).await.unwrap();
    assert_eq!(c.server_era(), ServerEra::Unknown);
    assert_eq!(
        raw_status(addr, http::Method::POST, &first).await,
        404,
        "deleted"
    );

    // The server ends the session behind the client's back: the next call
    // initializes again and goes through.
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "y"}))),
    )
    .await
    .unwrap();
    let second = session_of(&c);
    assert_ne!(first, second);
    assert_eq!(raw_status(addr, http::Method::DELETE, &second).await, 200);
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "z"}))),
    )
    .await
    .unwrap();
    assert_eq!(r["content"][0]["text"], "z");
    let third = session_of(&c);
    assert_ne!(second, third);
}

#[tokio::test]
async fn the_last_clone_dropped_deletes_the_session() {
    let (addr, _tools, _events) = legacy_server().await;
    let mut c = client(addr);
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    let session = session_of(&c);
    drop(c);
    // The DELETE is spawned; poll the server until it took effect.
    bounded(async {
        while raw_status(addr, http::Method::POST, &session).await != 404 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// A modern server's answers — results, and errors to the request
/// itself — keep the client modern: no `initialize` is ever sent.
#[tokio::test]
async fn a_modern_server_stays_modern() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let mut c = client(addr);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(McpRequest::without_id("no/such")),
    )
    .await
    .unwrap_err();
    assert!(err.is::<tower_mcp_cancel::jsonrpc::ErrorObject>(), "{err}");
    assert_eq!(c.server_era(), ServerEra::Stateless);
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap();
    assert_eq!(c.server_era(), ServerEra::Stateless);
}

/// A caller's 2026 `_meta` (protocol version, client info) is left out of
/// a legacy request: a dual-era server would otherwise take the body for a
/// modern request and refuse its 2025 header. A progress token stays.
#[tokio::test]
async fn legacy_requests_carry_no_2026_meta() {
    let (addr, _tools, _events) = legacy_server().await;
    let mut c = client(addr);
    let req = McpRequest::without_id("tools/call").with_params(json!({
        "name": "echo",
        "arguments": {"text": "meta"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }
    }));
    let r = bounded(c.ready().await.unwrap().call(req)).await.unwrap();
    assert_eq!(r["content"][0]["text"], "meta");
    session_of(&c);
}

/// A modern server (the adapter, 2026 only) behind a front that refuses a
/// `tools/call` of the tool `refuse-<status>` with that status and an id-less
/// JSON-RPC error (what a gateway, an auth layer or a rate limiter sends);
/// every JSON-RPC method that reaches the front is recorded.
pub(crate) async fn refusing_modern_server() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    Events,
) {
    let (tools, events) = Tools::new();
    let adapter = StreamableHttpService::new(tools.service());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let methods = seen.clone();
    let front = service_fn(move |req: Request<Incoming>| {
        let adapter = adapter.clone();
        let methods = methods.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let json: Value = serde_json::from_slice(&body).unwrap_or_default();
            if let Some(m) = json["method"].as_str() {
                methods.lock().unwrap().push(m.to_owned());
            }
            let refuse = json["params"]["name"]
                .as_str()
                .and_then(|n| n.strip_prefix("refuse-"))
                .and_then(|s| s.parse::<u16>().ok());
            if let Some(status) = refuse {
                let body =
                    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"refused"}}"#;
                let res = Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(
                        Full::new(Bytes::from(body))
                            .map_err(|never| match never {})
                            .boxed_unsync(),
                    )
                    .unwrap();
                return Ok::<_, Infallible>(res);
            }
            let req = Request::from_parts(parts, Full::new(body));
            let res = match adapter.oneshot(req).await {
                Ok(res) => res,
                Err(never) => match never {},
            };
            Ok(res.map(|b| b.map_err(BoxError::from).boxed_unsync()))
        }
    });
    let addr = serve(front, Proto::H1, tools.recorder()).await;
    (addr, seen, events)
}

/// Only a `400` without a recognized modern error means "2025 server": any
/// other refusal of the first request (`401`, `403`, `404`, `405`, `413`,
/// `429`) is that call's error, no `initialize` is sent, and the client
/// stays modern for the next call.
#[tokio::test]
async fn only_a_400_without_a_modern_error_falls_back_to_initialize() {
    for status in [401u16, 403, 404, 405, 413, 429] {
        let (addr, seen, _events) = refusing_modern_server().await;
        let mut c = client(addr);
        let err = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call(&format!("refuse-{status}"), json!({}))),
        )
        .await
        .unwrap_err();
        // The refusal itself (its JSON-RPC error, or its status), not the
        // failure of an initialize sent after it.
        let refusal = match err.downcast_ref::<tower_mcp_cancel::transport::http::HttpClientError>()
        {
            Some(tower_mcp_cancel::transport::http::HttpClientError::Status {
                status: s, ..
            }) => s.as_u16() == status,
            _ => err
                .downcast_ref::<tower_mcp_cancel::jsonrpc::ErrorObject>()
                .is_some_and(|e| e.message == "refused"),
        };
        assert!(refusal, "{status}: not the refusal itself: {err}");
        assert!(
            !matches!(c.server_era(), ServerEra::Stateful { .. }),
            "{status}: {:?}",
            c.server_era()
        );
        let r = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("echo", json!({"text": "still modern"}))),
        )
        .await
        .unwrap();
        assert_eq!(r["content"][0]["text"], "still modern");
        assert_eq!(c.server_era(), ServerEra::Stateless, "{status}");
        let seen = seen.lock().unwrap().clone();
        assert!(
            !seen.iter().any(|m| m == "initialize"),
            "{status}: the client sent initialize: {seen:?}"
        );
    }
}

/// The adapter's own `413` (a body over its limit) is the call's error: a
/// modern server that refuses one large request is not taken for a 2025
/// one.
#[tokio::test]
async fn a_413_from_a_modern_server_is_the_calls_error() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s.max_body_bytes(2048)).await;
    let mut c = client(addr);
    let big = "x".repeat(4096);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({ "text": big }))),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("Payload Too Large"),
        "the 413 itself, not a failed initialize: {err}"
    );
    assert!(!matches!(c.server_era(), ServerEra::Stateful { .. }));
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "small"}))),
    )
    .await
    .unwrap();
    assert_eq!(r["content"][0]["text"], "small");
    assert_eq!(c.server_era(), ServerEra::Stateless);
}

/// A front on loopback that refuses modern requests like a 2025 server
/// (`400`, an id-less error) and answers `initialize` with `version` as its
/// protocol version; every JSON-RPC method that reaches it is recorded.
async fn legacy_server_answering_version(
    version: Value,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let methods = seen.clone();
    let front = service_fn(move |req: Request<Incoming>| {
        let methods = methods.clone();
        let version = version.clone();
        async move {
            let modern = req.headers().contains_key("mcp-method");
            let body = req
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let json: Value = serde_json::from_slice(&body).unwrap_or_default();
            if let Some(m) = json["method"].as_str() {
                methods.lock().unwrap().push(m.to_owned());
            }
            let (status, body) = if modern {
                (
                    400,
                    json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32000, "message": "Bad Request: Server not initialized"}}),
                )
            } else if json["method"] == "initialize" {
                (
                    200,
                    json!({"jsonrpc": "2.0", "id": json["id"], "result": {
                        "protocolVersion": version,
                        "capabilities": {},
                        "serverInfo": {"name": "hostile", "version": "0"}}}),
                )
            } else {
                (202, Value::Null)
            };
            let bytes = if body.is_null() {
                Bytes::new()
            } else {
                Bytes::from(serde_json::to_vec(&body).unwrap())
            };
            let res = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(bytes))
                .unwrap();
            Ok::<_, Infallible>(res)
        }
    });
    let (recorder, _events) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = serve(front, Proto::H1, recorder).await;
    (addr, seen)
}

/// The protocol version a server's `initialize` answers is quoted in
/// `InvalidResponse` when the client does not speak it: sanitized and
/// bounded (1 MB with a newline, an escape and a NUL here), and the client
/// does not take the session.
#[tokio::test]
async fn an_initialize_version_quoted_in_an_error_is_bounded_and_clean() {
    let version = format!("2025\n\u{1b}[31mforged\u{0}{}\r\n", "9".repeat(1 << 20));
    let (addr, seen) = legacy_server_answering_version(json!(version)).await;
    let mut c = client(addr);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap_err();
    let Some(tower_mcp_cancel::transport::http::HttpClientError::InvalidResponse(text)) =
        err.downcast_ref::<tower_mcp_cancel::transport::http::HttpClientError>()
    else {
        panic!("not an invalid response: {err}");
    };
    assert!(text.contains("2025  [31mforged"), "{text:?}");
    assert!(text.chars().count() < 512, "{} chars", text.len());
    assert!(!text.chars().any(char::is_control), "{text:?}");
    let shown = err.to_string();
    assert!(shown.len() < 1024, "an error of {} bytes", shown.len());
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(!matches!(c.server_era(), ServerEra::Stateful { .. }));
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["tools/call", "initialize"],
        "the modern call, then initialize"
    );
}

/// A transport error is no era signal: the call fails with it, no
/// `initialize` follows, and the client stays in the era it was in. Nobody
/// listening (connection refused), and a server that reads the request and
/// closes the connection without an answer.
#[tokio::test]
async fn a_transport_error_does_not_fall_back_to_initialize() {
    use tower_mcp_cancel::transport::http::HttpClientError;

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut c = client(closed);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<HttpClientError>(),
            Some(HttpClientError::ConnectionRefused { .. })
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("initialize"), "{err}");
    assert_eq!(c.server_era(), ServerEra::Unknown);

    let (addr, seen) = crate::support::http::raw_server(None).await;
    let mut c = client(addr);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await
    .unwrap_err();
    assert!(
        !matches!(
            err.downcast_ref::<HttpClientError>(),
            Some(HttpClientError::Status { .. })
        ),
        "a transport error, not an answer: {err}"
    );
    assert_eq!(c.server_era(), ServerEra::Unknown);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only the call itself: {seen:?}");
    assert!(seen[0].contains("\"tools/call\""), "{seen:?}");
    assert!(
        !seen.iter().any(|r| r.contains("\"initialize\"")),
        "{seen:?}"
    );
}

/// `stateful_fallback(false)`: a `400` without a modern error is the call's
/// own error (the server's JSON-RPC error), no `initialize` is sent, and
/// the client never takes a 2025 session.
#[tokio::test]
async fn without_stateful_fallback_a_400_is_the_calls_error() {
    let (addr, seen) = legacy_server_answering_version(json!("2025-06-18")).await;
    let mut c = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .stateful_fallback(false)
        .build();
    for _ in 0..2 {
        let err = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("echo", json!({"text": "x"}))),
        )
        .await
        .unwrap_err();
        let e = err
            .downcast_ref::<tower_mcp_cancel::jsonrpc::ErrorObject>()
            .unwrap_or_else(|| panic!("the server's error: {err}"));
        assert_eq!(e.message, "Bad Request: Server not initialized");
        assert!(!matches!(c.server_era(), ServerEra::Stateful { .. }));
    }
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["tools/call", "tools/call"],
        "no initialize"
    );

    // The default (on) falls back on the same answer: the test can tell.
    let (addr, seen) = legacy_server_answering_version(json!("2025-06-18")).await;
    let mut c = client(addr);
    let _ = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "x"}))),
    )
    .await;
    assert!(seen.lock().unwrap().iter().any(|m| m == "initialize"));
}
