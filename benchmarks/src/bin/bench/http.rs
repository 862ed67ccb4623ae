//! Figure 5: an HTTP client disconnects while `slow` runs; time from the
//! disconnect to the handler future being dropped. Servers run in this
//! process on their own runtime thread (events through the in-process
//! channel, same `CLOCK_MONOTONIC`); the client is raw hyper, so the moment
//! of the disconnect is ours: HTTP/1.1 drops the connection (socket closed),
//! HTTP/2 drops the response (the stream is reset, the connection stays).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tower_mcp_cancel_benchmarks::{load, mono_ns, Event, Kind};

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Ours,
    Rmcp,
    RmcpCancel,
    TowerMcp,
    TowerMcpCancel,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Ours => "tower-mcp-cancel (full stack)",
            Peer::Rmcp => "rmcp 3.11 (stateless)",
            Peer::RmcpCancel => "rmcp 3.11 + tower-mcp-cancel (stateless)",
            Peer::TowerMcp => "tower-mcp 0.25 (stateless)",
            Peer::TowerMcpCancel => "tower-mcp 0.25 + tower-mcp-cancel (stateless)",
        }
    }
}

/// Where the client disconnects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// No response byte yet (`slow` without a progress token).
    BeforeFirstByte,
    /// After the first SSE event (a progress notification).
    MidSse,
}

/// Serves `svc` on a loopback port with HTTP/1.1 and HTTP/2 (prior
/// knowledge) on the current runtime.
async fn serve<S: load::HttpService<B>, B: load::HttpBody>(svc: S) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            load::spawn_connection(stream, svc.clone());
        }
    });
    addr
}

/// Starts the servers on a runtime of their own (one worker thread) and
/// returns their addresses: (peer, json-mode addr, sse-mode addr).
pub fn start_servers(peers: &[Peer]) -> Vec<(Peer, SocketAddr, SocketAddr)> {
    let peers = peers.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut out = Vec::new();
            for p in peers {
                let (a, b) = match p {
                    Peer::Ours => {
                        let svc = tower_mcp_cancel::transport::http::StreamableHttpService::new(
                            tower_mcp_cancel_benchmarks::ours::full_stack(),
                        );
                        let a = serve(svc).await;
                        (a, a)
                    }
                    #[cfg(not(feature = "peers"))]
                    Peer::Rmcp | Peer::RmcpCancel | Peer::TowerMcp | Peer::TowerMcpCancel => {
                        panic!("built without the `peers` feature: our servers only")
                    }
                    #[cfg(feature = "peers")]
                    Peer::Rmcp => {
                        use rmcp::transport::streamable_http_server::{
                            session::local::LocalSessionManager, StreamableHttpServerConfig,
                            StreamableHttpService,
                        };
                        use std::sync::Arc;
                        let mk = |json: bool| {
                            let config = StreamableHttpServerConfig::default()
                                .with_legacy_session_mode(false)
                                .with_json_response(json)
                                .with_sse_keep_alive(None);
                            StreamableHttpService::new(
                                || Ok(tower_mcp_cancel_benchmarks::peer_rmcp::Tools),
                                Arc::new(LocalSessionManager::default()),
                                config,
                            )
                        };
                        (serve(mk(true)).await, serve(mk(false)).await)
                    }
                    #[cfg(feature = "peers")]
                    Peer::RmcpCancel => {
                        use rmcp::transport::streamable_http_server::{
                            session::local::LocalSessionManager, StreamableHttpServerConfig,
                            StreamableHttpService,
                        };
                        use std::sync::Arc;
                        use tower_mcp_cancel_rmcp::Cancellable;
                        use tower_mcp_cancel::CancelOnDisconnectLayer;
                        let mk = |json: bool| {
                            let config = StreamableHttpServerConfig::default()
                                .with_legacy_session_mode(false)
                                .with_json_response(json)
                                .with_sse_keep_alive(None);
                            let handler =
                                Cancellable::new(tower_mcp_cancel_benchmarks::peer_rmcp::Tools);
                            tower::ServiceBuilder::new()
                                .layer(CancelOnDisconnectLayer::http())
                                .service(StreamableHttpService::new(
                                    move || Ok(handler.clone()),
                                    Arc::new(LocalSessionManager::default()),
                                    config,
                                ))
                        };
                        (serve(mk(true)).await, serve(mk(false)).await)
                    }
                    #[cfg(feature = "peers")]
                    Peer::TowerMcpCancel => {
                        use tower_mcp_cancel_tower_mcp::RouterLayer;
                        let router = tower_mcp::HttpTransport::new(
                            tower_mcp_cancel_benchmarks::peer_tower_mcp::router(),
                        )
                        .stateless(tower_mcp::stateless::StatelessConfig::new())
                        .layer(RouterLayer::new())
                        .into_router_at("/mcp");
                        let a = serve(router).await;
                        (a, a)
                    }
                    #[cfg(feature = "peers")]
                    Peer::TowerMcp => {
                        let router = tower_mcp::HttpTransport::new(
                            tower_mcp_cancel_benchmarks::peer_tower_mcp::router(),
                        )
                        .stateless(tower_mcp::stateless::StatelessConfig::new())
                        .into_router_at("/mcp");
                        let a = serve(router).await;
                        (a, a)
                    }
                };
                out.push((p, a, b));
            }
            tx.send(out).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1_000_000);

fn request(
    addr: SocketAddr,
    id: u64,
    when: When,
    seconds: f64,
    version: &str,
) -> http::Request<Full<Bytes>> {
    let progress = match when {
        When::MidSse => format!(r#","progressToken":{id}"#),
        When::BeforeFirstByte => String::new(),
    };
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{"seconds":{seconds},"interval_ms":20}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{version}","io.modelcontextprotocol/clientInfo":{{"name":"bench","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{{}}{progress}}}}}}}"#
    );
    http::Request::post(format!("http://{addr}/mcp"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "slow")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// One sample's outcome.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub dropped: Option<Duration>,
    pub token: Option<Duration>,
    pub done: bool,
    /// The response head / first SSE event never came (mid-SSE), or an
    /// error status came.
    pub failed: Option<String>,
}

async fn wait_start(events: &mut mpsc::UnboundedReceiver<Event>, key: &str) -> bool {
    while let Some(ev) = events.recv().await {
        if ev.id == key && ev.kind == Kind::Start {
            return true;
        }
    }
    false
}

async fn fate(
    events: &mut mpsc::UnboundedReceiver<Event>,
    key: &str,
    t0: u64,
    wait_for: Duration,
) -> Sample {
    let mut s = Sample::default();
    let deadline = tokio::time::Instant::now() + wait_for;
    loop {
        let ev = match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(ev)) => ev,
            _ => break,
        };
        if ev.id != key {
            continue;
        }
        let after = Duration::from_nanos(ev.ns.saturating_sub(t0));
        match ev.kind {
            Kind::Dropped => s.dropped = Some(after),
            Kind::Token => s.token = Some(after),
            Kind::Done => s.done = true,
            Kind::Start => {}
        }
        if s.dropped.is_some() || s.done {
            break;
        }
    }
    let late = tokio::time::Instant::now() + Duration::from_millis(100);
    while s.token.is_none() && (s.dropped.is_some() || s.done) {
        match tokio::time::timeout_at(late, events.recv()).await {
            Ok(Some(ev)) if ev.id == key && ev.kind == Kind::Token => {
                s.token = Some(Duration::from_nanos(ev.ns.saturating_sub(t0)));
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    s
}

/// Reads body frames until one carries an SSE `data:` line.
async fn first_event(body: &mut Incoming) -> Result<(), String> {
    let mut seen = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    seen.extend_from_slice(d);
                    if seen.windows(5).any(|w| w == b"data:") {
                        return Ok(());
                    }
                }
            }
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err(format!("body ended: {}", String::from_utf8_lossy(&seen))),
        }
    }
}

/// One HTTP/1.1 sample: a fresh connection, closed at the chosen moment.
pub async fn h1_sample(
    events: &mut mpsc::UnboundedReceiver<Event>,
    addr: SocketAddr,
    when: When,
    seconds: f64,
    version: &str,
    wait_for: Duration,
) -> Sample {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let key = id.to_string();
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let mut conn = Box::pin(conn);
    let mut resp = Box::pin(send.send_request(request(addr, id, when, seconds, version)));
    let t0;
    match when {
        When::BeforeFirstByte => {
            let started = tokio::select! {
                ok = wait_start(events, &key) => ok,
                r = &mut resp => {
                    return Sample { failed: Some(format!("answered early: {:?}", r.map(|r| r.status()))), ..Default::default() };
                }
                _ = &mut conn => false,
            };
            if !started {
                return Sample {
                    failed: Some("never started".into()),
                    ..Default::default()
                };
            }
            t0 = mono_ns();
            drop(resp);
            drop(send);
            drop(conn); // the socket closes here
        }
        When::MidSse => {
            let r = tokio::select! {
                r = &mut resp => r,
                _ = &mut conn => return Sample { failed: Some("connection ended".into()), ..Default::default() },
            };
            let mut body = match r {
                Ok(r) if r.status().is_success() => r.into_body(),
                Ok(r) => {
                    let st = r.status();
                    let b = r.into_body().collect().await.map(|c| c.to_bytes());
                    return Sample {
                        failed: Some(format!("{st}: {b:?}")),
                        ..Default::default()
                    };
                }
                Err(e) => {
                    return Sample {
                        failed: Some(e.to_string()),
                        ..Default::default()
                    }
                }
            };
            let got = tokio::select! {
                r = first_event(&mut body) => r,
                _ = &mut conn => Err("connection ended".into()),
            };
            if let Err(e) = got {
                return Sample {
                    failed: Some(e),
                    ..Default::default()
                };
            }
            t0 = mono_ns();
            drop(body);
            drop(send);
            drop(conn);
        }
    }
    fate(events, &key, t0, wait_for).await
}

/// An HTTP/2 connection kept across samples; its driver runs as a task.
pub struct H2 {
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
}

impl H2 {
    pub async fn connect(addr: SocketAddr) -> H2 {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        H2 { send, addr }
    }

    /// One HTTP/2 sample: the response (stream) dropped at the chosen moment.
    pub async fn sample(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        when: When,
        seconds: f64,
        version: &str,
        wait_for: Duration,
    ) -> Sample {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let key = id.to_string();
        if self.send.ready().await.is_err() {
            *self = H2::connect(self.addr).await;
        }
        let mut resp = Box::pin(
            self.send
                .send_request(request(self.addr, id, when, seconds, version)),
        );
        let t0;
        match when {
            When::BeforeFirstByte => {
                let started = tokio::select! {
                    ok = wait_start(events, &key) => ok,
                    r = &mut resp => {
                        return Sample { failed: Some(format!("answered early: {:?}", r.map(|r| r.status()))), ..Default::default() };
                    }
                };
                if !started {
                    return Sample {
                        failed: Some("never started".into()),
                        ..Default::default()
                    };
                }
                t0 = mono_ns();
                drop(resp); // RST_STREAM(CANCEL)
            }
            When::MidSse => {
                let mut body = match resp.await {
                    Ok(r) if r.status().is_success() => r.into_body(),
                    Ok(r) => {
                        let st = r.status();
                        let b = r.into_body().collect().await.map(|c| c.to_bytes());
                        return Sample {
                            failed: Some(format!("{st}: {b:?}")),
                            ..Default::default()
                        };
                    }
                    Err(e) => {
                        return Sample {
                            failed: Some(e.to_string()),
                            ..Default::default()
                        }
                    }
                };
                if let Err(e) = first_event(&mut body).await {
                    return Sample {
                        failed: Some(e),
                        ..Default::default()
                    };
                }
                t0 = mono_ns();
                drop(body); // RST_STREAM(CANCEL)
            }
        }
        fate(events, &key, t0, wait_for).await
    }
}
