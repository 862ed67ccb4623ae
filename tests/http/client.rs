//! `HttpClient` against the server adapter over loopback: both response
//! shapes, headers the server validates, typed errors, ids and progress
//! tokens unique among calls in flight, and the `mcp_call` example's
//! handling of refusals. Its cancelling is [`crate::client_cancel`]'s.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::time::Duration;

use http_support::*;
use serde_json::json;
use tower::{Service, ServiceExt};
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::transport::http::{HttpClient, HttpClientError};
use tower_mcp_cancel::McpRequest;

pub(crate) fn client(addr: std::net::SocketAddr, proto: Proto) -> HttpClient {
    let b = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap());
    match proto {
        Proto::H1 => b.build(),
        Proto::H2 => b.http2_prior_knowledge().build(),
    }
}

pub(crate) fn call(name: &str, args: serde_json::Value) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": name, "arguments": args}))
}

#[tokio::test]
async fn both_response_shapes_and_base64_names() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, _events) = serve_tools(proto, |s| s).await;
        let mut c = client(addr, proto);
        let r = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("echo", json!({"text": "hi"}))),
        )
        .await
        .unwrap();
        assert_eq!(r["content"][0]["text"], "hi");
        let r = bounded(c.ready().await.unwrap().call(call("notify", json!({}))))
            .await
            .unwrap();
        assert_eq!(r["notified"], true, "answer read from the SSE stream");
        // A name outside the header-safe set goes Base64; the server decodes
        // it before comparing (it would answer 400 otherwise).
        let r = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("héllo wörld", json!({"text": "ü"}))),
        )
        .await
        .unwrap();
        assert_eq!(r["content"][0]["text"], "ü");
        // Caller-chosen ids are kept.
        let req = McpRequest::new("mine", "tools/call")
            .with_params(json!({"name": "echo", "arguments": {"text": "x"}}));
        assert!(bounded(c.ready().await.unwrap().call(req)).await.is_ok());
    }
}

#[tokio::test]
async fn modern_errors_are_typed() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let mut c = client(addr, Proto::H1);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(McpRequest::without_id("no/such")),
    )
    .await
    .unwrap_err();
    let e = err.downcast_ref::<ErrorObject>().expect("typed error");
    assert_eq!(e.code, ErrorObject::METHOD_NOT_FOUND);

    // A 400 from header validation comes back as its JSON-RPC error.
    let mut old = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .protocol_version("2099-01-01")
        .build();
    let err = bounded(old.ready().await.unwrap().call(call("echo", json!({}))))
        .await
        .unwrap_err();
    let e = err.downcast_ref::<ErrorObject>().expect("typed error");
    assert_eq!(e.code, ErrorObject::UNSUPPORTED_PROTOCOL_VERSION);
    assert_eq!(e.data.as_ref().unwrap()["supported"][0], "2026-07-28");

    // A non-MCP 404 (an empty router) is an HTTP status error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
    let mut wrong = HttpClient::new(format!("http://{other}/mcp").parse().unwrap());
    let err = bounded(wrong.ready().await.unwrap().call(call("echo", json!({}))))
        .await
        .unwrap_err();
    match err.downcast_ref::<HttpClientError>() {
        Some(HttpClientError::Status { status, .. }) => assert_eq!(*status, 404),
        other => panic!("expected a status error, got {other:?} ({err})"),
    }
}

/// A `tools/call` of `name` with `args`, under the caller's `id` and
/// progress token `token`.
fn call_as(id: i64, token: &str, name: &str, args: serde_json::Value) -> McpRequest {
    McpRequest::new(id, "tools/call")
        .with_params(json!({"name": name, "arguments": args, "_meta": {"progressToken": token}}))
}

fn refused_as_duplicate(out: Result<serde_json::Value, tower::BoxError>, what: &str) {
    let err = out.expect_err(what);
    let e = err
        .downcast_ref::<ErrorObject>()
        .unwrap_or_else(|| panic!("{what}: not a JSON-RPC error: {err}"));
    assert_eq!(e.code, ErrorObject::INVALID_REQUEST, "{what}: {err}");
    // The client's refusal, not the server's (a 2025 session refuses a
    // duplicate id too, as "Invalid Request: …"): it was never sent.
    assert!(
        e.message.starts_with("a request with id") || e.message.starts_with("progress token"),
        "{what}: {err}"
    );
}

/// Ids and progress tokens are unique among one client's calls in flight:
/// with a call under id 1 and token "p" on the server, a second call with
/// id 1, or with token "p", is refused (`-32600`) without being sent; an id
/// the client assigns is not 1; once the first call is answered, both are
/// free again. Run against a modern server here, and against a 2025 one in
/// its session in `legacy_client`.
pub(crate) async fn ids_and_tokens_stay_unique(
    mut c: HttpClient,
    tools: &Tools,
    events: &mut Events,
) {
    let first = tokio::spawn(
        c.clone()
            .oneshot(call_as(1, "p", "wait_release", json!({}))),
    );
    let started = events.until(|e| matches!(e, Event::Started(_))).await;
    assert_eq!(started.last(), Some(&Event::Started(RequestId::Number(1))));

    let same_id = bounded(c.ready().await.unwrap().call(call_as(
        1,
        "q",
        "echo",
        json!({"text": "same id"}),
    )))
    .await;
    refused_as_duplicate(same_id, "the same id");
    let same_token = bounded(c.ready().await.unwrap().call(call_as(
        2,
        "p",
        "echo",
        json!({"text": "same token"}),
    )))
    .await;
    refused_as_duplicate(same_token, "the same token");

    // An id the client assigns avoids the one in flight.
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "assigned"}))),
    )
    .await
    .unwrap();
    let done = events.until(|e| matches!(e, Event::Done(_))).await;
    let Some(Event::Done(assigned)) = done.last() else {
        unreachable!()
    };
    assert_ne!(assigned, &RequestId::Number(1), "{done:?}");

    tools.release.notify_one();
    bounded(first).await.unwrap().unwrap();
    let again = bounded(c.ready().await.unwrap().call(call_as(
        1,
        "p",
        "echo",
        json!({"text": "free again"}),
    )))
    .await
    .unwrap();
    assert_eq!(again["content"][0]["text"], "free again");
}

#[tokio::test]
async fn ids_and_tokens_are_unique_among_calls_in_flight() {
    let (addr, tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    ids_and_tokens_stay_unique(client(addr, Proto::H1), &tools, &mut events).await;
}

use crate::support::example::example;

/// `mcp_call --url` against an endpoint it cannot reach fails once, saying
/// why: a transport error is not the spec's signal of a 2025 server, so it
/// does not "try initialize" (which would only fail the same way again).
#[tokio::test]
async fn mcp_call_does_not_try_initialize_after_a_transport_error() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cmd = tokio::process::Command::new(example("mcp_call"));
    cmd.args(["--url", &format!("http://127.0.0.1:{closed}/mcp"), "echo"])
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("mcp_call exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("trying initialize"), "{stderr}");
    assert_eq!(
        stderr.matches("connection refused").count(),
        1,
        "one failure, said once: {stderr}"
    );
}

/// Runs `mcp_call` with `args` (bounded): its exit status, stdout, stderr.
async fn mcp_call(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut cmd = tokio::process::Command::new(example("mcp_call"));
    cmd.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("mcp_call exits")
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A modern server that does not implement `server/discover` answers it
/// with a modern `-32601`: `mcp_call --url` stays modern and calls the tool,
/// instead of sending it an `initialize` it cannot know.
#[tokio::test]
async fn mcp_call_stays_modern_with_a_server_without_server_discover() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let url = format!("http://{addr}/mcp");
    let (status, out, err) = mcp_call(&["--url", &url, "echo", "text=modern"]).await;
    assert!(status.success(), "{out}\n{err}");
    assert!(out.contains("\"modern\""), "{out}");
    assert!(!err.contains("initialize"), "{err}");
}

/// A refusal of the call that is not the spec's `400` is reported once, as
/// the refusal: no `initialize`, no second attempt.
#[tokio::test]
async fn mcp_call_reports_a_refusal_without_trying_initialize() {
    let (addr, seen, _events) = crate::legacy_client::refusing_modern_server().await;
    let url = format!("http://{addr}/mcp");
    let (status, out, err) = mcp_call(&["--url", &url, "refuse-401"]).await;
    assert!(!status.success(), "{out}\n{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(!err.contains("trying initialize"), "{err}");
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|m| m == "initialize"), "{seen:?}");
}

/// The client never sends a header the server compares with the body twice:
/// an extra header of the builder's that names one the transport writes
/// (`Mcp-Method`, `Mcp-Name`, `MCP-Protocol-Version`, `Content-Type`, …) is
/// not added, so the request stays one the server accepts.
#[tokio::test]
async fn extra_headers_never_repeat_the_transport_headers() {
    use http::{HeaderName, HeaderValue};
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let mut b = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap());
    for (k, v) in [
        ("mcp-method", "tools/list"),
        ("mcp-name", "delete_everything"),
        ("mcp-protocol-version", "2025-11-25"),
        ("content-type", "text/plain"),
        ("accept", "text/html"),
        ("mcp-session-id", "x"),
        ("x-trace", "1"),
    ] {
        b = b.header(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
    let mut c = b.build();
    let r = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "hi"}))),
    )
    .await;
    assert_eq!(r.unwrap()["content"][0]["text"], "hi");
}

/// A server's text in an error the client returns is bounded and clean: a
/// huge `Content-Type` on a 200 is quoted through the crate's sanitizer.
#[tokio::test]
async fn a_huge_server_content_type_is_bounded_in_the_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let _ = s.read(&mut buf).await.unwrap();
        let ct = format!("text/{}", "x".repeat(20_000));
        let res = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        );
        s.write_all(res.as_bytes()).await.unwrap();
    });
    let mut c = client(addr, Proto::H1);
    let err = bounded(
        c.ready()
            .await
            .unwrap()
            .call(call("echo", json!({"text": "hi"}))),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("content type"), "{text}");
    assert!(text.len() < 1024, "an error of {} bytes", text.len());
    server.await.unwrap();
}

/// A server's body quoted in `HttpClientError::Status` goes through the
/// crate's sanitizer: at most 256 characters and a `…`, no control
/// characters — whether the body was read by the first (probing) request
/// (at most 64 KiB of it) or by a later one (1 MB here).
#[tokio::test]
async fn a_hostile_status_body_is_bounded_and_clean_in_the_error() {
    for (size, fallback) in [(60_000, true), (1 << 20, false)] {
        let mut body = b"bad\n\x1b[31mred\0\r\n".to_vec();
        body.resize(size, b'\n');
        body.extend_from_slice(b"\x1b]0;title\x07end");
        let (addr, seen) = raw_server(Some(raw_response(500, &body))).await;
        let mut c = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
            .stateful_fallback(fallback)
            .build();
        let err = bounded(
            c.ready()
                .await
                .unwrap()
                .call(call("echo", json!({"text": "hi"}))),
        )
        .await
        .unwrap_err();
        let Some(HttpClientError::Status { status, body }) = err.downcast_ref::<HttpClientError>()
        else {
            panic!("{size}: not a status error: {err}");
        };
        assert_eq!(status.as_u16(), 500);
        assert!(body.starts_with("bad  [31mred"), "{size}: {body:?}");
        assert!(body.chars().count() <= 257, "{size}: {} chars", body.len());
        assert!(!body.chars().any(char::is_control), "{size}: {body:?}");
        let text = err.to_string();
        assert!(
            text.len() < 1024,
            "{size}: an error of {} bytes",
            text.len()
        );
        assert!(!text.chars().any(char::is_control), "{size}: {text:?}");
        assert_eq!(seen.lock().unwrap().len(), 1, "{size}: one request");
    }
}
