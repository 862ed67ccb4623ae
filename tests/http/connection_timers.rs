//! Every state in which a peer holds a connection has a timer: no first
//! byte, inside the HTTP/2 preface, a partial or idle HTTP/1 head, a silent
//! HTTP/2 peer, a reader that stopped reading, a stalled request body (and
//! shutdown answers a body still coming with `503`).
//!
//! Time is paused in every test. `serve` runs the server in the test's
//! runtime on loopback sockets, where the paused clock advances only once no
//! socket event is ready (tokio polls the sockets before it moves the clock).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::BoxError;
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::http::{Server, StreamableHttpService};
use tower_mcp_cancel::McpRequest;

use crate::support::http::{modern_headers, raw_post, read_until, tool_call, Tools};

/// `serve` with `server` on a free loopback port; its address.
async fn serve_with(server: Server, shutdown: &CancellationToken) -> std::net::SocketAddr {
    let (tools, _events) = Tools::new();
    let svc = StreamableHttpService::new(tools.service());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, svc, shutdown.clone()));
    addr
}

/// Reads until the server closes the connection; when that was, or `None`
/// if it was still open after `bound`.
/// The documented default of `Server::header_read_timeout`.
const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return t0.elapsed(),
                Ok(_) => continue,
            }
        }
    })
    .await
    .ok()
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_by_the_header_read_timeout() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    let closed = closed_within(&mut client, 10 * DEFAULT_HEADER_READ_TIMEOUT).await;
    assert_eq!(closed, Some(DEFAULT_HEADER_READ_TIMEOUT));
}

#[tokio::test(start_paused = true)]
async fn a_connection_inside_the_http2_preface_is_closed_by_the_header_read_timeout() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let closed = closed_within(&mut client, 10 * DEFAULT_HEADER_READ_TIMEOUT).await;
    assert_eq!(closed, Some(DEFAULT_HEADER_READ_TIMEOUT));
}

#[tokio::test(start_paused = true)]
async fn a_partial_http1_head_is_closed_by_the_header_read_timeout() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let closed = closed_within(&mut client, 10 * DEFAULT_HEADER_READ_TIMEOUT).await;
    assert!(
        closed.is_some_and(|t| t <= 2 * DEFAULT_HEADER_READ_TIMEOUT),
        "{closed:?}"
    );
}

/// An echo call over a raw HTTP/1.1 connection, answered `200`.
async fn echo_over(client: &mut TcpStream) {
    let headers = modern_headers("echo");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    client
        .write_all(&raw_post(
            &tool_call(1, "echo", json!({"text": "hi"})),
            &extra,
        ))
        .await
        .unwrap();
    let answer = read_until(client, "\"hi\"").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_http1_keep_alive_connection_is_closed_by_the_header_read_timeout() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    echo_over(&mut client).await;
    let closed = closed_within(&mut client, 10 * DEFAULT_HEADER_READ_TIMEOUT).await;
    assert_eq!(closed, Some(DEFAULT_HEADER_READ_TIMEOUT));
}

#[tokio::test(start_paused = true)]
async fn a_header_read_timeout_of_duration_max_is_never_and_does_not_panic() {
    let shutdown = CancellationToken::new();
    let server = Server::new().header_read_timeout(Some(Duration::MAX));
    let addr = serve_with(server, &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    echo_over(&mut client).await;
}

// Real time: HTTP/2 sends a request's head and body as separate frames,
// and a paused clock could jump past the body timeout between them.
#[tokio::test]
async fn an_http2_keep_alive_of_duration_max_is_never_and_does_not_panic() {
    use crate::support::http::{post, text, Conn, Proto};
    let shutdown = CancellationToken::new();
    let server = Server::new().http2_keep_alive(Some(Duration::MAX));
    let addr = serve_with(server, &shutdown).await;
    let mut conn = Conn::connect(addr, Proto::H2).await;
    let res = conn
        .send(post(
            &tool_call(1, "echo", json!({"text": "hi"})),
            &modern_headers("echo"),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(text(res).await.contains("hi"));
}

/// An HTTP/2 frame header and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_that_stops_answering_is_closed_by_keep_alive() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    // The preface and an empty SETTINGS; after that the peer goes quiet and
    // answers nothing (no SETTINGS ack, no PING ack).
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    client.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    let closed = closed_within(&mut client, Duration::from_secs(3600)).await;
    assert!(closed.is_some(), "a dead HTTP/2 peer holds its socket");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_its_stream_is_closed_by_the_write_timeout() {
    use tower_mcp_cancel::notify::RequestContext;
    let (recorder, mut events) = Recorder::new();
    // A handler that streams large notifications for as long as it can.
    let mcp = service_fn(move |req: McpRequest| {
        let recording = recorder.start(&req);
        async move {
            let _recording = recording;
            let ctx = RequestContext::of(&req);
            let chunk = "x".repeat(256 << 10);
            let message = json!({"level": "info", "data": chunk});
            while ctx.notify("notifications/message", &message).await {}
            Ok::<Value, BoxError>(json!({"resultType": "complete"}))
        }
    });
    let shutdown = CancellationToken::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(Server::new().serve(listener, StreamableHttpService::new(mcp), shutdown.clone()));

    // The client sends its request, then reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(addr).await.unwrap();
    let headers = modern_headers("flood");
    let extra: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    client
        .write_all(&raw_post(&tool_call(1, "flood", json!({})), &extra))
        .await
        .unwrap();
    assert_eq!(events.next().await, Event::Started(1.into()));
    // The handler is dropped when the server gives up on the connection.
    assert_eq!(events.next().await, Event::Dropped(1.into()));
    drop(client);
}

// ---------------------------------------------------------------------------
// a request body that stalls

/// A POST whose body sends `{` and then nothing more.
fn stalled_post() -> Request<impl http_body::Body<Data = Bytes, Error = Infallible> + Send + 'static>
{
    use futures_util::StreamExt;
    use http_body::Frame;
    let frames =
        futures_util::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"{")))])
            .chain(futures_util::stream::pending());
    Request::post("http://127.0.0.1/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(http_body_util::StreamBody::new(frames))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_request_body_that_stalls_is_refused_with_408_after_the_body_timeout() {
    let (tools, _events) = Tools::new();
    let svc = StreamableHttpService::new(tools.service());
    let t0 = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(3600), svc.oneshot(stalled_post()))
        .await
        .expect("a stalled body is not waited for forever")
        .unwrap();
    assert_eq!(res.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(
        t0.elapsed(),
        Duration::from_secs(30),
        "the documented default"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_answers_a_request_whose_body_is_still_coming_with_503() {
    let (tools, _events) = Tools::new();
    let shutdown = CancellationToken::new();
    let svc = StreamableHttpService::new(tools.service()).shutdown(shutdown.clone());
    let call = tokio::spawn(svc.oneshot(stalled_post()));
    tokio::task::yield_now().await;
    shutdown.cancel();
    let t0 = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(3600), call)
        .await
        .expect("the shutdown reaches a body read")
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

// ---------------------------------------------------------------------------
// a connection with no request in flight

/// The documented default of `Server::idle_timeout`.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// An HTTP/2 client connection (hyper's, which answers the server's pings)
/// on `addr`; the sender, and a receiver that yields when the connection
/// has ended.
async fn h2_client(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>>,
    tokio::sync::oneshot::Receiver<String>,
) {
    let io = hyper_util::rt::TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .unwrap();
    let (ended, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let end = conn.await;
        let _ = ended.send(format!("{end:?}"));
    });
    (sender, rx)
}

/// A server whose handler answers when `release` is notified, reporting
/// each start on `started`.
async fn serve_holding(
    server: Server,
    shutdown: &CancellationToken,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    std::sync::Arc<tokio::sync::Notify>,
) {
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
        let (started_tx, held) = (started_tx.clone(), held.clone());
        async move {
            let _ = started_tx.send(());
            held.notified().await;
            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                Bytes::from_static(b"done"),
            )))
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, svc, shutdown.clone()));
    (addr, started, release)
}

fn get(addr: std::net::SocketAddr) -> Request<http_body_util::Full<Bytes>> {
    Request::builder()
        .uri(format!("http://{addr}/"))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap()
}

/// An HTTP/2 peer that completes the handshake, answers every ping and
/// opens no stream is asked to leave (`GOAWAY`) after the idle timeout.
#[tokio::test(start_paused = true)]
async fn an_http2_connection_with_no_stream_is_closed_after_the_idle_timeout() {
    let shutdown = CancellationToken::new();
    let addr = serve_with(Server::new(), &shutdown).await;
    let start = Instant::now();
    let (_sender, ended) = h2_client(addr).await;
    tokio::time::timeout(Duration::from_secs(3600), ended)
        .await
        .expect("an idle HTTP/2 connection holds its socket")
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= DEFAULT_IDLE_TIMEOUT && took < DEFAULT_IDLE_TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
}

/// A request in flight keeps its connection however long it runs; the
/// idle time starts again at its end.
#[tokio::test(start_paused = true)]
async fn a_long_request_keeps_its_connection_and_the_idle_time_starts_at_its_end() {
    let shutdown = CancellationToken::new();
    let idle = Duration::from_secs(5);
    let (addr, mut started, release) = serve_holding(
        Server::new()
            .idle_timeout(Some(idle))
            .http2_keep_alive(None),
        &shutdown,
    )
    .await;
    let (mut sender, mut ended) = h2_client(addr).await;
    let response = tokio::spawn(sender.send_request(get(addr)));
    started.recv().await.unwrap();
    let t0 = Instant::now();
    if let Ok(end) = tokio::time::timeout(20 * idle, &mut ended).await {
        panic!(
            "a connection with a request in flight was closed after {:?}: {end:?}",
            t0.elapsed()
        );
    }
    release.notify_one();
    let res = response.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    drop(res);
    let end = Instant::now();
    tokio::time::timeout(Duration::from_secs(3600), ended)
        .await
        .expect("closed once idle")
        .unwrap();
    let took = end.elapsed();
    assert!(
        took >= idle && took < idle + Duration::from_secs(1),
        "{took:?}"
    );
}

/// `None` and `Duration::MAX` are "never", without a panic; a request on
/// such a connection is served.
#[tokio::test(start_paused = true)]
async fn an_idle_timeout_of_duration_max_is_never_and_does_not_panic() {
    for never in [None, Some(Duration::MAX)] {
        let shutdown = CancellationToken::new();
        let (addr, mut started, release) =
            serve_holding(Server::new().idle_timeout(never), &shutdown).await;
        let (mut sender, mut ended) = h2_client(addr).await;
        let response = tokio::spawn(sender.send_request(get(addr)));
        started.recv().await.unwrap();
        release.notify_one();
        assert_eq!(response.await.unwrap().unwrap().status(), StatusCode::OK);
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), &mut ended)
                .await
                .is_err(),
            "{never:?}: closed"
        );
    }
}
