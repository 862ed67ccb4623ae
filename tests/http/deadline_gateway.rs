//! A deadline that travels through a gateway: an HTTP client sends its
//! budget to a gateway (`StreamableHttpService`) whose handler calls a
//! stdio backend through a `StdioClient` stack with a longer policy,
//! passing its own deadline on with one line
//! (`with_extension(ctx.deadline_cap())`). The backend's handler sees the
//! outer client's deadline (later only by the time the request took to
//! get there: a budget on the wire is relative, as gRPC's `grpc-timeout`)
//! and is dropped at it; the outer client hears of an inherited deadline.
#![cfg(all(feature = "http", feature = "stdio"))]

use crate::support::http as http_support;

use std::time::Duration;

use http_support::*;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::Recorder;
use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{DeadlineCap, McpRequest, RequestView, TimeoutLayer};

const KEY: &str = "com.example/budgetMs";
const LONG: Duration = Duration::from_secs(60);

/// What the backend's handler reports.
#[derive(Debug)]
enum Seen {
    /// Started, with the deadline it sees.
    Started(Instant, Option<Instant>),
    /// Its future was dropped, at this instant.
    Dropped(Instant),
}

/// Reports its drop.
struct OnDrop(mpsc::UnboundedSender<Seen>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Seen::Dropped(Instant::now()));
    }
}

/// The stdio backend: a 60 s policy, a handler that never answers.
fn backend(tx: mpsc::UnboundedSender<Seen>) -> BoxCloneService<McpRequest, Value, BoxError> {
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(LONG))
            .service(service_fn(move |req: McpRequest| {
                let deadline = RequestContext::of(&req).deadline();
                let _ = tx.send(Seen::Started(Instant::now(), deadline));
                let guard = OnDrop(tx.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    Ok::<_, BoxError>(Value::Null)
                }
            })),
    )
}

#[tokio::test]
async fn the_backend_sees_the_outer_deadline_and_is_dropped_at_it() {
    // Backend, over an in-memory stdio connection, honouring budgets.
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let (server_end, client_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let (cr, cw) = tokio::io::split(client_end);
    tokio::spawn(
        StdioServer::new()
            .budget_key(KEY)
            .expect("a valid budget key")
            .serve(backend(seen_tx), sr, sw),
    );

    // Gateway: its client stack allows 60 s; its handler passes its own
    // deadline on.
    let downstream = ServiceBuilder::new()
        .layer(TimeoutLayer::new(LONG))
        .service(
            StdioClient::builder()
                .budget_key(KEY)
                .expect("a valid budget key")
                .connect(cr, cw),
        );
    let gateway = service_fn(move |req: McpRequest| {
        let ctx = RequestContext::of(&req);
        let params: Value = req.params_as().unwrap_or(Value::Null);
        let call = McpRequest::without_id(req.method())
            .with_params(params)
            .with_extension(ctx.deadline_cap()); // the one line
        downstream.clone().oneshot(call)
    });
    let gateway = StreamableHttpService::new(gateway)
        .budget_key(KEY)
        .expect("a valid budget key");
    let addr = serve(gateway, Proto::H1, Recorder::new().0).await;

    // The outer client: a cap of 1 s it sends as its budget; no timer of
    // its own, so what ends the call is the deadline that travelled.
    let outer = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .budget_key(KEY)
        .expect("a valid budget key")
        .build();
    let mut req = McpRequest::without_id("tools/call")
        .with_params(json!({"name": "hang", "arguments": {}}))
        .with_extension(DeadlineCap::after(Duration::from_secs(1)));
    let started = req.started_at();
    let deadline = req
        .extensions()
        .get::<DeadlineCap>()
        .and_then(DeadlineCap::deadline)
        .unwrap();
    let call = tokio::spawn(outer.oneshot(req));

    let Some(Seen::Started(backend_started, Some(seen_deadline))) = seen.recv().await else {
        panic!("the backend's handler started without a deadline");
    };
    // The outer deadline, later by at most the time the request took to get
    // there (each hop's budget is rounded down to whole milliseconds).
    let transit = backend_started - started;
    assert!(
        seen_deadline <= deadline + transit,
        "backend deadline {:?} after the outer one",
        seen_deadline - deadline
    );
    assert!(
        seen_deadline + Duration::from_millis(10) >= deadline - transit,
        "backend deadline {:?} before the outer one",
        deadline - seen_deadline
    );
    let Some(Seen::Dropped(dropped)) = seen.recv().await else {
        panic!("no drop");
    };
    assert!(
        dropped >= deadline - transit && dropped <= deadline + Duration::from_millis(500),
        "dropped {:?} from the outer deadline",
        dropped.saturating_duration_since(deadline)
    );
    let err = bounded(call).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("inherited"), "{err}");
}

/// What the handler of an HTTP server (a 10 s policy; the budget key on or
/// off) has left for a call whose client sends a 2 s budget.
async fn remaining_over_http(key_on: bool) -> Value {
    let handler = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(10)))
        .service(service_fn(|req: McpRequest| async move {
            let left = RequestContext::of(&req).remaining();
            Ok::<_, BoxError>(json!({ "remainingMs": left.map(|d| d.as_millis() as u64) }))
        }));
    let mut service = StreamableHttpService::new(handler);
    if key_on {
        service = service.budget_key(KEY).expect("a valid budget key");
    }
    let addr = serve(service, Proto::H1, Recorder::new().0).await;
    let client = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap())
        .budget_key(KEY)
        .expect("a valid budget key")
        .build();
    let req = McpRequest::without_id("tools/call")
        .with_params(json!({"name": "deadline", "arguments": {}}))
        .with_extension(DeadlineCap::after(Duration::from_secs(2)));
    let v = bounded(client.oneshot(req)).await.unwrap();
    v["remainingMs"].clone()
}

#[tokio::test]
async fn an_http_server_honours_a_budget_only_with_the_key() {
    let on = remaining_over_http(true).await.as_u64().unwrap();
    assert!((1_500..=2_000).contains(&on), "{on}");
    let off = remaining_over_http(false).await.as_u64().unwrap();
    assert!((9_500..=10_000).contains(&off), "{off}");
}
