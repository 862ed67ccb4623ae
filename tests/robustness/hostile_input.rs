//! Hostile input: an oversize message is refused with a clear error, the
//! connection keeps working, and the framing never buffers more than its
//! limit (stdio lines and HTTP bodies).
//!
//! Memory is measured by the counting allocator of [`crate::hostile`], on a
//! current-thread runtime (see there why).
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::hostile::{connect, peak_above, start_peak, work_service};
use crate::support::http as http_support;
use crate::support::stdio as stdio_support;

use std::io;

use serde_json::{json, Value};
use stdio_support::{Peer, BOUND};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tower_mcp_cancel::transport::stdio::StdioServer;

// ---------------------------------------------------------------------------
// Oversize messages.

#[tokio::test]
async fn an_oversize_line_is_refused_the_connection_keeps_working_and_memory_is_bounded() {
    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut conn = connect(
        work_service(tx),
        StdioServer::new().max_line_bytes(LIMIT),
        64 * 1024,
    );
    let chunk = vec![b'x'; 64 * 1024];

    let baseline = start_peak();
    let Peer { mut w, mut r } = conn.peer;
    let writer = async {
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{\"pad\":\"")
            .await
            .unwrap();
        for _ in 0..SENT / chunk.len() {
            w.write_all(&chunk).await.unwrap();
        }
        w.write_all(b"\"}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        w.flush().await.unwrap();
    };
    let reader = async {
        let mut lines = Vec::new();
        for _ in 0..2 {
            let line = tokio::time::timeout(BOUND, r.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            lines.push(serde_json::from_str::<Value>(&line).unwrap());
        }
        lines
    };
    let ((), lines) = tokio::join!(writer, reader);
    let peak = peak_above(baseline);

    let err = &lines[0];
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_eq!(
        err["id"], 1,
        "the id of an oversize line is read as it goes by: {err}"
    );
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "a clear error: {message}"
    );
    assert_eq!(
        lines[1],
        json!({"jsonrpc": "2.0", "id": 2, "result": {}}),
        "still serving"
    );
    eprintln!("oversize: {SENT} bytes sent, limit {LIMIT}, peak allocation growth {peak} bytes");
    assert!(
        peak < 3 * LIMIT as isize,
        "the framing buffered {peak} bytes for a {SENT}-byte line (limit {LIMIT})"
    );
    conn.peer = Peer { w, r };
    assert!(conn.peer.close().await.is_empty());
    conn.served.await.unwrap().unwrap();
}

/// The client's twin: a 64 MiB answer against a 1 MiB limit ends its call
/// with an error naming the limit, the reader holding no more than the
/// limit (and the 1 KiB it keeps of an id) meanwhile; the next answer is
/// read as usual.
#[tokio::test]
async fn an_oversize_answer_ends_its_call_and_the_stdio_client_buffers_at_most_its_limit() {
    use tower::ServiceExt;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    use tower_mcp_cancel::McpRequest;

    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    let (mut peer, r, w) = stdio_support::pipe(64 * 1024);
    let client = StdioClient::builder().max_line_bytes(LIMIT).connect(r, w);
    let big = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    let next = tokio::spawn(client.clone().oneshot(McpRequest::new(2, "ping")));
    assert_eq!(peer.recv().await.unwrap()["id"], 2);
    let chunk = vec![b'x'; 64 * 1024];

    let baseline = start_peak();
    peer.w
        .write_all(b"{\"jsonrpc\":\"2.0\",\"result\":{\"pad\":\"")
        .await
        .unwrap();
    for _ in 0..SENT / chunk.len() {
        peer.w.write_all(&chunk).await.unwrap();
    }
    // The id comes last: it is read all the same.
    peer.w.write_all(b"\"},\"id\":1}\n").await.unwrap();
    peer.send(json!({"jsonrpc": "2.0", "id": 2, "result": {}}))
        .await;
    let answered = tokio::time::timeout(BOUND, next).await.unwrap().unwrap();
    let peak = peak_above(baseline);
    assert_eq!(answered.unwrap(), json!({}));
    // Lines are read in order: the oversize one was dealt with before.
    assert_eq!(
        client.in_flight(),
        0,
        "the call the oversize line answered ended"
    );
    let err = tokio::time::timeout(BOUND, big)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("line limit of {LIMIT} bytes")),
        "a clear error: {err}"
    );
    eprintln!(
        "oversize answer: {SENT} bytes sent, limit {LIMIT}, peak allocation growth {peak} bytes"
    );
    // A vector grown to the limit may have up to twice its capacity.
    assert!(
        peak < 3 * LIMIT as isize,
        "the client buffered {peak} bytes for a {SENT}-byte answer (limit {LIMIT})"
    );
    client.shutdown().await.unwrap();
}

/// An oversize answer whose id cannot be read ends no call, but not
/// silently: a warning names the limit and the calls in flight (which end
/// by their deadlines); the call is then answered as usual.
#[tokio::test]
async fn an_oversize_line_that_ends_no_call_is_logged_with_the_calls_in_flight() {
    use tower::ServiceExt;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    use tower_mcp_cancel::McpRequest;

    let (logs, _guard) = crate::hostile::capture_logs(false);
    let (mut peer, r, w) = stdio_support::pipe(64 * 1024);
    let client = StdioClient::builder().max_line_bytes(1024).connect(r, w);
    let call = tokio::spawn(client.clone().oneshot(McpRequest::new(1, "tools/call")));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    let pad = "x".repeat(4096);
    peer.send_raw(format!(r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}"}}}}"#).as_bytes())
        .await;
    peer.send(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
        .await;
    let out = tokio::time::timeout(BOUND, call).await.unwrap().unwrap();
    assert_eq!(out.unwrap(), json!({}));
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("oversize line from the server skipped"))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert!(
        line.contains("WARN") && line.contains("max=1024") && line.contains("in_flight=1"),
        "{line}"
    );
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oversize_http_body_is_refused_with_413_memory_is_bounded_and_the_server_keeps_serving()
{
    use http_support::{modern_headers, read_until, Proto};
    use tokio::io::AsyncReadExt;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    let (tx, _rx) = mpsc::unbounded_channel();
    let endpoint = StreamableHttpService::new(work_service(tx)).max_body_bytes(LIMIT);
    let (closed_tx, _closed) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(endpoint, Proto::H1, closed_tx).await;

    // A chunked body (no Content-Length to refuse up front) of 64 MiB.
    let mut head =
        String::from("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n");
    for (k, v) in modern_headers("work") {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let chunk_body = vec![b' '; 64 * 1024];
    let mut chunk = format!("{:x}\r\n", chunk_body.len()).into_bytes();
    chunk.extend_from_slice(&chunk_body);
    chunk.extend_from_slice(b"\r\n");

    let baseline = start_peak();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let writer = async {
        let res: io::Result<()> = async {
            wr.write_all(head.as_bytes()).await?;
            for _ in 0..SENT / chunk_body.len() {
                wr.write_all(&chunk).await?;
            }
            wr.write_all(b"0\r\n\r\n").await
        }
        .await;
        if res.is_err() {
            // The server stopped reading and closed: the answer is what
            // counts, so leave the reader to it.
            std::future::pending::<()>().await;
        }
    };
    let reader = async {
        let mut buf = Vec::new();
        let mut part = [0u8; 4096];
        loop {
            let n = rd.read(&mut part).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&part[..n]);
            if String::from_utf8_lossy(&buf).contains("}") {
                break;
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    // The server answers while the body is still coming; stop writing then.
    tokio::pin!(writer);
    let response = tokio::select! {
        biased;
        r = reader => r,
        () = &mut writer => panic!("the server read the whole {SENT}-byte body"),
    };
    let peak = peak_above(baseline);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response.contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "a clear error: {response}"
    );
    eprintln!("oversize HTTP body: limit {LIMIT}, peak allocation growth {peak} bytes");
    assert!(
        peak < 3 * LIMIT as isize,
        "buffered {peak} bytes of an oversize body"
    );

    // The server keeps serving.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut headers = modern_headers("");
    headers.retain(|(k, _)| *k != "Mcp-Name");
    headers.iter_mut().for_each(|(k, v)| {
        if *k == "Mcp-Method" {
            *v = "ping".into();
        }
    });
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.write_all(&http_support::raw_post(&ping, &extra))
        .await
        .unwrap();
    let seen = read_until(&mut s, "\"result\"").await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

/// `HttpClient`'s twin: a 64 MiB answer against a 1 MiB
/// `max_response_bytes` — a JSON body without a declared length, or one
/// SSE event — fails its call with `ResponseTooLarge`, the client holding
/// no more than about the limit meanwhile.
#[tokio::test]
async fn an_oversize_http_answer_fails_its_call_and_the_client_buffers_at_most_its_limit() {
    use bytes::Bytes;
    use futures_util::StreamExt;
    use http_body_util::{BodyExt, StreamBody};
    use tower::ServiceExt;
    use tower_mcp_cancel::transport::http::{HttpClient, HttpClientError};
    use tower_mcp_cancel::McpRequest;

    const LIMIT: usize = 1 << 20;
    const SENT: usize = 64 << 20;
    // The same 64 KiB chunk over and over: the server allocates nothing per
    // chunk, so the growth measured is the client's.
    let svc = tower::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
        let sse = req.headers()["mcp-name"] == "sse";
        let (content_type, head) = match sse {
            true => (
                "text/event-stream",
                "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"pad\":\"",
            ),
            false => (
                "application/json",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"pad\":\"",
            ),
        };
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let body = futures_util::stream::once(async move { Bytes::from(head) })
            .chain(futures_util::stream::repeat(chunk).take(SENT / (64 * 1024)))
            .map(|b| Ok::<_, std::convert::Infallible>(http_body::Frame::data(b)));
        let res = http::Response::builder()
            .header("content-type", content_type)
            .body(StreamBody::new(body).boxed_unsync())
            .unwrap();
        Ok::<_, std::convert::Infallible>(res)
    });
    let (closed, _) = tower_mcp_cancel::test_util::Recorder::new();
    let addr = http_support::serve(svc, http_support::Proto::H1, closed).await;
    let client = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .max_response_bytes(LIMIT)
        .build();
    for tool in ["json", "sse"] {
        let call = McpRequest::new(1, "tools/call").with_params(json!({"name": tool}));
        let baseline = start_peak();
        let err = tokio::time::timeout(BOUND, client.clone().oneshot(call))
            .await
            .unwrap()
            .unwrap_err();
        let peak = peak_above(baseline);
        assert!(
            matches!(
                err.downcast_ref::<HttpClientError>(),
                Some(HttpClientError::ResponseTooLarge { limit: LIMIT })
            ),
            "{tool}: {err}"
        );
        eprintln!(
            "oversize HTTP answer ({tool}): limit {LIMIT}, peak allocation growth {peak} bytes"
        );
        assert!(
            peak < 3 * LIMIT as isize,
            "{tool}: the client buffered {peak} bytes (limit {LIMIT})"
        );
    }
}
