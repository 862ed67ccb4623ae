//! Shutdown with requests in flight: end of stdin, the stdio driver's
//! shutdown signal, and the Streamable HTTP server's shutdown token (under
//! axum's graceful shutdown) each cancel every in-flight request with a
//! reason — its handler future dropped (drop probes), its [`Cancellation`]
//! carrying the reason — and the server returns within 100 ms of the last
//! handler drop.
//!
//! The 100 ms is an asserted maximum, measured on tokio's clock between the
//! last drop and the return of the serve future; nothing here sleeps to wait
//! for anything. Under a paused clock a timer-based wait inside the server
//! would show up as a jump of tokio's clock; without it, real slowness shows
//! up as real time.
#![cfg(all(feature = "stdio", feature = "http", feature = "test-util"))]

use crate::support::stdio as stdio_support;

use std::io;
use std::time::Duration;

use serde_json::{json, Value};
use stdio_support::Peer;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tower::service_fn;
use tower::BoxError;
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest};

/// The longest a server may take to return after its last handler was
/// dropped.
const RETURN_BOUND: Duration = Duration::from_millis(100);

/// Every wait for an event is bounded by this (a guard against hangs, not a
/// synchronisation).
const WAIT: Duration = Duration::from_secs(10);

/// What a handler reports when it starts: its id, the probe watching its
/// future, and its cancellation (for the reason).
struct Started {
    id: String,
    probe: DropProbe,
    cancellation: Cancellation,
}

/// A service whose every request reports [`Started`] and then never ends on
/// its own (holding its drop guard). `sse` sends a notification first (so
/// over HTTP the response is already streaming); `subscriptions/listen`
/// acknowledges first too.
fn hanging_service(
    tx: mpsc::UnboundedSender<Started>,
) -> impl tower::Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl std::future::Future<Output = Result<Value, BoxError>> + Send,
> + Clone
       + Send
       + Sync
       + 'static {
    service_fn(move |req: McpRequest| {
        let tx = tx.clone();
        async move {
            let ctx = RequestContext::of(&req);
            let id = req.id().map(|i| i.to_string()).unwrap_or_default();
            let (probe, guard) = DropProbe::new();
            let cancellation = ctx
                .cancellation()
                .cloned()
                .expect("the transport gives every request a Cancellation");
            let tool = req.params_as::<Value>().unwrap_or_default()["name"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            if tool == "sse" || req.method() == "subscriptions/listen" {
                ctx.notify(
                    "notifications/message",
                    &json!({"level": "info", "data": "working"}),
                )
                .await;
            }
            let _ = tx.send(Started {
                id,
                probe,
                cancellation,
            });
            std::future::pending::<()>().await;
            guard.finish();
            Ok::<_, BoxError>(json!({}))
        }
    })
}

async fn next_started(rx: &mut mpsc::UnboundedReceiver<Started>) -> Started {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("a handler should have started")
        .expect("service gone")
}

/// Checks every handler was dropped before finishing, with `reason`, and
/// that `returned_at` is at most [`RETURN_BOUND`] after the last drop (and
/// not before it). Returns the distance.
fn check_all_cancelled(
    started: &[Started],
    reason: &CancelReason,
    returned_at: Instant,
) -> Duration {
    let mut last = None;
    for s in started {
        assert!(
            s.probe.was_cancelled(),
            "handler {} was not dropped before finishing",
            s.id
        );
        assert_eq!(
            s.cancellation.reason(),
            Some(reason),
            "handler {} cancelled with the wrong reason",
            s.id
        );
        let at = s.probe.dropped_at().unwrap();
        last = Some(last.map_or(at, |l: Instant| l.max(at)));
    }
    let last = last.expect("at least one handler");
    assert!(
        returned_at >= last,
        "the server returned before its last handler was dropped"
    );
    let after = returned_at - last;
    eprintln!(
        "returned {after:?} after the last of {} handler drops",
        started.len()
    );
    assert!(
        after <= RETURN_BOUND,
        "the server returned {after:?} after its last handler drop (bound {RETURN_BOUND:?})"
    );
    after
}

struct StdioRun {
    peer: Peer,
    started: mpsc::UnboundedReceiver<Started>,
    /// The serve result and when (tokio's clock) `serve` returned.
    served: tokio::task::JoinHandle<(io::Result<()>, Instant)>,
}

fn start_stdio(shutdown: Option<oneshot::Receiver<()>>) -> StdioRun {
    let (tx, started) = mpsc::unbounded_channel();
    let svc = hanging_service(tx);
    let (peer, r, w) = stdio_support::pipe(64 * 1024);
    let served = tokio::spawn(async move {
        let res = match shutdown {
            Some(rx) => {
                let token = tokio_util::sync::CancellationToken::new();
                let fire = token.clone();
                tokio::spawn(async move {
                    let _ = rx.await;
                    fire.cancel();
                });
                StdioServer::new().shutdown(token).serve(svc, r, w).await
            }
            None => StdioServer::new().serve(svc, r, w).await,
        };
        (res, Instant::now())
    });
    StdioRun {
        peer,
        started,
        served,
    }
}

/// Five requests in flight (two of them mid-progress), then `end` ends the
/// connection; all five are cancelled with `reason`, nothing is written, and
/// `serve` returns promptly.
async fn stdio_case(eof: bool) {
    let (stop, rx) = oneshot::channel();
    let mut run = start_stdio((!eof).then_some(rx));
    for id in 1..=5 {
        let name = if id % 2 == 0 { "sse" } else { "plain" };
        run.peer
            .request(json!(id), "tools/call", json!({"name": name}))
            .await;
    }
    let mut started = Vec::new();
    for _ in 0..5 {
        started.push(next_started(&mut run.started).await);
    }
    // The two notifications of the "sse" handlers were written.
    for _ in 0..2 {
        assert_eq!(
            run.peer.recv().await.unwrap()["method"],
            "notifications/message"
        );
    }
    let reason = if eof {
        // Closing our write side is EOF on the server's stdin.
        use tokio::io::AsyncWriteExt;
        run.peer.w.shutdown().await.unwrap();
        CancelReason::TransportClosed
    } else {
        stop.send(()).unwrap();
        CancelReason::Shutdown
    };
    let (res, returned_at) = tokio::time::timeout(WAIT, run.served)
        .await
        .expect("serve did not return")
        .unwrap();
    res.unwrap();
    check_all_cancelled(&started, &reason, returned_at);
    // Nothing more was written for any of them; the output is closed.
    assert_eq!(run.peer.recv().await, None);
}

#[tokio::test]
async fn stdin_eof_cancels_everything_in_flight_and_serve_returns_promptly() {
    stdio_case(true).await;
}

#[tokio::test(start_paused = true)]
async fn stdin_eof_under_a_paused_clock_waits_on_no_timer() {
    stdio_case(true).await;
}

#[tokio::test]
async fn stdio_shutdown_signal_cancels_everything_with_shutdown() {
    stdio_case(false).await;
}

#[tokio::test(start_paused = true)]
async fn stdio_shutdown_under_a_paused_clock_waits_on_no_timer() {
    stdio_case(false).await;
}

mod over_http {
    use std::future::IntoFuture;
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::client::conn::http1;
    use hyper_util::rt::TokioIo;
    use tokio_util::sync::CancellationToken;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    use super::*;

    fn post(body: &Value, method: &str, name: Option<&str>) -> ::http::Request<Full<Bytes>> {
        let mut b = ::http::Request::post("http://127.0.0.1/mcp")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method);
        if let Some(name) = name {
            b = b.header("Mcp-Name", name);
        }
        b.body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
            .unwrap()
    }

    fn request(id: i64, method: &str, name: Option<&str>) -> Value {
        let mut params = json!({
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        });
        if let Some(name) = name {
            params["name"] = json!(name);
            params["arguments"] = json!({});
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Sends one request on its own HTTP/1.1 connection; the task yields the
    /// status and the whole body (which ends when the server ends it).
    async fn call(
        addr: SocketAddr,
        id: i64,
        method: &'static str,
        name: Option<&'static str>,
    ) -> tokio::task::JoinHandle<(::http::StatusCode, String)> {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut tx, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        tokio::spawn(async move {
            let res = tx
                .send_request(post(&request(id, method, name), method, name))
                .await
                .unwrap();
            let status = res.status();
            let body = res.into_body().collect().await.map(|c| c.to_bytes());
            let body = body.map(|b| String::from_utf8_lossy(&b).into_owned());
            (
                status,
                body.unwrap_or_else(|e| format!("<body error: {e}>")),
            )
        })
    }

    #[tokio::test]
    async fn http_shutdown_cancels_every_in_flight_request_and_the_server_returns_promptly() {
        let (tx, mut started_rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let endpoint = StreamableHttpService::new(hanging_service(tx)).shutdown(shutdown.clone());
        let app = axum::Router::new().route_service("/mcp", endpoint);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let signal = shutdown.clone().cancelled_owned();
        let served = tokio::spawn(async move {
            let res = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .into_future()
                .await;
            (res, Instant::now())
        });

        // In flight: two waiting for their first byte (JSON), two already
        // streaming (SSE), and one subscriptions/listen.
        let mut calls = Vec::new();
        for (id, method, name) in [
            (1, "tools/call", Some("plain")),
            (2, "tools/call", Some("sse")),
            (3, "tools/call", Some("plain")),
            (4, "tools/call", Some("sse")),
            (5, "subscriptions/listen", None),
        ] {
            calls.push((id, name, call(addr, id, method, name).await));
        }
        let mut started = Vec::new();
        for _ in 0..5 {
            started.push(next_started(&mut started_rx).await);
        }

        shutdown.cancel();
        let (res, returned_at) = tokio::time::timeout(WAIT, served)
            .await
            .expect("the server did not return after shutdown")
            .unwrap();
        res.unwrap();
        check_all_cancelled(&started, &CancelReason::Shutdown, returned_at);

        // What each client saw: no answer for a cancelled call, the graceful
        // result for the listen stream.
        for (id, name, call) in calls {
            let (status, body) = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
            match name {
                Some("plain") => {
                    assert_eq!(
                        status,
                        ::http::StatusCode::SERVICE_UNAVAILABLE,
                        "{id}: {body}"
                    );
                    assert!(!body.contains("\"result\""), "{id}: {body}");
                }
                Some(_) => {
                    assert_eq!(status, ::http::StatusCode::OK, "{id}");
                    assert!(body.contains("notifications/message"), "{id}: {body}");
                    assert!(
                        !body.contains("\"result\"") && !body.contains("\"error\""),
                        "no answer after the cancel ({id}): {body}"
                    );
                }
                None => {
                    assert_eq!(status, ::http::StatusCode::OK, "{id}");
                    assert!(
                        body.contains("\"io.modelcontextprotocol/subscriptionId\":5"),
                        "graceful listen result ({id}): {body}"
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn a_request_arriving_after_shutdown_is_refused_and_its_handler_never_runs() {
        let (tx, mut started_rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let endpoint = StreamableHttpService::new(hanging_service(tx)).shutdown(shutdown.clone());
        let app = axum::Router::new().route_service("/mcp", endpoint);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Served without graceful shutdown: the token alone refuses the call.
        tokio::spawn(axum::serve(listener, app).into_future());
        let (status, body) =
            tokio::time::timeout(WAIT, call(addr, 9, "tools/call", Some("plain")).await)
                .await
                .unwrap()
                .unwrap();
        assert_eq!(status, ::http::StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            started_rx.try_recv().is_err(),
            "the handler must not have started"
        );
    }
}
