//! Which task a handler runs in: by default the reader polls each new
//! request once itself, so a handler ready by then runs on the serving
//! task; with `StdioServer::first_poll_on_reader(false)` every handler runs
//! only in a task of its own, from its first poll on.
#![cfg(feature = "stdio")]

use std::sync::{Arc, Mutex};
use std::task::Poll;

use serde_json::json;
use tokio::task::Id;
use tower::service_fn;
use tower::BoxError;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::McpRequest;

use crate::support::stdio::pipe;

/// What one handler saw: the current task at its first and at its second
/// poll.
#[derive(Clone, Copy, Debug)]
struct Seen {
    first: Option<Id>,
    second: Option<Id>,
}

/// Pending once (waking itself), then ready: a handler that awaits.
async fn wait_once() {
    let mut waited = false;
    std::future::poll_fn(|cx| {
        if waited {
            return Poll::Ready(());
        }
        waited = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Serves two requests, one after the other; returns the serving task and
/// what each handler saw.
async fn serve_two(server: StdioServer) -> (Id, Vec<Seen>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let svc = service_fn(move |_: McpRequest| {
        let log = log.clone();
        async move {
            let first = tokio::task::try_id();
            wait_once().await;
            let second = tokio::task::try_id();
            log.lock().unwrap().push(Seen { first, second });
            Ok::<_, BoxError>(json!({}))
        }
    });
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(server.serve(svc, r, w));
    let serving = served.id();
    for id in [1, 2] {
        peer.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "t"}}),
        )
        .await;
        peer.until_response(json!(id)).await;
    }
    drop(peer);
    served.await.unwrap().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "both handlers ran to their end");
    (serving, seen)
}

#[tokio::test]
async fn off_every_handler_runs_only_in_its_own_task() {
    let (serving, seen) = serve_two(StdioServer::new().first_poll_on_reader(false)).await;
    for (i, s) in seen.iter().enumerate() {
        let task = s.first.expect("polled inside a task");
        assert_ne!(task, serving, "request {i}: first poll not on the reader");
        assert_eq!(s.second, Some(task), "request {i}: one task throughout");
    }
    assert_ne!(seen[0].first, seen[1].first, "a task per request");
}

#[tokio::test]
async fn on_by_default_the_first_poll_runs_on_the_reader() {
    let (serving, seen) = serve_two(StdioServer::new()).await;
    // The first request always gets the reader's poll (later ones may be
    // spawned unpolled, should a slow machine make that poll look long).
    assert_eq!(seen[0].first, Some(serving), "first poll on the reader");
    let own = seen[0].second.expect("polled inside a task");
    assert_ne!(own, serving, "then on in a task of its own");
}
