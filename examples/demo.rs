//! The main demo: the three layers at work, each step printing what happened.
//!
//! Run with `cargo run --features stdio,http,tasks --example demo` (without
//! the features, the transport steps 5 and 6 and the tasks step 7 are
//! skipped). It takes no flags
//! (`--help` says so; any other argument is refused with exit status 2).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
#[cfg(feature = "stdio")]
mod common;
#[cfg(all(feature = "tasks", feature = "http"))]
#[path = "common/demo_tasks.rs"]
mod demo_tasks;
use tower::BoxError;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Cancelled, Elapsed, McpRequest,
    ProgressObserver, ProgressResetLayer, RequestTimeout, TimeoutLayer,
};

/// Records that the future holding it was dropped before finishing.
struct DropFlag(Arc<AtomicBool>, &'static str);
impl Drop for DropFlag {
    fn drop(&mut self) {
        if !self.0.load(Ordering::SeqCst) {
            println!("   server: handler future for `{}` was DROPPED", self.1);
        }
    }
}

/// A handler that works in 100 ms steps, reporting progress each step, and
/// never looks at its cancellation token.
async fn slow(req: McpRequest) -> Result<serde_json::Value, BoxError> {
    let args: serde_json::Value = req.params_as().unwrap_or_default();
    let steps = args["steps"].as_u64().unwrap_or(10);
    let done = Arc::new(AtomicBool::new(false));
    let _flag = DropFlag(done.clone(), "slow");
    let tap = req.progress_tap().cloned();
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Some(tap) = &tap {
            tap.record(step as f64, Some(steps as f64), None);
        }
    }
    done.store(true, Ordering::SeqCst);
    Ok(serde_json::json!({ "resultType": "complete", "steps": steps }))
}

fn call(id: i64, steps: u64) -> McpRequest {
    McpRequest::new(id, "tools/call")
        .with_params(serde_json::json!({ "name": "slow", "arguments": { "steps": steps } }))
}

fn describe(result: &Result<serde_json::Value, BoxError>, started: Instant) -> String {
    let ms = started.elapsed().as_millis();
    match result {
        Ok(v) => format!("OK after {ms} ms: {v}"),
        Err(e) if e.is::<Elapsed>() => format!("TIMED OUT after {ms} ms: {e}"),
        Err(e) if e.is::<Cancelled>() => format!("CANCELLED after {ms} ms: {e}"),
        Err(e) => format!("ERROR after {ms} ms: {e}"),
    }
}

/// The main demo: the three layers at work (a timeout, a progress idle
/// limit, a cancel, a disconnect; then the stdio and Streamable HTTP
/// transports), each step printing what happened. Takes no flags.
#[derive(clap::Parser, Debug)]
#[command(name = "demo")]
struct Cli {}

#[tokio::main]
async fn main() {
    // No flags: clap's refusal of any argument carries the usage line.
    let Cli {} = clap::Parser::parse();
    println!("tower-mcp-cancel demo: cancelling a request is dropping its future\n");

    // 1. A fixed timeout cancels a slow call.
    println!("1. TimeoutLayer(300 ms) around a 1 s call");
    let mut svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .service(service_fn(slow));
    let t = Instant::now();
    let r = svc.ready().await.unwrap().call(call(1, 10)).await;
    println!("   client: {}\n", describe(&r, t));

    // 2. Progress resets the idle clock: a 1 s call succeeds under a 250 ms idle limit.
    println!("2. ProgressResetLayer(idle 250 ms, max 5 s) around a 1 s call reporting progress every 100 ms");
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(250)).max(Duration::from_secs(5)))
        .service(service_fn(slow));
    let t = Instant::now();
    let req = call(2, 10).with_extension(ProgressObserver::new(|p| {
        println!("   progress {}/{}", p.progress, p.total.unwrap_or(0.0))
    }));
    let r = svc.ready().await.unwrap().call(req).await;
    println!("   client: {}\n", describe(&r, t));

    // 3. The hard maximum fires although progress keeps coming.
    println!("3. Same layer with max 600 ms around a 2 s call that keeps reporting progress");
    let mut svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(250)).max(Duration::from_millis(600)))
        .service(service_fn(slow));
    let t = Instant::now();
    let r = svc.ready().await.unwrap().call(call(3, 20)).await;
    println!("   client: {}\n", describe(&r, t));

    // 4. An explicit cancel: the transport's signal drops the handler future.
    println!("4. CancelOnDisconnectLayer: an explicit cancel 200 ms into a 1 s call");
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .service(service_fn(slow));
    let cancellation = Cancellation::new();
    let token = cancellation.token();
    let watcher = tokio::spawn(async move {
        token.cancelled().await;
        println!("   server: spawned work saw the token fire");
    });
    let req = call(4, 10)
        .with_cancellation(cancellation.clone())
        .with_extension(RequestTimeout::after(Duration::from_secs(5)));
    let t = Instant::now();
    let fut = svc.ready().await.unwrap().call(req);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancellation.cancel(CancelReason::peer(Some("user pressed stop")));
    });
    let r = fut.await;
    let _ = tokio::time::timeout(Duration::from_secs(1), watcher).await;
    println!("   client: {}", describe(&r, t));

    // 5. Streamable HTTP: the client's timeout closes the response stream,
    // and that close is the cancellation the server acts on.
    #[cfg(feature = "http")]
    http_part().await;

    // 6. The stdio transport over an in-memory pipe: the example server's
    // stack behind `serve`, and `StdioClient` under the client layers.
    #[cfg(feature = "stdio")]
    stdio_part().await;

    // The transports are features (none by default): say what was left out.
    #[cfg(not(feature = "http"))]
    println!("\n5. (skipped: the Streamable HTTP transport needs `--features http`)");
    #[cfg(not(feature = "stdio"))]
    println!("\n6. (skipped: the stdio transport needs `--features stdio`)");

    // 7. Tasks: cancelling a task is dropping its future too.
    #[cfg(all(feature = "tasks", feature = "http"))]
    demo_tasks::tasks_part().await;
    #[cfg(not(all(feature = "tasks", feature = "http")))]
    println!("\n7. (skipped: tasks need `--features http,tasks`)");

    println!("\ndone.");
}

/// Step 5: a real loopback HTTP server (axum + the Streamable HTTP adapter)
/// and `HttpClient` under a `TimeoutLayer`.
#[cfg(feature = "http")]
async fn http_part() {
    use tower_mcp_cancel::notify::RequestContext;
    use tower_mcp_cancel::transport::http::{HttpClient, StreamableHttpService};

    println!("\n5. Streamable HTTP: TimeoutLayer(350 ms) over HttpClient, calling a 1 s tool that streams progress");
    let (fired_tx, mut fired_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let handler = service_fn(move |req: McpRequest| {
        let fired_tx = fired_tx.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let token = ctx.token();
            let cancellation = ctx.cancellation().cloned();
            tokio::spawn(async move {
                token.cancelled().await;
                let reason = cancellation
                    .and_then(|c| c.reason().map(ToString::to_string))
                    .unwrap_or_default();
                let _ = fired_tx.send(reason);
            });
            let done = Arc::new(AtomicBool::new(false));
            let _flag = DropFlag(done.clone(), "slow");
            for step in 1..=10 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ctx.progress(step as f64, Some(10.0), None).await;
            }
            done.store(true, Ordering::SeqCst);
            Ok::<_, BoxError>(serde_json::json!({ "resultType": "complete" }))
        }
    });
    let app = axum::Router::new().route_service("/mcp", StreamableHttpService::new(handler));
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => {
            println!("   (skipped: cannot bind a loopback port: {e})");
            return;
        }
    };
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    tokio::spawn(async move { axum::serve(listener, app).await });
    let Ok(uri) = format!("http://{addr}/mcp").parse() else {
        return;
    };
    let mut client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(350)))
        .service(HttpClient::new(uri));
    let req = McpRequest::without_id("tools/call")
        .with_params(serde_json::json!({
            "name": "slow",
            "arguments": { "steps": 10 },
            "_meta": { "progressToken": "demo" }
        }))
        .with_extension(ProgressObserver::new(|p| {
            println!(
                "   client: progress {}/{} (SSE)",
                p.progress,
                p.total.unwrap_or(0.0)
            )
        }));
    let t = Instant::now();
    let r = client.ready().await.unwrap().call(req).await;
    println!("   client: {} -> response stream closed", describe(&r, t));
    match tokio::time::timeout(Duration::from_secs(2), fired_rx.recv()).await {
        Ok(Some(reason)) => println!("   server: token fired: {reason}"),
        _ => println!("   server: no cancellation seen (unexpected)"),
    }
}

/// Reports, on the server side of the stdio part, a handler future dropped
/// before it finished, with the reason its request was cancelled.
#[cfg(feature = "stdio")]
struct StdioDropReport {
    id: String,
    cancellation: Option<Cancellation>,
    done: bool,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
}

#[cfg(feature = "stdio")]
impl Drop for StdioDropReport {
    fn drop(&mut self) {
        if !self.done {
            let reason = self
                .cancellation
                .as_ref()
                .and_then(|c| c.reason().map(ToString::to_string))
                .unwrap_or_else(|| "no reason".into());
            let _ = self.tx.send(format!(
                "   server: handler future for request {} was DROPPED ({reason})",
                self.id
            ));
        }
    }
}

/// Step 6: `StdioServer::serve` and `StdioClient` over `tokio::io::duplex`.
#[cfg(feature = "stdio")]
async fn stdio_part() {
    use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};

    println!("\n6. stdio transport over an in-memory pipe (the example server's stack)");
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel::<String>();
    // The example server's handler, with a drop report around each call.
    let handler = service_fn(move |req: McpRequest| {
        let report = StdioDropReport {
            id: req.id().map(ToString::to_string).unwrap_or_default(),
            cancellation: req.cancellation().cloned(),
            done: false,
            tx: events_tx.clone(),
        };
        async move {
            let mut report = report;
            let out = common::handle(req, common::Options::default()).await;
            report.done = true;
            out
        }
    });
    let server = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(
            TimeoutLayer::new(common::DEFAULT_TIMEOUT)
                .method("tools/call", common::TOOLS_CALL_TIMEOUT),
        )
        .service(handler);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let (client_read, client_write) = tokio::io::split(client_io);
    let served = tokio::spawn(StdioServer::new().serve(server, server_read, server_write));
    let client = StdioClient::new(client_read, client_write);
    let slow = |seconds: f64| {
        McpRequest::without_id("tools/call").with_params(serde_json::json!({
            "name": "slow",
            "arguments": { "seconds": seconds, "interval_ms": 100 },
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" }
        }))
    };
    println!("6a. TimeoutLayer(300 ms) over StdioClient, `slow` for 1 s");
    let t = Instant::now();
    // The client tells the server why it gave up by reading the request's
    // Cancellation, which the layer cancels with its reason: without one,
    // the server would hear only "caller dropped".
    let r = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(300)))
        .service(client.clone())
        .oneshot(slow(1.0).with_cancellation(Cancellation::new()))
        .await;
    println!(
        "   client: {} -> sent notifications/cancelled",
        describe(&r, t)
    );
    report(&mut events).await;

    println!(
        "6b. ProgressResetLayer(idle 250 ms, max 5 s), `slow` for 1 s with progress every 100 ms"
    );
    let t = Instant::now();
    let req = slow(1.0).with_extension(ProgressObserver::new(|p| {
        if p.progress as u64 % 3 == 0 {
            println!(
                "   client: progress {}/{} (notifications/progress)",
                p.progress,
                p.total.unwrap_or(0.0)
            );
        }
    }));
    let r = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(250)).max(Duration::from_secs(5)))
        .service(client.clone())
        .oneshot(req)
        .await;
    println!("   client: {}", describe(&r, t));

    println!("6c. Same idle limit, hard max 600 ms, `slow` for 2 s that keeps reporting progress");
    let t = Instant::now();
    let req = slow(2.0).with_extension(ProgressObserver::new(|_| {}));
    let r = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(Duration::from_millis(250)).max(Duration::from_millis(600)))
        .service(client.clone())
        .oneshot(req)
        .await;
    println!(
        "   client: {} -> sent notifications/cancelled",
        describe(&r, t)
    );
    report(&mut events).await;

    println!("6d. An explicit cancel: the caller drops a 5 s call after 200 ms");
    // The reason goes in the request's Cancellation: cancel it, then drop.
    let cancellation = Cancellation::new();
    let mut call = Box::pin(
        client
            .clone()
            .oneshot(slow(5.0).with_cancellation(cancellation.clone())),
    );
    let t = Instant::now();
    let finished = tokio::select! {
        _ = &mut call => true,
        () = tokio::time::sleep(Duration::from_millis(200)) => false,
    };
    if !finished {
        cancellation.cancel(CancelReason::Other("user pressed stop".into()));
        drop(call);
        println!(
            "   client: dropped the call after {} ms -> sent notifications/cancelled (\"user pressed stop\")",
            t.elapsed().as_millis()
        );
    }
    report(&mut events).await;

    // Closing the client closes the server's input; `serve` returns.
    let _ = client.shutdown().await;
    let _ = served.await;

    grace_part().await;
}

/// Step 6e: a server that gives a cancelled handler a grace to clean up.
#[cfg(feature = "stdio")]
async fn grace_part() {
    use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
    use tower_mcp_cancel::MethodPolicy;

    println!("6e. A grace: StdioServer::grace(500 ms); the handler cleans up for 200 ms after the cancel");
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel::<String>();
    // A handler that waits for its token, then spends 200 ms on its cleanup
    // (closing a file, reaping a child): the grace lets that finish.
    let handler = service_fn(move |req: McpRequest| {
        let token = req.cancellation().map(Cancellation::token);
        let events = events_tx.clone();
        async move {
            if let Some(token) = token {
                token.cancelled().await;
                let t = Instant::now();
                tokio::time::sleep(Duration::from_millis(200)).await;
                let _ = events.send(format!(
                    "   server: the token fired at the cancel; cleanup finished {} ms later, within the grace (its late result is not written)",
                    t.elapsed().as_millis()
                ));
            }
            Ok::<_, BoxError>(serde_json::json!({ "resultType": "complete" }))
        }
    });
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server_io);
    let (client_read, client_write) = tokio::io::split(client_io);
    let server = StdioServer::new().grace(MethodPolicy::new(Duration::from_millis(500)));
    let served = tokio::spawn(server.serve(handler, server_read, server_write));
    let client = StdioClient::new(client_read, client_write);
    let cancellation = Cancellation::new();
    // As in 6d: the reason in the request's Cancellation, then the drop.
    let mut call = Box::pin(
        client.clone().oneshot(
            McpRequest::without_id("tools/call")
                .with_params(serde_json::json!({
                    "name": "cleanup",
                    "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" }
                }))
                .with_cancellation(cancellation.clone()),
        ),
    );
    let t = Instant::now();
    let finished = tokio::select! {
        _ = &mut call => true,
        () = tokio::time::sleep(Duration::from_millis(100)) => false,
    };
    if !finished {
        cancellation.cancel(CancelReason::Other("user pressed stop".into()));
        drop(call);
        println!(
            "   client: dropped the call after {} ms -> sent notifications/cancelled",
            t.elapsed().as_millis()
        );
    }
    report(&mut events).await;
    let _ = client.shutdown().await;
    let _ = served.await;
}

/// Prints the server's drop report (waiting for it, bounded).
#[cfg(feature = "stdio")]
async fn report(events: &mut tokio::sync::mpsc::UnboundedReceiver<String>) {
    match tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
        Ok(Some(line)) => println!("{line}"),
        _ => println!("   server: (no drop reported; unexpected)"),
    }
}
