//! rmcp's client as a tower service (`tower_mcp_cancel_rmcp::RmcpClient`)
//! under this crate's layers, calling this crate's own stdio server over an
//! in-memory pipe: a client deadline drops the server's handler (so a
//! `notifications/cancelled` went over the wire), and server progress
//! resets the client's idle limit.

use std::time::Duration;

use rmcp::service::RunningService;
use rmcp::RoleClient;
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder, ServiceExt as _};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::{Event, Events, Recorder};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{
    CancelReason, Cancellation, Elapsed, McpRequest, ProgressObserver, ProgressResetLayer,
    TimeoutLayer,
};
use tower_mcp_cancel_rmcp::{RmcpClient, RouteProgress};

/// Longer than any test runs (on the paused clock).
const BOUND: Duration = Duration::from_secs(3600);

/// The server's handler: `initialize`, and `tools/call` with `hang` (never
/// looks at its token) or `progress` (reports every 100 ms for a second).
fn handler(rec: Recorder) -> BoxCloneService<McpRequest, Value, BoxError> {
    BoxCloneService::new(service_fn(move |req: McpRequest| {
        let rec = rec.clone();
        async move {
            let params: Value = req.params_as().unwrap_or(Value::Null);
            match (req.method(), params["name"].as_str()) {
                ("initialize", _) => Ok(json!({
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "test", "version": "0"},
                })),
                ("tools/call", Some("hang")) => {
                    let p = rec.start(&req);
                    rec.watch_token(&req);
                    tokio::time::sleep(BOUND).await;
                    p.finish();
                    Ok(json!({"content": []}))
                }
                ("tools/call", Some("progress")) => {
                    let ctx = RequestContext::of(&req);
                    let p = rec.start(&req);
                    for i in 1..=10 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        ctx.progress(f64::from(i), Some(10.0), None).await;
                    }
                    p.finish();
                    Ok(json!({"content": [{"type": "text", "text": "done"}]}))
                }
                // An answer of 8 KiB.
                ("tools/call", Some("big")) => {
                    Ok(json!({"content": [{"type": "text", "text": "x".repeat(8192)}]}))
                }
                // What reached the server: the request's id and token.
                ("tools/call", Some("wire")) => {
                    let wire = json!({"id": req.id(), "token": req.progress_token()});
                    Ok(json!({"content": [{"type": "text", "text": wire.to_string()}]}))
                }
                (m, _) => Err(format!("unexpected {m}").into()),
            }
        }
    }))
}

/// Our stdio server on one end of a pipe, an initialized rmcp client with
/// progress routing on the other.
async fn start() -> (RunningService<RoleClient, RouteProgress<()>>, Events) {
    let (rec, ev) = Recorder::new();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(StdioServer::new().serve(handler(rec), sr, sw));
    let (cr, cw) = tokio::io::split(client_io);
    let running = rmcp::serve_client(RouteProgress::new(()), (cr, cw))
        .await
        .expect("initialized");
    (running, ev)
}

fn call(tool: &str) -> McpRequest {
    McpRequest::without_id("tools/call").with_params(json!({"name": tool, "arguments": {}}))
}

#[tokio::test(start_paused = true)]
async fn a_client_timeout_drops_the_server_handler() {
    let (running, mut ev) = start().await;
    let client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .service(RmcpClient::new(&running));
    // The reason travels in the request's cancellation, which the layer
    // cancels before it drops the call.
    let req = call("hang").with_cancellation(Cancellation::new());
    let err = client.oneshot(req).await.unwrap_err();
    assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
    // Only a notifications/cancelled on the wire makes the server drop it.
    let seen = ev.until(|e| matches!(e, Event::Dropped(_))).await;
    assert!(matches!(seen[0], Event::Started(_)), "{seen:?}");
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Done(_))),
        "{seen:?}"
    );
    // The token fires with the reason the client's drop carried.
    let reason = seen.iter().find_map(|e| match e {
        Event::Token(_, Some(CancelReason::Peer(Some(r)))) => Some(r),
        _ => None,
    });
    assert!(reason.is_some_and(|r| r.contains("timed out")), "{seen:?}");
    running.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn server_progress_resets_the_client_idle_limit() {
    let (running, mut ev) = start().await;
    let client = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(300)))
        .service(RmcpClient::new(&running));
    let started = tokio::time::Instant::now();
    let out = client
        .oneshot(call("progress"))
        .await
        .expect("progress kept it alive");
    assert_eq!(out["content"][0]["text"], "done");
    // A second, more than three idle limits.
    assert!(started.elapsed() >= Duration::from_secs(1));
    let seen = ev.until(|e| matches!(e, Event::Done(_))).await;
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Dropped(_))),
        "{seen:?}"
    );
    running.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_progress_the_idle_limit_cancels_the_call() {
    let (running, mut ev) = start().await;
    let client = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(300)))
        .service(RmcpClient::new(&running));
    let err = client.oneshot(call("hang")).await.unwrap_err();
    assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
    ev.until(|e| matches!(e, Event::Dropped(_))).await;
    running.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_the_layer_progress_reaches_the_callers_observer() {
    let (running, _ev) = start().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let observer = ProgressObserver::new(move |p| {
        let _ = tx.send(p.progress);
    });
    let out = RmcpClient::new(&running)
        .oneshot(call("progress").with_extension(observer))
        .await
        .expect("answered");
    assert_eq!(out["content"][0]["text"], "done");
    let mut seen = Vec::new();
    while let Ok(p) = rx.try_recv() {
        seen.push(p);
    }
    // rmcp handles each notification in a task of its own, so the last
    // report may lose the race with the answer; the earlier ones were seen.
    assert!(seen.len() >= 9, "{seen:?}");
    assert_eq!(seen[..9], (1..=9).map(f64::from).collect::<Vec<_>>());
    running.cancel().await.unwrap();
}

/// Ids and progress tokens are unique among the calls in flight with the
/// rmcp client too: rmcp gives every request its own id and token, so a
/// caller's id and token that another call in flight carries never reach
/// the server twice.
#[tokio::test(start_paused = true)]
async fn ids_and_tokens_are_unique_among_calls_in_flight() {
    let (running, mut ev) = start().await;
    let client = RmcpClient::new(&running);
    let as_caller = |tool: &str| {
        McpRequest::new(7, "tools/call")
            .with_params(json!({"name": tool, "arguments": {}, "_meta": {"progressToken": "p"}}))
    };
    let first = tokio::spawn(client.clone().oneshot(as_caller("hang")));
    let started = ev.until(|e| matches!(e, Event::Started(_))).await;
    let Some(Event::Started(first_id)) = started.last().cloned() else {
        unreachable!()
    };
    let out = client.clone().oneshot(as_caller("wire")).await.unwrap();
    let wire: Value = serde_json::from_str(out["content"][0]["text"].as_str().unwrap()).unwrap();
    let second_id: tower_mcp_cancel::jsonrpc::RequestId =
        serde_json::from_value(wire["id"].clone()).unwrap();
    assert_ne!(second_id, first_id, "{wire}");
    assert!(
        !wire["token"].is_null(),
        "rmcp gives every request a token: {wire}"
    );
    assert_ne!(wire["token"], "p", "{wire}");
    first.abort();
    running.cancel().await.unwrap();
}

/// An initialized rmcp client whose server (by hand, on a pipe of one
/// byte) answers `initialize`, reads `calls` requests and then reads
/// nothing more: a transport on which a cancel never gets written. The
/// receiver yields once the server has read the `calls` requests.
async fn start_stuck(
    calls: usize,
) -> (
    RunningService<RoleClient, RouteProgress<()>>,
    tokio::sync::oneshot::Receiver<()>,
) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (client_io, server_io) = tokio::io::duplex(1);
    let (read_all, all_read) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(server_io);
        let mut lines = BufReader::new(r).lines();
        let init: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        let answer = json!({"jsonrpc": "2.0", "id": init["id"], "result": {
            "protocolVersion": init["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stuck", "version": "0"},
        }});
        w.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
        let mut seen = 0;
        while seen < calls {
            let line = lines.next_line().await.unwrap().unwrap();
            if line.contains("tools/call") {
                seen += 1;
            }
        }
        let _ = read_all.send(());
        // Holds the pipe and reads nothing more.
        std::future::pending::<()>().await;
        drop((lines, w));
    });
    let (cr, cw) = tokio::io::split(client_io);
    let running = rmcp::serve_client(RouteProgress::new(()), (cr, cw))
        .await
        .expect("initialized");
    (running, all_read)
}

/// The `notifications/cancelled` sends of dropped calls are bounded: at
/// most 64 under way per client (past that none is sent, nothing is
/// spawned), and each ends after 10 s on a transport that takes nothing.
#[tokio::test(start_paused = true)]
async fn cancel_sends_of_dropped_calls_are_bounded_in_number_and_time() {
    const CALLS: usize = 65;
    let (running, all_read) = start_stuck(CALLS).await;
    let client = RmcpClient::new(&running);
    let mut calls: Vec<_> = (0..CALLS)
        .map(|_| Box::pin(client.clone().oneshot(call("hang"))))
        .collect();
    let poll_all = futures_util::future::select_all(calls.iter_mut());
    tokio::select! {
        _ = poll_all => panic!("a call answered"),
        _ = all_read => {}
    }
    // Let every call reach its wait for the answer (the paused clock moves
    // only once nothing else can run).
    let poll_all = futures_util::future::select_all(calls.iter_mut());
    assert!(tokio::time::timeout(Duration::from_millis(1), poll_all)
        .await
        .is_err());
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    drop(calls);
    assert_eq!(
        metrics.num_alive_tasks(),
        before + 64,
        "one send per dropped call, up to 64"
    );
    // rmcp then runs each notification's write in a task of its own (its
    // service loop's), which waits on the transport as long as it takes
    // nothing: those are rmcp's, and outlive our sends' timer.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    let peak = metrics.num_alive_tasks();
    tokio::time::advance(Duration::from_secs(10) - Duration::from_millis(1)).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert_eq!(metrics.num_alive_tasks(), peak, "a send ended early");
    tokio::time::advance(Duration::from_millis(1)).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        peak - 64,
        "our sends ended after their 10 s"
    );
}

/// What an rmcp client's caller gets when an answer is over the line limit
/// of rmcp's transport (16 MiB by default, `with_max_line_length`): rmcp
/// drops the line (an error log) and the call has no answer, so it ends by
/// its deadline — the reason to keep a `TimeoutLayer` above `RmcpClient`,
/// as its docs and SECURITY.md say. The connection goes on.
#[tokio::test(start_paused = true)]
async fn an_answer_over_rmcps_line_limit_ends_the_call_only_by_its_deadline() {
    use rmcp::transport::async_rw::AsyncRwTransport;
    let (rec, _ev) = Recorder::new();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(StdioServer::new().serve(handler(rec), sr, sw));
    let (cr, cw) = tokio::io::split(client_io);
    let transport =
        AsyncRwTransport::<RoleClient, _, _>::new_client(cr, cw).with_max_line_length(4096);
    let running = rmcp::serve_client(RouteProgress::new(()), transport)
        .await
        .expect("initialized");
    let client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(5)))
        .service(RmcpClient::new(&running));
    let started = tokio::time::Instant::now();
    let err = client.clone().oneshot(call("big")).await.unwrap_err();
    assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let out = client.oneshot(call("wire")).await.unwrap();
    assert!(out["content"][0]["text"].as_str().is_some(), "{out}");
    running.cancel().await.unwrap();
}
