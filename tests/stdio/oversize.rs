//! A message over the line limit ends the call it was for, on both sides of
//! a stdio connection: an answer over the client's limit fails its call
//! with an error naming the limit, and a request over the server's limit is
//! answered with `-32600` carrying its id, so the client's call ends too.
//! Other calls, and the connection, go on.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use serde_json::{json, Value};
use stdio_support::*;
use tower::{BoxError, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::McpRequest;

const LIMIT: usize = 1024;

fn client() -> (Peer, StdioClient) {
    let (peer, r, w) = pipe(64 * 1024);
    (
        peer,
        StdioClient::builder().max_line_bytes(LIMIT).connect(r, w),
    )
}

/// A call of `client`, run in a task.
fn call(client: &StdioClient, id: Value) -> tokio::task::JoinHandle<Result<Value, BoxError>> {
    let req = match id {
        Value::String(s) => McpRequest::new(s.as_str(), "tools/call"),
        v => McpRequest::new(v.as_i64().unwrap(), "tools/call"),
    };
    tokio::spawn(client.clone().oneshot(req))
}

async fn result(call: tokio::task::JoinHandle<Result<Value, BoxError>>) -> Result<Value, BoxError> {
    tokio::time::timeout(BOUND, call)
        .await
        .expect("the call never ended")
        .unwrap()
}

/// An answer of `pad` bytes of padding for `id`, the id after the result.
fn big_answer(id: &Value, pad: usize) -> Vec<u8> {
    let pad = "x".repeat(pad);
    format!(r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}"}},"id":{id}}}"#).into_bytes()
}

fn ok(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"ok": true}})
}

fn assert_names_the_limit(err: &BoxError, id: &str) {
    let io = err
        .downcast_ref::<std::io::Error>()
        .unwrap_or_else(|| panic!("an io::Error: {err}"));
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidData, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("line limit of {LIMIT} bytes")) && msg.contains("max_line_bytes"),
        "names the limit: {msg}"
    );
    assert!(msg.contains(id), "names the request: {msg}");
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_answer_is_over_the_line_limit_ends_with_an_error_naming_the_limit() {
    let (mut peer, client) = client();
    let big = call(&client, json!("big"));
    let other = call(&client, json!(2));
    let mut ids = vec![peer.recv().await.unwrap()["id"].clone()];
    ids.push(peer.recv().await.unwrap()["id"].clone());
    ids.sort_by_key(|v| v.is_number());
    assert_eq!(ids, [json!("big"), json!(2)]);

    peer.send_raw(&big_answer(&json!("big"), 10 * LIMIT)).await;
    let err = result(big).await.unwrap_err();
    assert_names_the_limit(&err, "\"big\"");
    assert_eq!(client.in_flight(), 1, "the other call is still in flight");

    // The other call, and the next one, are answered as usual.
    peer.send(ok(&json!(2))).await;
    assert_eq!(result(other).await.unwrap(), json!({"ok": true}));
    let next = call(&client, json!(3));
    assert_eq!(peer.recv().await.unwrap()["id"], 3);
    peer.send(ok(&json!(3))).await;
    assert_eq!(result(next).await.unwrap(), json!({"ok": true}));
    assert_eq!(client.in_flight(), 0);
    assert!(!client.is_closed());
}

/// An oversize line that answers no call in flight (a notification, a line
/// without an id, another id) ends none: the call is answered later as
/// usual. An id too long to keep ends the calls whose ids are that long,
/// and only those.
#[tokio::test(start_paused = true)]
async fn an_oversize_line_ends_only_the_call_it_answered() {
    let (mut peer, client) = client();
    let short = call(&client, json!(1));
    assert_eq!(peer.recv().await.unwrap()["id"], 1);
    let long_id = "L".repeat(2000);
    let long = call(&client, json!(long_id));
    assert_eq!(peer.recv().await.unwrap()["id"], json!(long_id));

    let pad = "x".repeat(2 * LIMIT);
    for line in [
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"id": 1, "pad": pad}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"pad": pad}}),
        json!({"jsonrpc": "2.0", "result": {"id": 1, "pad": pad}}),
        json!({"jsonrpc": "2.0", "id": 99, "result": {"pad": pad}}),
    ] {
        peer.send(line).await;
    }
    peer.send_raw(format!("not json {pad}").as_bytes()).await;
    // The answer to the long id, over the limit: its id is not kept whole.
    peer.send_raw(&big_answer(&json!(long_id), 2 * LIMIT)).await;
    let err = result(long).await.unwrap_err();
    assert_names_the_limit(&err, "LLLL");

    assert_eq!(client.in_flight(), 1, "the short call goes on");
    assert!(!short.is_finished());
    peer.send(ok(&json!(1))).await;
    assert_eq!(result(short).await.unwrap(), json!({"ok": true}));
    assert_eq!(client.in_flight(), 0);
}

/// The server's twin: a request over the server's line limit is answered
/// with `-32600` naming the limit and carrying the request's id, so the
/// client's call ends with that error; the connection goes on.
#[tokio::test(start_paused = true)]
async fn a_request_over_the_servers_line_limit_ends_the_clients_call() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let (cr, cw) = tokio::io::split(client_io);
    let served = tokio::spawn(StdioServer::new().max_line_bytes(LIMIT).serve(
        tower::service_fn(|req: McpRequest| async move {
            Ok::<_, BoxError>(json!({"method": req.method()}))
        }),
        sr,
        sw,
    ));
    let client = StdioClient::new(cr, cw);
    let big = McpRequest::new(7, "tools/call")
        .with_params(json!({"name": "echo", "arguments": {"pad": "x".repeat(2 * LIMIT)}}));
    let err = tokio::time::timeout(BOUND, client.clone().oneshot(big))
        .await
        .expect("the call never ended")
        .unwrap_err();
    let err = err
        .downcast_ref::<ErrorObject>()
        .unwrap_or_else(|| panic!("the server's error: {err}"));
    assert_eq!(err.code, ErrorObject::INVALID_REQUEST);
    assert!(
        err.message
            .contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "{}",
        err.message
    );
    assert_eq!(client.in_flight(), 0);
    let next = client
        .clone()
        .oneshot(McpRequest::new(8, "ping"))
        .await
        .unwrap();
    assert_eq!(next["method"], "ping");
    client.shutdown().await.unwrap();
    served.await.unwrap().unwrap();
}

/// During the drain (after the shutdown signal, reading on), a request over
/// the limit is answered the same way: its call must end too.
#[tokio::test(start_paused = true)]
async fn a_request_over_the_limit_during_the_drain_is_answered_too() {
    use crate::support::drain::{service, GRACE};
    use tower_mcp_cancel::test_util::{Event, Recorder};

    let (recorder, mut events) = Recorder::new();
    let (mut peer, r, w) = pipe(64 * 1024);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn(
        StdioServer::new()
            .max_line_bytes(LIMIT)
            .shutdown(shutdown.clone())
            .drain_grace(GRACE)
            .serve(service(recorder), r, w),
    );
    peer.request(json!(1), "work", json!({"ms": 60_000})).await;
    assert!(matches!(events.next().await, Event::Started(_)));
    shutdown.cancel();
    peer.request(json!(2), "work", json!({"pad": "x".repeat(2 * LIMIT)}))
        .await;
    let seen = peer.until_response(json!(2)).await;
    let answer = seen.last().unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("exceeds the limit of {LIMIT} bytes")),
        "{answer}"
    );
    served.await.unwrap().unwrap();
}
