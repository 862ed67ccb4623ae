//! The server adapter over real loopback sockets: response shape, header
//! validation, and the HTTP statuses of the spec.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use http_support::*;
use serde_json::{json, Value};

fn modern(name: &str) -> Vec<(&'static str, String)> {
    modern_headers(name)
}

async fn post_json(
    conn: &mut Conn,
    body: &Value,
    headers: &[(&str, String)],
) -> (http::StatusCode, http::HeaderMap, String) {
    let res = bounded(conn.send(post(body, headers))).await.unwrap();
    let status = res.status();
    let h = res.headers().clone();
    (status, h, text(res).await)
}

fn error_code(body: &str) -> i64 {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no error code: {body}"))
}

#[tokio::test]
async fn json_when_no_notification_sse_when_one_comes_first() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, _events) = serve_tools(proto, |s| s).await;
        let mut conn = Conn::connect(addr, proto).await;

        let (status, h, body) = post_json(
            &mut conn,
            &tool_call(1, "echo", json!({"text": "hi"})),
            &modern("echo"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(h["content-type"], "application/json");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], 1);
        assert_eq!(v["result"]["content"][0]["text"], "hi");
        assert!(h.get("mcp-session-id").is_none(), "no sessions minted");

        let (status, h, body) = post_json(
            &mut conn,
            &tool_call(2, "notify", json!({})),
            &modern("notify"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(h["content-type"], "text/event-stream");
        assert_eq!(h["x-accel-buffering"], "no");
        // The notification, then the final response, then the end of the stream.
        let datas: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        assert_eq!(datas.len(), 2, "{body}");
        assert_eq!(datas[0]["method"], "notifications/message");
        assert_eq!(datas[1]["id"], 2);
        assert_eq!(datas[1]["result"]["notified"], true);
    }
}

#[tokio::test]
async fn header_validation_errors() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let body = tool_call(7, "echo", json!({"text": "x"}));

    type Case = (&'static str, Vec<(&'static str, String)>, Value, u16, i64);
    let cases: Vec<Case> = vec![
        (
            "missing MCP-Protocol-Version",
            modern("echo")
                .into_iter()
                .filter(|(k, _)| *k != "MCP-Protocol-Version")
                .collect(),
            body.clone(),
            400,
            -32020,
        ),
        (
            "version header differs from _meta",
            modern("echo")
                .into_iter()
                .map(|(k, v)| {
                    if k == "MCP-Protocol-Version" {
                        (k, "2026-01-01".into())
                    } else {
                        (k, v)
                    }
                })
                .collect(),
            body.clone(),
            400,
            -32020,
        ),
        (
            "Mcp-Method differs",
            modern("echo")
                .into_iter()
                .map(|(k, v)| {
                    if k == "Mcp-Method" {
                        (k, "tools/list".into())
                    } else {
                        (k, v)
                    }
                })
                .collect(),
            body.clone(),
            400,
            -32020,
        ),
        (
            "Mcp-Name differs",
            modern("other"),
            body.clone(),
            400,
            -32020,
        ),
        (
            "Mcp-Name missing",
            modern("echo")
                .into_iter()
                .filter(|(k, _)| *k != "Mcp-Name")
                .collect(),
            body.clone(),
            400,
            -32020,
        ),
        (
            "unsupported version (header and body agree)",
            modern("echo")
                .into_iter()
                .map(|(k, v)| {
                    if k == "MCP-Protocol-Version" {
                        (k, "2099-01-01".into())
                    } else {
                        (k, v)
                    }
                })
                .collect(),
            {
                let mut b = body.clone();
                b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
                    "2099-01-01".into();
                b
            },
            400,
            -32022,
        ),
    ];
    for (what, headers, body, status, code) in cases {
        let (s, h, text) = post_json(&mut conn, &body, &headers).await;
        assert_eq!(s.as_u16(), status, "{what}: {text}");
        assert_eq!(h["content-type"], "application/json", "{what}");
        assert_eq!(error_code(&text), code, "{what}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["id"], 7, "{what}: the error carries the request id");
        if code == -32022 {
            assert_eq!(v["error"]["data"]["supported"][0], "2026-07-28");
        }
    }

    // A name that needs the Base64 sentinel, encoded by the client, is decoded
    // before the comparison.
    let body = tool_call(8, "héllo wörld", json!({"text": "ok"}));
    // The sentinel encoding of "héllo wörld" (Base64 of its UTF-8 bytes).
    let encoded = "=?base64?aMOpbGxvIHfDtnJsZA==?=";
    let (s, _, text) = post_json(&mut conn, &body, &modern(encoded)).await;
    assert_eq!(s, 200, "{text}");
}

#[tokio::test]
async fn statuses_405_202_413_406_403_404() {
    let (addr, _tools, _events) = serve_tools(Proto::H1, |s| s.max_body_bytes(1024)).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;

    for method in ["GET", "DELETE"] {
        let req = http::Request::builder()
            .method(method)
            .uri("http://127.0.0.1/mcp")
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", "abc")
            .header("Last-Event-ID", "5")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let res = bounded(conn.send(req)).await.unwrap();
        assert_eq!(res.status(), 405, "{method}");
        assert_eq!(res.headers()["allow"], "POST");
        let _ = text(res).await;
    }

    let notification = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (s, _, body) = post_json(&mut conn, &notification, &modern("x")).await;
    assert_eq!(s, 202);
    assert!(body.is_empty());

    let big = tool_call(1, "echo", json!({"text": "x".repeat(4096)}));
    let (s, _, body) = post_json(&mut conn, &big, &modern("echo")).await;
    assert_eq!(s, 413);
    assert!(body.contains("exceeds the limit of 1024 bytes"), "{body}");
    // The unread body leaves that connection unusable: a fresh one.
    let mut conn = Conn::connect(addr, Proto::H1).await;

    let no_sse: Vec<_> = modern("echo")
        .into_iter()
        .map(|(k, v)| {
            if k == "Accept" {
                (k, "application/json".to_string())
            } else {
                (k, v)
            }
        })
        .collect();
    let (s, _, _) = post_json(&mut conn, &tool_call(2, "echo", json!({})), &no_sse).await;
    assert_eq!(s, 406);

    let mut evil = modern("echo");
    evil.push(("Origin", "https://evil.example".into()));
    let (s, _, body) = post_json(&mut conn, &tool_call(3, "echo", json!({})), &evil).await;
    assert_eq!(s, 403);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("id").is_none(), "403 error has no id: {body}");

    let mut local = modern("echo");
    local.push(("Origin", "http://localhost:5173".into()));
    let (s, _, _) = post_json(&mut conn, &tool_call(4, "echo", json!({})), &local).await;
    assert_eq!(s, 200);

    // An unknown method is 404 with -32601.
    let unknown = json!({"jsonrpc": "2.0", "id": 5, "method": "nope/nothing", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let headers: Vec<_> = modern("")
        .into_iter()
        .filter(|(k, _)| *k != "Mcp-Name")
        .map(|(k, v)| {
            if k == "Mcp-Method" {
                (k, "nope/nothing".to_string())
            } else {
                (k, v)
            }
        })
        .collect();
    let (s, _, body) = post_json(&mut conn, &unknown, &headers).await;
    assert_eq!(s, 404, "{body}");
    assert_eq!(error_code(&body), -32601);

    // Not JSON: a parse error with a null id.
    let req = http::Request::post("http://127.0.0.1/mcp")
        .header("Accept", "application/json, text/event-stream")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            b"{oops",
        )))
        .unwrap();
    let res = bounded(conn.send(req)).await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(error_code(&text(res).await), -32700);
}

#[tokio::test]
async fn keep_alive_comments_flow_on_a_quiet_stream() {
    use tokio::io::AsyncWriteExt;
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| {
        s.keep_alive(Some(std::time::Duration::from_millis(20)))
    })
    .await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let headers: Vec<(&str, String)> = modern("hang");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    stream
        .write_all(&raw_post(
            &tool_call(1, "hang", json!({"notify": true})),
            &extra,
        ))
        .await
        .unwrap();
    let seen = read_until(&mut stream, "\n:\n").await;
    assert!(seen.contains("text/event-stream"));
    assert!(seen.contains("notifications/message"));
    drop(stream);
    events.until(|e| matches!(e, Event::Dropped(_))).await;
}

#[tokio::test]
async fn a_handler_that_ends_as_cancelled_on_its_own_still_gets_an_answer() {
    for proto in [Proto::H1, Proto::H2] {
        let (addr, _tools, _events) = serve_tools(proto, |s| s).await;
        let mut conn = Conn::connect(addr, proto).await;
        // Before any notification: a JSON answer.
        let (status, h, body) = post_json(
            &mut conn,
            &tool_call(1, "give_up", json!({})),
            &modern("give_up"),
        )
        .await;
        assert_eq!(status, 200, "{proto:?}: {body}");
        assert_eq!(h["content-type"], "application/json");
        assert_eq!(error_code(&body), -32603);
        assert!(body.contains("the handler gave up"), "{body}");
        // After a notification: the SSE stream ends with the error answer.
        let (status, h, body) = post_json(
            &mut conn,
            &tool_call(2, "give_up", json!({"notify": true})),
            &modern("give_up"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(h["content-type"], "text/event-stream");
        let datas: Vec<Value> = body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        assert_eq!(datas.len(), 2, "{body}");
        assert_eq!(datas[1]["id"], 2);
        assert_eq!(datas[1]["error"]["code"], -32603);
    }
}

/// A reporter on another thread keeps sending progress after its handler
/// returned: the SSE stream ends with the response, nothing of the request
/// follows it, and the reporter is told the request is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_for_a_request_after_its_response() {
    use tokio::sync::{mpsc, oneshot};
    use tower::BoxError;
    use tower_mcp_cancel::notify::RequestContext;
    use tower_mcp_cancel::transport::http::StreamableHttpService;
    use tower_mcp_cancel::McpRequest;

    let (stopped_tx, mut stopped_rx) = mpsc::unbounded_channel::<usize>();
    let mcp = tower::service_fn(move |req: McpRequest| {
        let stopped_tx = stopped_tx.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let (three_tx, three_rx) = oneshot::channel();
            let rt = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                rt.block_on(async move {
                    let mut three_tx = Some(three_tx);
                    let mut sent = 0usize;
                    while ctx.progress(sent as f64 + 1.0, None, None).await {
                        sent += 1;
                        if sent == 3 {
                            let _ = three_tx.take().map(|tx| tx.send(()));
                        }
                    }
                    let _ = stopped_tx.send(sent);
                })
            });
            let _ = three_rx.await;
            Ok::<_, BoxError>(json!({"resultType": "complete"}))
        }
    });
    let (closed, _closed_rx) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = serve(StreamableHttpService::new(mcp), Proto::H2, closed).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;
    for id in 0..20 {
        let mut body = tool_call(id, "report", json!({}));
        body["params"]["_meta"]["progressToken"] = json!(id);
        let (status, h, text) = post_json(&mut conn, &body, &modern("report")).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(h["content-type"], "text/event-stream");
        let datas: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        let last = datas.last().unwrap();
        assert_eq!(last["id"], id, "the response ends the stream: {text}");
        assert!(
            datas.len() >= 4,
            "three progress before the response: {text}"
        );
        bounded(stopped_rx.recv()).await.unwrap();
    }
}
