//! `HttpClient` against a server whose answers are larger than the client's
//! limit (`max_response_bytes`): a JSON body, one SSE event, in a 2026
//! exchange and in a 2025 session. The call fails with
//! `HttpClientError::ResponseTooLarge`, which names the limit; calls in
//! flight beside it and the next ones are answered as usual. And what the
//! client reads of an answer it does not need (`notifications/initialized`)
//! is bounded too.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tower::{service_fn, BoxError, ServiceExt};
use tower_mcp_cancel::transport::http::{HttpClient, HttpClientError, ServerEra};
use tower_mcp_cancel::McpRequest;

use http_support::{bounded, serve, Proto};

const LIMIT: usize = 64 * 1024;
const BIG: usize = 1 << 20;

type Body = UnsyncBoxBody<Bytes, BoxError>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn response(status: u16, content_type: &str, body: Body) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("mcp-session-id", "s1")
        .body(body)
        .unwrap()
}

fn json_body(v: &Value) -> Body {
    full(v.to_string())
}

/// An SSE stream of `events` (each a JSON message), sent one event per frame.
fn sse(events: Vec<Value>) -> Body {
    let frames = events.into_iter().map(|e| {
        Ok(http_body::Frame::data(Bytes::from(format!(
            "data: {e}\n\n"
        ))))
    });
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

/// `BIG` bytes, then a body that never ends.
fn big_then_stalled() -> Body {
    let big = futures_util::stream::once(async {
        Ok::<_, BoxError>(http_body::Frame::data(Bytes::from(vec![b' '; BIG])))
    });
    StreamBody::new(big.chain(futures_util::stream::pending())).boxed_unsync()
}

/// The answer to a `tools/call` of tool `name`, request `id`.
fn answer(name: &str, id: &Value) -> Response<Body> {
    let pad = "x".repeat(BIG);
    let ok = json!({"jsonrpc": "2.0", "id": id, "result": {"ok": true}});
    match name {
        "big_json" => response(
            200,
            "application/json",
            json_body(&json!({"jsonrpc": "2.0", "id": id, "result": {"pad": pad}})),
        ),
        // No declared length: read up to the limit.
        "big_chunked" => {
            let text = json!({"jsonrpc": "2.0", "id": id, "result": {"pad": pad}}).to_string();
            let (a, b) = text.split_at(text.len() / 2);
            let frames = [a.to_owned(), b.to_owned()]
                .map(|part| Ok(http_body::Frame::data(Bytes::from(part))));
            let body = StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
            response(200, "application/json", body)
        }
        "big_event" => response(
            200,
            "text/event-stream",
            sse(vec![
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}}),
                json!({"jsonrpc": "2.0", "id": id, "result": {"pad": pad}}),
            ]),
        ),
        // Many small events, far more than the limit in all: fine.
        "many_events" => {
            let mut events: Vec<Value> = (0..64)
                .map(|_| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "y".repeat(4096)}}))
                .collect();
            events.push(ok);
            response(200, "text/event-stream", sse(events))
        }
        _ => response(200, "application/json", json_body(&ok)),
    }
}

/// A server that answers by tool name ([`answer`]): a JSON body with its
/// length, one without (chunked), an SSE event, each over the limit; `legacy`: a 2025 one,
/// which refuses 2026 requests with `400` and answers
/// `notifications/initialized` with a body that never ends.
async fn server(proto: Proto, legacy: bool) -> std::net::SocketAddr {
    let svc = service_fn(move |req: Request<Incoming>| async move {
        let modern = req.headers().contains_key("mcp-method");
        let method = req.method().clone();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
        let res = if method == http::Method::DELETE {
            response(200, "application/json", full(""))
        } else if legacy && modern {
            let err = json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32000, "message": "Bad Request: Server not initialized"}});
            response(400, "application/json", json_body(&err))
        } else if msg["method"] == "initialize" {
            response(
                200,
                "application/json",
                json_body(&json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "serverInfo": {"name": "big", "version": "0"}}})),
            )
        } else if msg["method"] == "notifications/initialized" {
            response(202, "application/json", big_then_stalled())
        } else {
            answer(msg["params"]["name"].as_str().unwrap_or(""), &msg["id"])
        };
        Ok::<_, Infallible>(res)
    });
    let (closed, _) = tower_mcp_cancel::test_util::Recorder::new();
    serve(svc, proto, closed).await
}

fn client(addr: std::net::SocketAddr, proto: Proto) -> HttpClient {
    let b = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .max_response_bytes(LIMIT);
    match proto {
        Proto::H1 => b.build(),
        Proto::H2 => b.http2_prior_knowledge().build(),
    }
}

fn call(name: &str) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": name, "arguments": {}}))
}

fn assert_too_large(out: Result<Value, BoxError>, what: &str) {
    let err = out.expect_err(what);
    match err.downcast_ref::<HttpClientError>() {
        Some(HttpClientError::ResponseTooLarge { limit }) => assert_eq!(*limit, LIMIT, "{what}"),
        _ => panic!("{what}: not ResponseTooLarge: {err}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!("limit of {LIMIT} bytes")) && text.contains("max_response_bytes"),
        "{what}: names the limit: {text}"
    );
}

/// Each oversize answer fails its own call only: a call beside it, and the
/// next one, are answered.
async fn oversize_answers_fail_only_their_call(c: &HttpClient, what: &str) {
    for big in ["big_json", "big_chunked", "big_event"] {
        let (out, beside) = tokio::join!(
            c.clone().oneshot(call(big)),
            c.clone().oneshot(call("small"))
        );
        assert_too_large(out, &format!("{what}, {big}"));
        assert_eq!(beside.unwrap(), json!({"ok": true}), "{what}, beside {big}");
    }
    let many = bounded(c.clone().oneshot(call("many_events"))).await;
    assert_eq!(
        many.unwrap(),
        json!({"ok": true}),
        "{what}: the bound is per event"
    );
    let next = bounded(c.clone().oneshot(call("small"))).await;
    assert_eq!(next.unwrap(), json!({"ok": true}), "{what}: the next call");
}

#[tokio::test]
async fn an_answer_over_the_limit_fails_its_call_naming_the_limit() {
    for proto in [Proto::H1, Proto::H2] {
        let addr = server(proto, false).await;
        let c = client(addr, proto);
        bounded(oversize_answers_fail_only_their_call(
            &c,
            &format!("{proto:?}"),
        ))
        .await;
        assert!(matches!(c.server_era(), ServerEra::Stateless));
    }
}

/// In a 2025 session too; and the body of the answer to
/// `notifications/initialized`, which the client does not need, is read
/// only so far: a server that sends one without end does not hold the
/// handshake.
#[tokio::test]
async fn in_a_stateful_session_too() {
    let addr = server(Proto::H1, true).await;
    let c = client(addr, Proto::H1);
    bounded(oversize_answers_fail_only_their_call(&c, "2025 session")).await;
    assert!(
        matches!(c.server_era(), ServerEra::Stateful { .. }),
        "{:?}",
        c.server_era()
    );
    bounded(c.close()).await.unwrap();
}

/// The setting takes any value: 0 is 1 byte (everything is too large).
#[tokio::test]
async fn a_zero_limit_is_one_byte() {
    let addr = server(Proto::H1, false).await;
    let c = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .max_response_bytes(0)
        .build();
    let err = bounded(c.oneshot(call("small"))).await.unwrap_err();
    assert!(
        matches!(
            err.downcast_ref::<HttpClientError>(),
            Some(HttpClientError::ResponseTooLarge { limit: 1 })
        ),
        "{err}"
    );
}

/// By default the limit is 64 MiB, and a body declared larger is refused
/// before any of it is read, with the limit named (it was a bare "length
/// limit exceeded").
#[tokio::test]
async fn the_default_limit_is_64_mib_and_named() {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 67108865\r\nConnection: close\r\n\r\n{";
    let (addr, _seen) = http_support::raw_server(Some(head.as_bytes().to_vec())).await;
    let c = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let err = bounded(c.oneshot(call("small"))).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("limit of 67108864 bytes") && text.contains("max_response_bytes"),
        "{text}"
    );
}
