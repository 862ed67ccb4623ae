//! The request metadata headers compared with the body, called directly (no
//! sockets): a repeated header is refused like a different one (a proxy
//! may route on another copy than the one compared), for every method with
//! an `Mcp-Name` (`tools/call`, `prompts/get`, `resources/read`), and the
//! peer's text quoted in an error (body, header, HTTP method) comes back
//! sanitized and bounded.
#![cfg(feature = "http")]

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::ServiceExt;
use tower_mcp_cancel::transport::http::{ResponseBody, SessionLimits, StreamableHttpService};

use crate::support::http::{modern_headers, tool_call, Tools};

type Endpoint = BoxCloneService<Request<Full<Bytes>>, Response<ResponseBody>, Infallible>;

fn endpoint() -> Endpoint {
    let (tools, _events) = Tools::new();
    BoxCloneService::new(StreamableHttpService::new(tools.service()))
}

fn post(body: &Value, headers: &[(&str, String)]) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .method(http::Method::POST)
        .uri("http://127.0.0.1/mcp")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    for (k, v) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    req
}

async fn send(ep: &Endpoint, req: Request<Full<Bytes>>) -> (u16, Value) {
    let res = ep.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// `Mcp-Name: echo` and `Mcp-Name: delete_everything` on one request: the
/// server compares one copy, a proxy may route on the other. Every header
/// compared with the body is refused when repeated, even with equal copies.
#[tokio::test]
async fn a_repeated_metadata_header_is_a_mismatch() {
    let ep = endpoint();
    let body = tool_call(1, "echo", json!({"text": "hi"}));
    let base = modern_headers("echo");
    let (status, v) = send(&ep, post(&body, &base)).await;
    assert_eq!(status, 200, "the request is fine once: {v}");

    for (name, second) in [
        ("Mcp-Name", "delete_everything"),
        ("Mcp-Name", "echo"),
        ("Mcp-Method", "tools/list"),
        ("Mcp-Method", "tools/call"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("MCP-Protocol-Version", "2026-07-28"),
    ] {
        let mut headers = base.clone();
        headers.push((name, second.into()));
        let (status, v) = send(&ep, post(&body, &headers)).await;
        assert_eq!(status, 400, "{name}: {second}: {v}");
        assert_eq!(v["error"]["code"], -32020, "{name}: {v}");
        assert_eq!(v["id"], 1, "{v}");
    }
}

/// A 2025 request need not send `Mcp-Method` / `Mcp-Name`, but one it
/// sends twice is refused like on a 2026 request; so is a repeated 2025
/// `MCP-Protocol-Version` (the era is read from it).
#[tokio::test]
async fn a_repeated_metadata_header_is_a_mismatch_on_a_legacy_request() {
    let ep = endpoint();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let base: Vec<(&str, String)> = vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
        ("MCP-Protocol-Version", "2025-11-25".into()),
    ];
    let (status, v) = send(&ep, post(&body, &base)).await;
    assert_eq!(status, 200, "{v}");
    for (name, first, second) in [
        ("Mcp-Name", "echo", "delete_everything"),
        ("Mcp-Method", "tools/call", "tools/call"),
        ("MCP-Protocol-Version", "", "2025-06-18"),
    ] {
        let mut headers = base.clone();
        if !first.is_empty() {
            headers.push((name, first.into()));
        }
        headers.push((name, second.into()));
        let (status, v) = send(&ep, post(&body, &headers)).await;
        assert_eq!(status, 400, "{name}: {v}");
        assert_eq!(v["error"]["code"], -32020, "{name}: {v}");
    }
}

/// Asserts an error message or data string is short and has no control
/// characters.
fn assert_clean(what: &str, text: &str) {
    assert!(text.chars().count() < 1024, "{what}: {} chars", text.len());
    assert!(!text.chars().any(char::is_control), "{what}: {text:?}");
}

/// The body's `_meta` protocol version quoted in the mismatch message is
/// sanitized and bounded like the `Mcp-Method` / `Mcp-Name` ones; so is the
/// version quoted by "Unsupported protocol version" and its
/// `data.requested`.
#[tokio::test]
async fn protocol_versions_quoted_in_errors_are_sanitized_and_bounded() {
    let ep = endpoint();
    let evil = format!("2026\n\u{1b}[31m{}", "x".repeat(200_000));
    let mut body = tool_call(1, "echo", json!({"text": "hi"}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(evil);
    let (status, v) = send(&ep, post(&body, &modern_headers("echo"))).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32020, "{v}");
    assert_clean("mismatch message", v["error"]["message"].as_str().unwrap());

    // Header and body agree on an unsupported, huge version.
    let long = "9".repeat(200_000);
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(long);
    let mut headers = modern_headers("echo");
    headers.retain(|(k, _)| *k != "MCP-Protocol-Version");
    headers.push(("MCP-Protocol-Version", long.clone()));
    let (status, v) = send(&ep, post(&body, &headers)).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], -32022, "{v}");
    assert_clean(
        "unsupported message",
        v["error"]["message"].as_str().unwrap(),
    );
    assert_clean(
        "data.requested",
        v["error"]["data"]["requested"].as_str().unwrap(),
    );
}
/// The twins: `Mcp-Session-Id`, `Content-Type` and `Origin` are read from
/// one copy too; repeated, they are refused.
#[tokio::test]
async fn repeated_session_content_type_and_origin_headers_are_refused() {
    let (tools, _events) = Tools::new();
    let ep: Endpoint = BoxCloneService::new(
        StreamableHttpService::new(tools.service()).stateful_sessions(SessionLimits::new()),
    );
    let body = tool_call(1, "echo", json!({"text": "hi"}));
    for (name, first, second, want) in [
        ("Content-Type", "application/json", "text/plain", 415),
        ("Origin", "http://localhost", "http://evil.example", 403),
    ] {
        let mut headers = modern_headers("echo");
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        headers.push((name, first.into()));
        headers.push((name, second.into()));
        let (status, v) = send(&ep, post(&body, &headers)).await;
        assert_eq!(status, want, "{name}: {v}");
    }

    // A legacy initialize, then a request naming its session twice.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
    let mut headers: Vec<(&str, String)> = vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
    ];
    let res = ep.clone().oneshot(post(&init, &headers)).await.unwrap();
    // The test tools refuse initialize (-32601): no session. Use an id of
    // the right shape; a repeated header is refused before any lookup.
    assert!(res.headers().get("mcp-session-id").is_none());
    headers.push(("MCP-Protocol-Version", "2025-11-25".into()));
    headers.push(("Mcp-Session-Id", "a".repeat(64)));
    headers.push(("Mcp-Session-Id", "b".repeat(64)));
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let (status, v) = send(&ep, post(&call, &headers)).await;
    assert_eq!(status, 400, "{v}");
}

/// A 2026 request of `method` whose `params` mirror `field` = `value`.
fn named_request(id: i64, method: &str, field: &str, value: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": method,
        "params": {
            field: value,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    })
}

/// `Mcp-Name` mirrors `params.name` of `prompts/get` and `params.uri` of
/// `resources/read` as it does a tool's name: a different value (plain or
/// Base64), a missing one on a 2026 request, and a repeated one (even with
/// equal copies) are refused with `HeaderMismatch` before the handler; in
/// the 2025 era a header that is sent is held to the same rules.
#[tokio::test]
async fn mcp_name_of_prompts_and_resources_refuses_repeats_and_mismatches() {
    let ep = endpoint();
    for (method, field, value, other) in [
        ("prompts/get", "name", "greet", "delete_everything"),
        (
            "resources/read",
            "uri",
            "file:///notes.txt",
            "file:///etc/shadow",
        ),
    ] {
        let body = named_request(1, method, field, value);
        let headers = |names: &[&str]| {
            let mut h = modern_headers("unused");
            h.retain(|(k, _)| *k != "Mcp-Name" && *k != "Mcp-Method");
            h.push(("Mcp-Method", method.into()));
            for n in names {
                h.push(("Mcp-Name", (*n).to_owned()));
            }
            h
        };
        // Matching: past the checks (the test tools answer -32601).
        let (status, v) = send(&ep, post(&body, &headers(&[value]))).await;
        assert_ne!(status, 400, "{method}: {v}");
        assert_ne!(v["error"]["code"], -32020, "{method}: {v}");
        // So is the Base64 form of the same value.
        let (_, v) = send(&ep, post(&body, &headers(&[&b64(value)]))).await;
        assert_ne!(v["error"]["code"], -32020, "{method} base64: {v}");

        let b64_other = b64(other);
        for names in [
            vec![other],
            vec![b64_other.as_str()],
            vec![],
            vec![value, other],
            vec![value, value],
        ] {
            let (status, v) = send(&ep, post(&body, &headers(&names))).await;
            assert_eq!(status, 400, "{method} {names:?}: {v}");
            assert_eq!(v["error"]["code"], -32020, "{method} {names:?}: {v}");
            assert_eq!(v["id"], 1, "{v}");
        }

        // 2025 era: no Mcp-Name is fine; a mismatched or repeated one is not.
        let legacy = json!({"jsonrpc": "2.0", "id": 2, "method": method,
            "params": {field: value}});
        let base: Vec<(&str, String)> = vec![
            ("Content-Type", "application/json".into()),
            ("Accept", "application/json, text/event-stream".into()),
            ("MCP-Protocol-Version", "2025-11-25".into()),
        ];
        let (status, v) = send(&ep, post(&legacy, &base)).await;
        assert_ne!(status, 400, "{method} legacy: {v}");
        for names in [vec![other], vec![value, other], vec![value, value]] {
            let mut h = base.clone();
            for n in &names {
                h.push(("Mcp-Name", (*n).to_owned()));
            }
            let (status, v) = send(&ep, post(&legacy, &h)).await;
            assert_eq!(status, 400, "{method} legacy {names:?}: {v}");
            assert_eq!(v["error"]["code"], -32020, "{method} legacy {names:?}: {v}");
        }
    }
}

/// `=?base64?…?=` of `text`: how a client sends any text in `Mcp-Name` or
/// `Mcp-Param-*`.
fn b64(text: &str) -> String {
    format!(
        "=?base64?{}?=",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text)
    )
}

/// Peer text of 1 MB with a newline, an escape and a NUL.
fn hostile() -> String {
    format!(
        "evil\n\u{1b}[31mforged\u{0}{}\r\n\u{1b}]0;t\u{7}",
        "x".repeat(1 << 20)
    )
}

/// The peer's text quoted by the `Mcp-Method`, `Mcp-Name` and
/// `Mcp-Param-*` mismatch messages, from the header (Base64 carries any
/// text) or from the body, is bounded and free of control characters, and
/// so is the HTTP method quoted by a `405`.
#[tokio::test]
async fn peer_text_quoted_by_mismatch_and_405_errors_is_bounded_and_clean() {
    let evil = hostile();
    let with = |name: &'static str, value: String| {
        let mut h = modern_headers("echo");
        h.retain(|(k, _)| *k != name);
        h.push((name, value));
        h
    };
    let echo = tool_call(1, "echo", json!({"text": "hi"}));
    let mut evil_method = echo.clone();
    evil_method["method"] = json!(evil);
    let mut evil_name = echo.clone();
    evil_name["params"]["name"] = json!(evil);
    let long_token = "tools/".to_owned() + &"x".repeat(100_000);
    let cases = [
        (
            "Mcp-Method from the body",
            modern_headers("echo"),
            &evil_method,
        ),
        (
            "Mcp-Method from the header",
            with("Mcp-Method", long_token),
            &echo,
        ),
        (
            "Mcp-Name from the header",
            with("Mcp-Name", b64(&evil)),
            &echo,
        ),
        ("Mcp-Name from the body", modern_headers("echo"), &evil_name),
    ];
    let ep = endpoint();
    for (what, headers, body) in &cases {
        let (status, v) = send(&ep, post(body, headers)).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert_eq!(v["error"]["code"], -32020, "{what}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("does not match"), "{what}: {message}");
        assert_clean(what, message);
    }

    // Mcp-Param-*: a tool whose `region` argument is mirrored.
    let (tools, _events) = Tools::new();
    let ep: Endpoint = BoxCloneService::new(StreamableHttpService::new(tools.service()).tools(
        &json!({"tools": [{"name": "echo", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}}]}),
    ));
    let fine = tool_call(1, "echo", json!({"region": "us-west1"}));
    let (status, v) = send(
        &ep,
        post(&fine, &with("Mcp-Param-Region", "us-west1".into())),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let evil_region = tool_call(1, "echo", json!({ "region": evil }));
    for (what, body, header) in [
        ("Mcp-Param from the header", &fine, b64(&evil)),
        (
            "Mcp-Param from the body",
            &evil_region,
            "us-west1".to_owned(),
        ),
    ] {
        let (status, v) = send(&ep, post(body, &with("Mcp-Param-Region", header))).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert_eq!(v["error"]["code"], -32020, "{what}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("does not match"), "{what}: {message}");
        assert_clean(what, message);
    }

    // 405: an extension method of 100 000 characters.
    let req = Request::builder()
        .method(http::Method::from_bytes("X".repeat(100_000).as_bytes()).unwrap())
        .uri("http://127.0.0.1/mcp")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, v) = send(&ep, req).await;
    assert_eq!(status, 405, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("XXXX"), "the method is quoted: {message}");
    assert_clean("405", message);
}
