//! The wire budget over stdio: a `StdioClient` with a budget key writes the
//! time left until its request's deadline into `_meta`; a `StdioServer`
//! with the key takes `min(its policy, budget)` (ignoring what is not a
//! non-negative integer of milliseconds, clamping what is huge), names an
//! expiry at the budget as inherited, and ignores the key when off.
#![cfg(feature = "stdio")]

use crate::support::stdio as stdio_support;

use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::*;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{Cancellation, DeadlineCap, McpRequest, TimeoutLayer};

const KEY: &str = "com.example/budgetMs";
const POLICY: Duration = Duration::from_secs(10);

/// A server stack with a 10 s policy: `deadline` answers the milliseconds
/// its handler has left, `hang` never answers.
fn stack() -> BoxCloneService<McpRequest, Value, BoxError> {
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(POLICY))
            .service(service_fn(|req: McpRequest| async move {
                let left = RequestContext::of(&req).remaining();
                if req.method() == "hang" {
                    std::future::pending::<()>().await;
                }
                Ok::<_, BoxError>(json!({ "remainingMs": left.map(|d| d.as_millis() as u64) }))
            })),
    )
}

fn serve(server: StdioServer) -> Peer {
    let (peer, r, w) = pipe(64 * 1024);
    tokio::spawn(server.serve(stack(), r, w));
    peer
}

/// What the handler has left for a request whose `_meta[KEY]` is `budget`
/// (absent when `None`).
async fn remaining(peer: &mut Peer, id: i64, budget: Option<Value>) -> Value {
    let params = match budget {
        Some(b) => json!({ "_meta": { KEY: b } }),
        None => json!({}),
    };
    peer.request(json!(id), "deadline", params).await;
    let v = peer.recv().await.unwrap();
    assert_eq!(v["id"], id, "{v}");
    v["result"]["remainingMs"].clone()
}

#[tokio::test(start_paused = true)]
async fn a_server_with_the_key_takes_the_earlier_of_its_policy_and_the_budget() {
    let mut peer = serve(
        StdioServer::new()
            .budget_key(KEY)
            .expect("a valid budget key"),
    );
    let policy = json!(10_000);
    let cases = [
        (Some(json!(1_500)), json!(1_500)),
        (Some(json!(0)), json!(0)),
        (None, policy.clone()),
        // Never longer than the policy.
        (Some(json!(60_000)), policy.clone()),
        (Some(json!(u64::MAX)), policy.clone()),
        (
            Some(json!(99_999_999_999_999_999_999_999_u128 as f64)),
            policy.clone(),
        ),
        // Malformed: ignored.
        (Some(json!("1500")), policy.clone()),
        (Some(json!(-1)), policy.clone()),
        (Some(json!(1.5)), policy.clone()),
        (Some(json!({ "ms": 1 })), policy.clone()),
        (Some(json!([1_500])), policy.clone()),
        (Some(Value::Null), policy.clone()),
    ];
    for (i, (budget, expected)) in cases.into_iter().enumerate() {
        let shown = format!("{budget:?}");
        assert_eq!(
            remaining(&mut peer, i as i64, budget).await,
            expected,
            "{shown}"
        );
    }
    // An integer too large for any number type is a huge budget: the policy.
    peer.send_raw(
        format!(
            r#"{{"jsonrpc":"2.0","id":"big","method":"deadline","params":{{"_meta":{{"{KEY}":123456789012345678901234567890}}}}}}"#
        )
        .as_bytes(),
    )
    .await;
    let v = peer.recv().await.unwrap();
    assert_eq!(v["result"]["remainingMs"], policy, "{v}");
    // A `_meta` key given twice is ambiguous: ignored.
    peer.send_raw(
        format!(
            r#"{{"jsonrpc":"2.0","id":"twice","method":"deadline","params":{{"_meta":{{"{KEY}":1,"{KEY}":2}}}}}}"#
        )
        .as_bytes(),
    )
    .await;
    let v = peer.recv().await.unwrap();
    assert_eq!(v["result"]["remainingMs"], policy, "{v}");
}

#[tokio::test(start_paused = true)]
async fn without_the_key_a_budget_is_ignored() {
    let mut peer = serve(StdioServer::new());
    assert_eq!(
        remaining(&mut peer, 1, Some(json!(1_500))).await,
        json!(10_000)
    );
    // Another key than the one configured is ignored too.
    let mut peer = serve(
        StdioServer::new()
            .budget_key("com.example/other")
            .expect("a valid budget key"),
    );
    assert_eq!(
        remaining(&mut peer, 1, Some(json!(1_500))).await,
        json!(10_000)
    );
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_runs_out_is_answered_as_an_inherited_deadline() {
    let mut peer = serve(
        StdioServer::new()
            .budget_key(KEY)
            .expect("a valid budget key"),
    );
    let start = Instant::now();
    peer.request(json!(7), "hang", json!({ "_meta": { KEY: 1_500 } }))
        .await;
    let v = peer.recv().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1_500));
    assert_eq!(v["id"], 7, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("inherited"), "{v}");
}

/// The `_meta[KEY]` of the next request the client writes, answering it.
async fn written_budget(peer: &mut Peer) -> Option<Value> {
    let v = peer.recv().await.unwrap();
    peer.send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {}}))
        .await;
    let budget = v["params"]["_meta"].get(KEY).cloned();
    // Nothing else of the params is lost.
    if v["params"].is_object() {
        assert_eq!(v["params"]["kept"], true, "{v}");
    }
    budget
}

#[tokio::test(start_paused = true)]
async fn a_client_with_the_key_writes_what_is_left_of_its_deadline() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::builder()
        .budget_key(KEY)
        .expect("a valid budget key")
        .connect(r, w);
    let timed = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(2)))
        .service(client.clone());
    let params = json!({ "kept": true });

    // A timeout above, told through the request's cancellation.
    let req = McpRequest::new(1, "tools/call")
        .with_params(params.clone())
        .with_cancellation(Cancellation::new());
    let call = tokio::spawn(timed.clone().oneshot(req));
    assert_eq!(written_budget(&mut peer).await, Some(json!(2_000)));
    call.await.unwrap().unwrap();

    // A cap in the extensions, without any layer.
    let req = McpRequest::new(2, "tools/call")
        .with_params(params.clone())
        .with_extension(DeadlineCap::after(Duration::from_millis(700)));
    let call = tokio::spawn(client.clone().oneshot(req));
    assert_eq!(written_budget(&mut peer).await, Some(json!(700)));
    call.await.unwrap().unwrap();

    // The earlier of the two.
    let req = McpRequest::new(3, "tools/call")
        .with_params(params.clone())
        .with_cancellation(Cancellation::new())
        .with_extension(DeadlineCap::after(Duration::from_millis(1_234)));
    let call = tokio::spawn(timed.clone().oneshot(req));
    assert_eq!(written_budget(&mut peer).await, Some(json!(1_234)));
    call.await.unwrap().unwrap();

    // No deadline: nothing written.
    let req = McpRequest::new(4, "tools/call").with_params(params.clone());
    let call = tokio::spawn(client.clone().oneshot(req));
    assert_eq!(written_budget(&mut peer).await, None);
    call.await.unwrap().unwrap();

    // Positional params cannot carry one: sent as they are.
    let req = McpRequest::new(5, "tools/call")
        .with_params(json!([1, 2]))
        .with_extension(DeadlineCap::after(Duration::from_millis(700)));
    let call = tokio::spawn(client.clone().oneshot(req));
    let v = peer.recv().await.unwrap();
    assert_eq!(v["params"], json!([1, 2]));
    peer.send(json!({"jsonrpc": "2.0", "id": 5, "result": {}}))
        .await;
    call.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_client_without_the_key_writes_no_budget() {
    let (mut peer, r, w) = pipe(64 * 1024);
    let client = StdioClient::new(r, w);
    let req = McpRequest::new(1, "tools/call")
        .with_params(json!({ "kept": true }))
        .with_extension(DeadlineCap::after(Duration::from_millis(700)));
    let call = tokio::spawn(client.clone().oneshot(req));
    assert_eq!(written_budget(&mut peer).await, None);
    call.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn client_to_server_the_server_handler_sees_the_clients_deadline() {
    let (server_end, client_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let (cr, cw) = tokio::io::split(client_end);
    tokio::spawn(
        StdioServer::new()
            .budget_key(KEY)
            .expect("a valid budget key")
            .serve(stack(), sr, sw),
    );
    let client = StdioClient::builder()
        .budget_key(KEY)
        .expect("a valid budget key")
        .connect(cr, cw);
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(3)))
        .service(client);
    let req = McpRequest::new(1, "deadline").with_cancellation(Cancellation::new());
    let v = svc.oneshot(req).await.unwrap();
    assert_eq!(v["remainingMs"], 3_000);
}

/// A call that waited — for the writer, blocked on a server that does not
/// read, and for room in the write queue — is written with the time left
/// when it goes on the wire (on tokio's clock), not when it was called.
#[tokio::test(start_paused = true)]
async fn a_queued_call_is_written_with_the_time_left_then() {
    let (mut peer, r, w) = pipe(64);
    let client = StdioClient::builder()
        .budget_key(KEY)
        .expect("a valid budget key")
        .write_queue(1)
        .connect(r, w);
    // The first fills the pipe (the peer reads nothing yet); the second
    // waits in the queue, the third for room in it.
    let big = McpRequest::new(1, "tools/call").with_params(json!({ "pad": "x".repeat(1024) }));
    let capped = |id: i64| {
        McpRequest::new(id, "tools/call")
            .with_params(json!({ "kept": true }))
            .with_extension(DeadlineCap::after(Duration::from_secs(3)))
    };
    let calls: Vec<_> = [big, capped(2), capped(3)]
        .into_iter()
        .map(|req| tokio::spawn(client.clone().call(req)))
        .collect();
    tokio::time::advance(Duration::from_millis(1_500)).await;
    let mut written = Vec::new();
    for _ in 0..3 {
        let v = peer.recv().await.unwrap();
        peer.send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {}}))
            .await;
        written.push((v["id"].clone(), v["params"]["_meta"].get(KEY).cloned()));
    }
    assert_eq!(
        written,
        [
            (json!(1), None),
            (json!(2), Some(json!(1_500))),
            (json!(3), Some(json!(1_500)))
        ]
    );
    for call in calls {
        call.await.unwrap().unwrap();
    }
}
