//! Configuration values at their extremes (`0`, `1`, `MAX`,
//! `Duration::ZERO`, `Duration::MAX`) neither panic nor overflow: each
//! setter's value is exercised on a request path, on a paused clock — the
//! adapter's and the timer layers' (per-method limits and an inherited
//! `DeadlineCap` included), `Server`'s on real connections, and the stdio
//! server's and client's. Where a value has a meaning, it is the sensible
//! one: `Duration::MAX` is never, `Duration::ZERO` at once.
#![cfg(feature = "http")]

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower::ServiceExt;
use tower_mcp_cancel::transport::http::StreamableHttpService;

use crate::support::http::{modern_headers, tool_call, Tools};

fn post(body: &serde_json::Value, headers: &[(&str, String)]) -> Request<Full<Bytes>> {
    let mut b = Request::builder()
        .method(http::Method::POST)
        .uri("http://127.0.0.1/mcp");
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

/// `keep_alive(Some(Duration::MAX))` means "never": a streamed response
/// (a notification first) goes out whole, and a keep-alive is never sent.
#[tokio::test(start_paused = true)]
async fn a_keep_alive_of_duration_max_never_fires_and_never_panics() {
    let (tools, _events) = Tools::new();
    let ep = StreamableHttpService::new(tools.service()).keep_alive(Some(Duration::MAX));
    let res = ep
        .oneshot(post(
            &tool_call(1, "notify", json!({})),
            &modern_headers("notify"),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"notified\":true"), "{text}");
    assert!(!text.contains("\n:"), "no keep-alive comment: {text}");
}

use proptest::prelude::*;
use tower::BoxError;
use tower::{service_fn, ServiceBuilder};
use tower_mcp_cancel::timeout::DeadlineCap;
use tower_mcp_cancel::transport::http::SessionLimits;
use tower_mcp_cancel::{McpRequest, ProgressLimits, ProgressResetLayer, TimeoutLayer};

/// The extreme durations, and one ordinary one.
fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_millis(5)),
        Just(Duration::from_secs(u64::from(u32::MAX))),
        Just(Duration::MAX),
    ]
}

/// The extreme sizes and counts, and one ordinary one.
fn counts() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(1024),
        Just(usize::MAX >> 3),
        Just(usize::MAX)
    ]
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// One HTTP adapter setting of each kind, over the timer layers.
#[derive(Debug, Clone)]
struct HttpSettings {
    timeout: Duration,
    idle: Duration,
    max: Duration,
    keep_alive: Option<Duration>,
    sse_after: Option<Duration>,
    drain_grace: Duration,
    body: usize,
    queue: usize,
    sessions: usize,
    session_idle: Duration,
    in_flight: usize,
    body_timeout: Option<Duration>,
    method_limits: ProgressLimits,
    cap: Duration,
}

fn http_settings() -> impl Strategy<Value = HttpSettings> {
    (
        (durations(), durations(), durations()),
        (
            proptest::option::of(durations()),
            proptest::option::of(durations()),
            durations(),
        ),
        (counts(), counts(), counts(), durations()),
        (
            counts(),
            proptest::option::of(durations()),
            (durations(), proptest::option::of(durations())),
            durations(),
        ),
    )
        .prop_map(
            |(
                (timeout, idle, max),
                (keep_alive, sse_after, drain_grace),
                (body, queue, sessions, session_idle),
                (in_flight, body_timeout, (method_idle, method_max), cap),
            )| HttpSettings {
                timeout,
                idle,
                max,
                keep_alive,
                sse_after,
                drain_grace,
                body,
                queue,
                sessions,
                session_idle,
                in_flight,
                body_timeout,
                method_limits: ProgressLimits {
                    idle: method_idle,
                    max: method_max,
                },
                cap,
            },
        )
}

/// Each value on a request path: a progress call and a notifying call
/// (SSE: keep-alive, queue), a legacy initialize (sessions), then a call
/// cut by the shutdown (drain grace); every answer is a status the adapter
/// documents.
async fn exercise_http(s: HttpSettings) {
    let (tools, _events) = Tools::new();
    let cap = s.cap;
    let mcp = ServiceBuilder::new()
        .map_request(move |req: McpRequest| req.with_extension(DeadlineCap::after(cap)))
        .layer(TimeoutLayer::new(s.timeout).method("tools/call", s.timeout))
        .layer(
            ProgressResetLayer::new(s.idle)
                .max(s.max)
                .method("tools/call", s.method_limits),
        )
        .service(tools.service());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ep = StreamableHttpService::new(mcp)
        .keep_alive(s.keep_alive)
        .sse_after(s.sse_after)
        .drain_grace(s.drain_grace)
        .max_body_bytes(s.body)
        .notification_queue(s.queue)
        .max_in_flight(s.in_flight)
        .body_timeout(s.body_timeout)
        .stateful_sessions(
            SessionLimits::new()
                .max_sessions(s.sessions)
                .idle_timeout(s.session_idle),
        )
        .shutdown(shutdown.clone());
    let documented = [200, 202, 204, 400, 404, 408, 413, 503];
    for (name, args) in [
        ("progress", json!({"steps": 2, "ms": 1})),
        ("notify", json!({})),
    ] {
        let res = ep
            .clone()
            .oneshot(post(&tool_call(1, name, args), &modern_headers(name)))
            .await
            .unwrap();
        assert!(documented.contains(&res.status().as_u16()), "{res:?}");
        // A body whose keep-alives outrun the answer is not read to its end.
        let mut body = res.into_body();
        for _ in 0..8 {
            match body.frame().await {
                Some(frame) => drop(frame.unwrap()),
                None => break,
            }
        }
    }
    let init = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}});
    let res = ep
        .clone()
        .oneshot(post(
            &init,
            &[
                ("content-type", "application/json".into()),
                ("accept", "application/json, text/event-stream".into()),
            ],
        ))
        .await
        .unwrap();
    assert!(documented.contains(&res.status().as_u16()), "{res:?}");

    let hang = tokio::spawn(ep.clone().oneshot(post(
        &tool_call(3, "hang", json!({})),
        &modern_headers("hang"),
    )));
    tokio::task::yield_now().await;
    shutdown.cancel();
    tokio::time::advance(Duration::from_secs(1)).await;
    if hang.is_finished() {
        let res = hang.await.unwrap().unwrap();
        assert!(documented.contains(&res.status().as_u16()), "{res:?}");
    } else {
        hang.abort();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// No duration, size or count of the HTTP adapter (bodies, their
    /// timer, the in-flight bound), its sessions or the timer layers
    /// (per-method limits and an inherited cap included) panics or
    /// overflows on a request path.
    #[test]
    fn http_and_layer_settings_at_their_extremes_never_panic(s in http_settings()) {
        paused_runtime().block_on(exercise_http(s));
    }

    /// Nor those of the stdio server and client: a call, a cancelled call
    /// and an oversize line, then the shutdown with its grace.
    #[cfg(feature = "stdio")]
    #[test]
    fn stdio_settings_at_their_extremes_never_panic(
        line in counts(),
        queue in counts(),
        in_flight in counts(),
        grace in durations(),
        client_line in counts(),
        client_queue in counts(),
        client_grace in durations(),
        reserve_for in durations(),
        reserve_max in counts(),
    ) {
        use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
        paused_runtime().block_on(async move {
            let (client_io, server_io) = tokio::io::duplex(64 * 1024);
            let (sr, sw) = tokio::io::split(server_io);
            let (cr, cw) = tokio::io::split(client_io);
            let shutdown = tokio_util::sync::CancellationToken::new();
            let server = StdioServer::new()
                .max_line_bytes(line)
                .write_queue(queue)
                .max_in_flight(in_flight)
                .drain_grace(grace)
                .shutdown(shutdown.clone());
            let served = tokio::spawn(server.serve(
                service_fn(|req: McpRequest| async move {
                    if req.method() == "hang" {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, BoxError>(json!({"ok": true}))
                }),
                sr,
                sw,
            ));
            let client = StdioClient::builder()
                .max_line_bytes(client_line)
                .write_queue(client_queue)
                .shutdown_grace(client_grace)
                .reserve_cancelled_ids(reserve_for, reserve_max)
                .connect(cr, cw);
            // Bounded, though a line limit of 1 answers a call with an
            // error carrying its id, so the call ends.
            let bound = Duration::from_secs(3600);
            let _ = tokio::time::timeout(bound, client.clone().oneshot(McpRequest::new(1, "ping"))).await;
            let hang = tokio::spawn(client.clone().oneshot(McpRequest::new(2, "hang")));
            tokio::time::advance(Duration::from_millis(1)).await;
            hang.abort();
            let _ = hang.await;
            let _ = tokio::time::timeout(
                bound,
                client.clone().oneshot(McpRequest::new(3, &"x".repeat(2048))),
            )
            .await;
            shutdown.cancel();
            tokio::time::advance(Duration::from_secs(1)).await;
            let _ = tokio::time::timeout(bound, client.shutdown()).await;
            served.abort();
            let _ = served.await;
        });
    }
}

/// `Server::header_read_timeout(Some(Duration::MAX))` means no timeout:
/// hyper adds it to `Instant::now()` when a connection starts reading a
/// request head, which must not panic the connection's task.
#[tokio::test]
async fn a_header_read_timeout_of_duration_max_serves_requests() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower_mcp_cancel::transport::http::Server;

    let (tools, _events) = Tools::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn(
        Server::new()
            .header_read_timeout(Some(Duration::MAX))
            .serve(
                listener,
                StreamableHttpService::new(tools.service()),
                shutdown.clone(),
            ),
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(crate::support::http::WAIT, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 405"), "{out:?}");
    shutdown.cancel();
    served.await.unwrap();
}

/// A server with `write_timeout` and `max_pending_accept_reset_streams`
/// at `server`'s values on a loopback port, the test tools behind it.
async fn serve_tools_with(
    server: tower_mcp_cancel::transport::http::Server,
    shutdown: &tokio_util::sync::CancellationToken,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<()>,
    crate::support::http::Events,
) {
    let (tools, events) = Tools::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(server.serve(
        listener,
        StreamableHttpService::new(tools.service()),
        shutdown.clone(),
    ));
    (addr, served, events)
}

/// `Server::write_timeout` and `Server::max_pending_accept_reset_streams`
/// at their extremes on real connections (HTTP/1.1 and HTTP/2): a call is
/// served, and the server returns after its shutdown.
async fn exercise_server(write: Option<Duration>, resets: usize, h2: bool) {
    use tower::Service;
    use tower_mcp_cancel::transport::http::{HttpClient, Server};
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = Server::new()
        .write_timeout(write)
        .max_pending_accept_reset_streams(resets);
    let (addr, served, _events) = serve_tools_with(server, &shutdown).await;
    let b = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap());
    let mut c = if h2 { b.http2_prior_knowledge() } else { b }.build();
    let call = McpRequest::without_id("tools/call")
        .with_params(json!({"name": "echo", "arguments": {"text": "hi"}}));
    let r = tokio::time::timeout(
        Duration::from_secs(3600),
        c.ready().await.unwrap().call(call),
    )
    .await
    .expect("answered")
    .expect("served");
    assert_eq!(r["content"][0]["text"], "hi");
    drop(c);
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(3600), served)
        .await
        .expect("serve returns after the shutdown")
        .expect("serve did not panic");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// No write timeout or reset-stream bound of `Server` panics or
    /// overflows on a served connection.
    #[test]
    fn server_settings_at_their_extremes_never_panic(
        write in proptest::option::of(durations()),
        resets in counts(),
        h2 in any::<bool>(),
    ) {
        paused_runtime().block_on(exercise_server(write, resets, h2));
    }
}

/// `Server::write_timeout` at its extremes with a client that stops
/// reading a streamed response: `Some(Duration::ZERO)` gives up on the
/// connection at the first write the peer leaves pending (the handler is
/// dropped), `Some(Duration::MAX)` never does, however often the peer's
/// reading stalls and resumes (the handler still runs an
/// hour later, and was not dropped by a panic either).
#[tokio::test(start_paused = true)]
async fn a_write_timeout_of_zero_closes_at_once_and_of_duration_max_never() {
    use tokio::io::AsyncWriteExt;
    use tower_mcp_cancel::notify::RequestContext;
    use tower_mcp_cancel::test_util::{Event, Recorder};
    use tower_mcp_cancel::transport::http::Server;

    for (write, closes) in [(Duration::ZERO, true), (Duration::MAX, false)] {
        let (recorder, mut events) = Recorder::new();
        let mcp = service_fn(move |req: McpRequest| {
            let recording = recorder.start(&req);
            async move {
                let _recording = recording;
                let ctx = RequestContext::of(&req);
                let message = json!({"level": "info", "data": "x".repeat(256 << 10)});
                while ctx.notify("notifications/message", &message).await {}
                Ok::<serde_json::Value, BoxError>(json!({"resultType": "complete"}))
            }
        });
        let shutdown = tokio_util::sync::CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = tokio::spawn(Server::new().write_timeout(Some(write)).serve(
            listener,
            StreamableHttpService::new(mcp),
            shutdown.clone(),
        ));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut client = socket.connect(addr).await.unwrap();
        let headers = modern_headers("flood");
        let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        client
            .write_all(&crate::support::http::raw_post(
                &tool_call(1, "flood", json!({})),
                &extra,
            ))
            .await
            .unwrap();
        assert_eq!(events.next().await, Event::Started(1.into()));
        if closes {
            assert_eq!(events.next().await, Event::Dropped(1.into()), "{write:?}");
        } else {
            // Reads some, so that writes stall, go on and stall again (the
            // timer is set again at each stall), then stops reading.
            let mut read = 0;
            let mut buf = vec![0u8; 64 << 10];
            while read < 4 << 20 {
                let n = tokio::io::AsyncReadExt::read(&mut client, &mut buf)
                    .await
                    .unwrap();
                assert!(n > 0, "{write:?}: the connection stays open");
                read += n;
            }
            let next = tokio::time::timeout(Duration::from_secs(1800), events.next()).await;
            assert!(next.is_err(), "{write:?}: the handler still runs: {next:?}");
        }
        drop(client);
        shutdown.cancel();
        served.abort();
        let _ = served.await;
    }
}

/// `StreamableHttpService::body_timeout` at its extremes: `Duration::MAX`
/// never refuses a stalled body (it is still awaited an hour later, without
/// a panic), `Duration::ZERO` refuses it with `408` at once; a complete
/// body is served either way.
#[tokio::test(start_paused = true)]
async fn a_body_timeout_of_zero_or_duration_max_is_sensible() {
    use futures_util::StreamExt;
    let stalled = || {
        let frames = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(
            http_body::Frame::data(Bytes::from_static(b"{")),
        )])
        .chain(futures_util::stream::pending());
        Request::post("http://127.0.0.1/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .body(http_body_util::StreamBody::new(frames))
            .unwrap()
    };
    for timeout in [Duration::ZERO, Duration::MAX] {
        let (tools, _events) = Tools::new();
        let svc = StreamableHttpService::new(tools.service()).body_timeout(Some(timeout));
        let res = svc
            .clone()
            .oneshot(post(
                &tool_call(1, "echo", json!({"text": "hi"})),
                &modern_headers("echo"),
            ))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{timeout:?}: a complete body is served");
        let t0 = tokio::time::Instant::now();
        let out = tokio::time::timeout(Duration::from_secs(3600), svc.oneshot(stalled())).await;
        if timeout.is_zero() {
            assert_eq!(out.expect("refused").unwrap().status(), 408);
            assert_eq!(t0.elapsed(), Duration::ZERO);
        } else {
            assert!(out.is_err(), "MAX is never: the body is still awaited");
        }
    }
}
