//! What the stdio server driver writes, over real in-memory pipes driven by a
//! raw JSON-lines peer (the handler of [`crate::server`]): malformed and
//! oversize lines are answered and survived; string and integer ids are
//! different requests and zero is an id; a duplicate in-flight id is answered
//! without that id; a reader that stops reading applies backpressure; a
//! notification that cannot be serialized writes nothing; raw JSON goes out on
//! one line; nothing is written for a request after its response; answers
//! queued together keep their ids; handlers computing in parallel each get
//! their answer. Time is paused wherever it matters; ordering comes from
//! handler events and from `ping` round trips through the one ordered writer.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::server::{start, start_with};
use serde_json::{json, Value};
use stdio_support::*;
use tokio::sync::{mpsc, oneshot};
use tower::service_fn;
use tower::BoxError;
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::Event;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::McpRequest;

#[tokio::test(start_paused = true)]
async fn malformed_and_oversize_lines_are_answered_and_survived() {
    let mut h = start_with(
        StdioServer::new().max_line_bytes(1024),
        |s| s,
        64 * 1024,
        None,
    );
    h.peer.send_raw(b"this is not json").await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(v["error"]["code"], -32700);
    assert!(v.get("id").is_none(), "no id for an unreadable line: {v}");

    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"pad": "x".repeat(5000)}});
    h.peer.send(big).await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(v["error"]["code"], -32600);
    assert_eq!(v["id"], 1, "the id read as the line went by: {v}");

    h.peer
        .send_raw(br#"{"jsonrpc":"1.0","id":9,"method":"ping"}"#)
        .await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(
        (v["error"]["code"].clone(), v["id"].clone()),
        (json!(-32600), json!(9))
    );

    h.peer
        .send_raw(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
        .await;
    assert_eq!(h.peer.recv().await.unwrap()["error"]["code"], -32600);
    h.peer.send_raw(b"[1,2,3]").await;
    assert_eq!(h.peer.recv().await.unwrap()["error"]["code"], -32600);
    h.peer.send_raw(b"   ").await; // a blank line is ignored

    // Malformed cancellations are ignored without an answer.
    h.peer
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "no id"}}))
        .await;
    h.peer
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled"}))
        .await;
    // Other notifications and stray responses are ignored too.
    h.peer
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    h.peer
        .send(json!({"jsonrpc": "2.0", "id": 99, "result": {}}))
        .await;

    h.peer
        .request(json!(2), "echo", json!({"text": "still here"}))
        .await;
    let v = h.peer.recv().await.unwrap();
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"]["params"]["text"], "still here");
    assert!(h.peer.close().await.is_empty());
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn string_and_integer_ids_are_different_requests_and_zero_is_an_id() {
    let mut h = start();
    h.peer.request(json!("1"), "hang", json!({})).await;
    h.peer.request(json!(1), "hang", json!({})).await;
    h.peer.request(json!(0), "hang", json!({})).await;
    for _ in 0..3 {
        assert!(matches!(h.ev.next().await, Event::Started(_)));
    }
    // None of them was taken for a duplicate.
    assert_eq!(h.peer.sync(json!("s")).await.len(), 1);
    h.peer.cancel(json!("1"), "string one").await;
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from("1")));
    h.peer.sync(json!("s2")).await;
    assert!(h.ev.try_next().is_none(), "integer 1 still runs");
    h.peer.cancel(json!(0), "zero").await;
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(0)));
    h.peer.cancel(json!(1), "integer one").await;
    assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(1)));
    h.peer.request(json!(0), "echo", json!({})).await;
    assert_eq!(h.peer.recv().await.unwrap()["id"], 0);
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_stops_reading_applies_backpressure() {
    // A 256-byte pipe and a writer queue of 2 messages.
    let mut h = start_with(StdioServer::new().write_queue(2), |s| s, 256, None);
    h.peer.request(json!(1), "flood", json!({})).await;
    settle().await;
    let stalled = h.flood.load(Ordering::SeqCst);
    assert!(stalled > 0, "the handler started sending");
    settle().await;
    assert_eq!(
        h.flood.load(Ordering::SeqCst),
        stalled,
        "it is blocked, not buffering"
    );
    // queue (2) + one in the writer's hands + what fits in the pipe (256 B).
    assert!(
        stalled <= 6,
        "only a bounded number of messages was accepted: {stalled}"
    );
    // Reading again lets it finish.
    let lines = h.peer.until_response(json!(1)).await;
    assert_eq!(lines.len(), 1001);
    assert_eq!(h.ev.next().await, Event::Started(RequestId::from(1)));
    assert_eq!(h.ev.next().await, Event::Done(RequestId::from(1)));
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_in_flight_id_is_answered_without_that_id() {
    // Also when the connection is at its in-flight limit: the refusal must
    // not carry the id of the request that is running either.
    for limit in [1024, 1] {
        let mut h = start_with(
            StdioServer::new().max_in_flight(limit),
            |s| s,
            64 * 1024,
            None,
        );
        h.peer.request(json!(3), "hang", json!({})).await;
        assert_eq!(h.ev.next().await, Event::Started(RequestId::from(3)));
        h.peer.request(json!(3), "echo", json!({})).await;
        let v = h.peer.recv().await.unwrap();
        assert!(
            v.get("id").is_none(),
            "limit {limit}: answered with the running request's id: {v}"
        );
        assert!(v["error"]["code"].is_i64(), "{v}");
        // The first request is unaffected and still cancellable.
        h.peer.cancel(json!(3), "stop").await;
        assert_eq!(h.ev.next().await, Event::Dropped(RequestId::from(3)));
        let lines = h.peer.sync(json!("s")).await;
        assert_eq!(lines.len(), 1, "nothing for id 3: {lines:?}");
        h.peer.close().await;
        h.served.await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_notification_that_cannot_be_serialized_writes_nothing() {
    let mut h = start();
    h.peer.request(json!(1), "unserializable", json!({})).await;
    let lines = h.peer.until_response(json!(1)).await;
    assert_eq!(lines.len(), 1, "only the response: {lines:?}");
    assert_eq!(
        lines[0]["result"]["sent"], false,
        "notify must report the failure"
    );
    h.peer.close().await;
    h.served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn raw_json_results_are_written_on_one_line() {
    use serde_json::value::RawValue;
    let svc = service_fn(|req: McpRequest| async move {
        let pretty = serde_json::to_string_pretty(&json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": "line one\nline two"}],
            "method": req.method(),
        }))
        .unwrap();
        assert!(pretty.contains('\n'));
        Ok::<_, BoxError>(RawValue::from_string(pretty).unwrap())
    });
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    peer.request(json!(1), "tools/call", json!({})).await;
    // Peer::recv parses every line: a broken line fails here.
    let v = peer.recv().await.unwrap();
    assert_eq!(v["id"], 1);
    assert_eq!(v["result"]["content"][0]["text"], "line one\nline two");
    assert_eq!(v["result"]["method"], "tools/call");
    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();
}

/// Many requests whose handlers leave a reporter running on another thread
/// that keeps sending progress after the handler returned: the window
/// between "is the request still running?" and "queue the message" is hit
/// constantly. Nothing may reach the wire for a request after its response,
/// and every reporter must be told the request is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_for_a_request_after_its_response() {
    const REQUESTS: usize = 100;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let svc = service_fn(move |req: McpRequest| {
        let done_tx = done_tx.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let (started_tx, started_rx) = oneshot::channel();
            let rt = tokio::runtime::Handle::current();
            // A thread of its own, so that it races the driver for real.
            tokio::task::spawn_blocking(move || {
                rt.block_on(async move {
                    let mut started_tx = Some(started_tx);
                    let mut sent = 0usize;
                    while ctx.progress(sent as f64 + 1.0, None, None).await {
                        sent += 1;
                        if sent == 3 {
                            if let Some(tx) = started_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                    }
                    let _ = done_tx.send(sent);
                })
            });
            let _ = started_rx.await;
            Ok::<_, BoxError>(json!({"resultType": "complete"}))
        }
    });
    let (mut peer, r, w) = pipe(1 << 20);
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    for i in 0..REQUESTS {
        peer.request(
            json!(i),
            "tools/call",
            json!({"_meta": {"progressToken": i}}),
        )
        .await;
    }
    let mut answered = std::collections::HashSet::new();
    let mut late = Vec::new();
    while answered.len() < REQUESTS {
        let v = peer.recv().await.expect("stream ended early");
        if v.get("method").is_some() {
            let token = v["params"]["progressToken"].as_u64().unwrap();
            if answered.contains(&token) {
                late.push(v);
            }
        } else {
            answered.insert(v["id"].as_u64().unwrap());
        }
    }
    // Every reporter learns that its request is over, and stops.
    for _ in 0..REQUESTS {
        tokio::time::timeout(BOUND, done_rx.recv())
            .await
            .unwrap()
            .unwrap();
    }
    // Whatever was still queued reaches the peer before the ping's answer.
    for v in peer.sync(json!("s")).await {
        if v.get("method").is_some() {
            late.push(v);
        }
    }
    assert!(
        late.is_empty(),
        "{} progress messages after their response, e.g. {}",
        late.len(),
        late[0]
    );
    peer.close().await;
    served.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn raw_params_from_a_client_are_sent_on_one_line() {
    use serde_json::value::RawValue;
    use tower::ServiceExt;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    // What an HTTP-to-stdio gateway forwards: a body as the client wrote it.
    let body = "{\n  \"name\": \"echo\",\n  \"arguments\": {\"text\": \"a\\nb\"}\n}";
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let (cr, cw) = tokio::io::split(client_io);
    let echo = service_fn(|req: McpRequest| async move {
        Ok::<_, BoxError>(json!({ "params": req.params_as::<Value>()? }))
    });
    let served = tokio::spawn(StdioServer::new().serve(echo, sr, sw));
    let client = StdioClient::new(cr, cw);
    let mut req = McpRequest::new(1, "tools/call");
    req.set_raw_params(Some(RawValue::from_string(body.into()).unwrap()));
    let res = tokio::time::timeout(BOUND, client.clone().oneshot(req))
        .await
        .expect("no answer: the server could not read the request")
        .unwrap();
    assert_eq!(res["params"]["arguments"]["text"], "a\nb");
    client.shutdown().await.unwrap();
    served.await.unwrap().unwrap();
}

/// Requests read in one go and answered at their first poll: their answers
/// are queued together, and until then their ids stay in flight, so a
/// premature reuse of an id is refused without it instead of getting a
/// second answer with that id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_queued_together_keep_their_ids_until_queued() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let svc = service_fn(|req: McpRequest| async move {
        Ok::<_, BoxError>(json!({ "method": req.method() }))
    });
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    let mut batch = Vec::new();
    for id in [1, 1, 2] {
        if !batch.is_empty() {
            batch.push(b'\n');
        }
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        batch.extend_from_slice(line.to_string().as_bytes());
    }
    peer.send_raw(&batch).await; // one write: the reader gets all three at once
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(peer.recv().await.unwrap());
    }
    let answered = |id: i64| got.iter().filter(|v| v["id"] == id).count();
    assert_eq!(answered(1), 1, "one answer for id 1: {got:?}");
    assert_eq!(answered(2), 1, "{got:?}");
    let refused: Vec<_> = got.iter().filter(|v| v.get("id").is_none()).collect();
    assert_eq!(
        refused.len(),
        1,
        "the reused id refused without it: {got:?}"
    );
    assert_eq!(refused[0]["error"]["code"], ErrorObject::INVALID_REQUEST);
    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();
}

/// Handlers that compute before their first `.await`, many at once: the
/// reader spawns them to run in parallel and the writer lets answers share
/// a flush, yet every request gets its one answer, and a request alone
/// afterwards is answered without waiting for others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computing_handlers_in_parallel_each_get_their_answer() {
    const N: i64 = 64;
    // Real time here: a bound for a broken build, far above the run's.
    const REAL_BOUND: Duration = Duration::from_secs(30);
    let (mut peer, r, w) = pipe(64 * 1024);
    let svc = service_fn(|req: McpRequest| async move {
        let until = std::time::Instant::now() + Duration::from_micros(200);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        Ok::<_, BoxError>(json!({ "method": req.method() }))
    });
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    let mut batch = Vec::new();
    for id in 0..N {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
        batch.extend_from_slice(line.to_string().as_bytes());
        batch.push(b'\n');
    }
    peer.send_raw(&batch).await;
    let mut ids = Vec::new();
    for _ in 0..N {
        let v = tokio::time::timeout(REAL_BOUND, peer.recv())
            .await
            .expect("every answer arrives")
            .unwrap();
        assert_eq!(v["result"]["method"], "ping", "{v}");
        ids.push(v["id"].as_i64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
    // Alone now (nothing else runs): answered, not held for company.
    peer.send(json!({"jsonrpc": "2.0", "id": N, "method": "ping"}))
        .await;
    let v = tokio::time::timeout(REAL_BOUND, peer.recv())
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(v["id"], N);
    assert!(peer.close().await.is_empty());
    served.await.unwrap().unwrap();
}
