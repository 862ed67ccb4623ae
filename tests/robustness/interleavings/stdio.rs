//! (b) The stdio server driver and `StdioClient` over in-memory pipes, the
//! server's output recorded line by line on its way to the client: the state
//! of a schedule of [`StdioOp`]s and how each step is run. The checks after
//! each step and at the end are the properties, [`super`]'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::transport::stdio::{StdioClient, StdioServer};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, ProgressTap, RequestTimeout,
    TimeoutLayer,
};

use super::model::*;
use super::STATS;

/// A server-side call, as its handler hands it to the schedule.
pub(super) struct SCall {
    pub(super) respond: Option<oneshot::Sender<Result<Value, BoxError>>>,
    pub(super) ctx: RequestContext,
    pub(super) probe: DropProbe,
    pub(super) token: Option<tower_mcp_cancel::jsonrpc::ProgressToken>,
    /// The server-side tap, when the server stack has a `ProgressResetLayer`.
    pub(super) tap: Option<ProgressTap>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ServerSide {
    /// Never reached the server (refused by the client).
    Never,
    Active,
    Answered,
    /// Cancelled by the transport: nothing may be written for it.
    Cancelled,
}

/// One client call of a stdio schedule, as the model sees it.
pub(super) struct SReq {
    pub(super) n: u64,
    pub(super) id: RequestId,
    pub(super) timeout_at: u64,
    pub(super) idle_at: u64,
    pub(super) max_at: u64,
    /// The last progress the client's tap accepted.
    pub(super) last: Option<f64>,
    /// The last progress the server sent (progress MUST increase on every
    /// stack: what the server sends next is measured against it).
    pub(super) sent: Option<f64>,
    pub(super) expect: Option<Expect>,
    pub(super) join: Option<JoinHandle<()>>,
    pub(super) server: ServerSide,
    /// Wire length when the server side ended: nothing for it after that.
    pub(super) end_mark: Option<usize>,
    pub(super) late: bool,
}

impl SReq {
    pub(super) fn client_active(&self) -> bool {
        self.expect.is_none()
    }
}

type Shared<T> = Arc<Mutex<T>>;

pub(super) struct Stdio {
    pub(super) t0: tokio::time::Instant,
    pub(super) client: StdioClient,
    stack: tower::util::BoxCloneService<McpRequest, Value, BoxError>,
    pub(super) registry: InFlight,
    pub(super) calls: Shared<HashMap<u64, SCall>>,
    pub(super) taps: Shared<HashMap<u64, ProgressTap>>,
    pub(super) outcomes: Outcomes,
    pub(super) wire: Shared<Vec<Value>>,
    pub(super) served: JoinHandle<std::io::Result<()>>,
    pub(super) server_tap: bool,
    pub(super) reqs: Vec<SReq>,
    pub(super) closed: bool,
    /// Ids that must not be reused: their request ended without a response
    /// reaching the client (the spec forbids reusing those).
    burnt: Vec<RequestId>,
}

const STDIO_SETTLE: usize = 48;

fn stdio_handler(
    calls: Shared<HashMap<u64, SCall>>,
) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send> + Clone + Send + 'static
{
    service_fn(move |req: McpRequest| {
        let n: u64 = req.params_as::<Value>().unwrap()["n"].as_u64().unwrap();
        let (tx, rx) = oneshot::channel();
        let (probe, guard) = DropProbe::new();
        calls.lock().unwrap().insert(
            n,
            SCall {
                respond: Some(tx),
                ctx: RequestContext::of(&req),
                probe,
                token: req.progress_token().cloned(),
                tap: req.progress_tap().cloned(),
            },
        );
        async move {
            let out = rx.await.unwrap_or_else(|_| Ok(json!({"n": n})));
            guard.finish();
            drop(guard);
            out
        }
    })
}

impl Stdio {
    /// `server_tap`: the server stack has a `ProgressResetLayer` too (its
    /// limits far beyond any schedule). Either way the server sends only
    /// progress that increases, and the client's tap checks it again.
    pub(super) fn start(server_tap: bool) -> Stdio {
        let cap = 64 * 1024;
        let (client_w, server_r) = tokio::io::duplex(cap);
        let (server_w, proxy_r) = tokio::io::duplex(cap);
        let (proxy_w, client_r) = tokio::io::duplex(cap);
        let wire: Shared<Vec<Value>> = Arc::default();
        let w2 = wire.clone();
        // The server's output, recorded line by line on its way to the client.
        tokio::spawn(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let mut lines = tokio::io::BufReader::new(proxy_r).lines();
            let mut out = proxy_w;
            while let Ok(Some(line)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&line).expect("server wrote JSON");
                w2.lock().unwrap().push(v);
                if out.write_all(line.as_bytes()).await.is_err()
                    || out.write_all(b"\n").await.is_err()
                    || out.flush().await.is_err()
                {
                    break;
                }
            }
            let _ = out.shutdown().await;
        });
        let calls: Shared<HashMap<u64, SCall>> = Arc::default();
        let registry = InFlight::new();
        let server = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .option_layer(server_tap.then(|| {
                ProgressResetLayer::new(Duration::from_secs(100)).max(Duration::from_secs(200))
            }))
            .service(stdio_handler(calls.clone()));
        let served = tokio::spawn(
            StdioServer::new()
                .in_flight(registry.clone())
                .serve(server, server_r, server_w),
        );
        let client = StdioClient::new(client_r, client_w);
        let taps: Shared<HashMap<u64, ProgressTap>> = Arc::default();
        let t2 = taps.clone();
        let stack = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_millis(TIMEOUT_MS)))
            .layer(
                ProgressResetLayer::new(Duration::from_millis(IDLE_MS))
                    .max(Duration::from_millis(MAX_MS)),
            )
            .map_request(move |req: McpRequest| {
                let n = req.params_as::<Value>().unwrap()["n"].as_u64().unwrap();
                let tap = req
                    .progress_tap()
                    .expect("ProgressResetLayer set a tap")
                    .clone();
                t2.lock().unwrap().insert(n, tap);
                req
            })
            .service(client.clone());
        Stdio {
            t0: tokio::time::Instant::now(),
            client,
            stack: tower::util::BoxCloneService::new(stack),
            registry,
            calls,
            taps,
            outcomes: Arc::default(),
            wire,
            served,
            server_tap,
            reqs: Vec::new(),
            closed: false,
            burnt: Vec::new(),
        }
    }

    pub(super) fn now(&self) -> u64 {
        now_ms(self.t0)
    }

    /// The server side of call `k` ended with `how`.
    fn server_ended(&mut self, k: usize, how: ServerSide) {
        let r = &mut self.reqs[k];
        if r.server == ServerSide::Active {
            r.server = how;
        }
    }

    /// The client side of call `k` ended with `e` without a response
    /// reaching it: its cancel reaches the server, and its id is retired.
    fn client_gave_up(&mut self, k: usize, e: Expect) {
        let r = &mut self.reqs[k];
        if !r.client_active() {
            return;
        }
        r.expect = Some(e);
        self.burnt.push(r.id.clone());
        self.server_ended(k, ServerSide::Cancelled);
    }

    pub(super) async fn op(&mut self, op: StdioOp) -> Result<(), TestCaseError> {
        let now = self.now();
        match op {
            StdioOp::Request { id, timeout } => {
                if self.closed {
                    return Ok(());
                }
                let n = self.reqs.len() as u64;
                let mut id = ids()[id].clone();
                if self.burnt.contains(&id) {
                    id = RequestId::from(1000 + n as i64);
                }
                let duplicate = self.reqs.iter().any(|r| r.id == id && r.client_active());
                let limit = TIMEOUT_CHOICES[timeout];
                let mut req =
                    McpRequest::new(id.clone(), "tools/call").with_params(json!({"n": n}));
                if timeout != 0 {
                    req = req.with_extension(RequestTimeout::after(Duration::from_millis(limit)));
                }
                let fut = self.stack.clone().oneshot(req);
                let outs = self.outcomes.clone();
                let join = tokio::spawn(async move {
                    let seen = classify(&fut.await);
                    outs.lock().unwrap().entry(n).or_default().push(seen);
                });
                self.reqs.push(SReq {
                    n,
                    id,
                    timeout_at: now + limit,
                    idle_at: now + IDLE_MS,
                    max_at: now + MAX_MS,
                    last: None,
                    sent: None,
                    expect: duplicate.then_some(Expect::Refused),
                    join: Some(join),
                    server: if duplicate {
                        ServerSide::Never
                    } else {
                        ServerSide::Active
                    },
                    end_mark: None,
                    late: false,
                });
            }
            StdioOp::Drop { slot } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                if let Some(j) = &self.reqs[k].join {
                    j.abort();
                }
                self.client_gave_up(k, Expect::Dropped);
            }
            StdioOp::RawCancel { id } => {
                let id = cancel_ids()[id].clone();
                if self.closed {
                    return Ok(());
                }
                self.client
                    .notify(
                        "notifications/cancelled",
                        &json!({"requestId": id, "reason": "raw"}),
                    )
                    .map_err(|e| TestCaseError::fail(format!("notify: {e}")))?;
                let hit = self
                    .reqs
                    .iter()
                    .position(|r| r.id == id && r.server == ServerSide::Active);
                if let Some(k) = hit {
                    STATS.lock().unwrap().raw_cancels_hit += 1;
                    // The server stops; the client keeps waiting until a
                    // limit of its own fires.
                    self.server_ended(k, ServerSide::Cancelled);
                }
            }
            StdioOp::Respond { slot, ok } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let tx = self
                    .calls
                    .lock()
                    .unwrap()
                    .get_mut(&n)
                    .and_then(|c| c.respond.take());
                let Some(tx) = tx else { return Ok(()) };
                let answer: Result<Value, BoxError> = if ok {
                    Ok(json!({"n": n}))
                } else {
                    Err(Box::new(
                        ErrorObject::new(-32000, "handler failed").with_data(json!({"n": n})),
                    ))
                };
                let sent = tx.send(answer).is_ok();
                let r = &mut self.reqs[k];
                prop_assert_eq!(
                    sent,
                    r.server == ServerSide::Active,
                    "handler {} alive exactly while the server runs it",
                    n
                );
                if sent {
                    r.server = ServerSide::Answered;
                    if r.client_active() {
                        r.expect = Some(if ok {
                            Expect::Response
                        } else {
                            Expect::HandlerError
                        });
                    }
                }
            }
            StdioOp::Progress { slot, increasing } => {
                let Some(k) = pick(&self.reqs, slot, |r| r.server == ServerSide::Active) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let ctx = match self.calls.lock().unwrap().get(&n) {
                    Some(c) => c.ctx.clone(),
                    None => return Ok(()),
                };
                let r = &self.reqs[k];
                let value = match (increasing, r.sent) {
                    (true, last) => last.unwrap_or(0.0) + 1.0,
                    (false, Some(last)) => last,
                    (false, None) => return Ok(()),
                };
                // As spawned work holding the handler's context would.
                let sent = ctx.progress(value, Some(100.0), None).await;
                let server_active = r.server == ServerSide::Active;
                // With or without a server tap: progress MUST increase.
                let want = server_active && increasing;
                prop_assert_eq!(sent, want, "progress {} of call {} sent", value, n);
                if !server_active {
                    STATS.lock().unwrap().progress_after_end += 1;
                }
                let r = &mut self.reqs[k];
                if sent {
                    r.sent = Some(value);
                }
                if server_active && r.client_active() && increasing {
                    r.last = Some(value);
                    r.idle_at = now + IDLE_MS;
                }
            }
            StdioOp::Advance { ms } => {
                let target = now + ms;
                loop {
                    let now = self.now();
                    let next = self
                        .reqs
                        .iter()
                        .filter(|r| r.client_active())
                        .map(|r| r.timeout_at.min(r.idle_at).min(r.max_at))
                        .filter(|&t| t <= target)
                        .min();
                    let step_to = next.unwrap_or(target).max(now);
                    tokio::time::advance(Duration::from_millis(step_to - now)).await;
                    for k in 0..self.reqs.len() {
                        let r = &self.reqs[k];
                        if !r.client_active() {
                            continue;
                        }
                        if let Some((_, limits)) = due(step_to, r.timeout_at, r.idle_at, r.max_at) {
                            self.client_gave_up(k, Expect::Elapsed(limits));
                        }
                    }
                    settle(STDIO_SETTLE).await;
                    self.check()?;
                    if next.is_none() {
                        break;
                    }
                }
            }
            StdioOp::LateResponse { slot } => {
                let Some(k) = self.slot(slot) else {
                    return Ok(());
                };
                let n = self.reqs[k].n;
                let tx = self
                    .calls
                    .lock()
                    .unwrap()
                    .get_mut(&n)
                    .and_then(|c| c.respond.take());
                if let Some(tx) = tx {
                    if tx.send(Ok(json!({"n": n}))).is_ok() {
                        let r = &mut self.reqs[k];
                        r.server = ServerSide::Answered;
                        r.late = r.client_active();
                    }
                }
                if let Some(j) = &self.reqs[k].join {
                    j.abort();
                }
                self.client_gave_up(k, Expect::Dropped);
            }
            StdioOp::Close => {
                if self.closed {
                    return Ok(());
                }
                self.closed = true;
                self.client
                    .shutdown()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("shutdown: {e}")))?;
                for k in 0..self.reqs.len() {
                    if self.reqs[k].client_active() {
                        self.reqs[k].expect = Some(Expect::Closed);
                    }
                    self.server_ended(k, ServerSide::Cancelled);
                }
            }
        }
        settle(STDIO_SETTLE).await;
        self.check()
    }

    pub(super) fn slot(&self, slot: usize) -> Option<usize> {
        (!self.reqs.is_empty()).then(|| slot % self.reqs.len())
    }
}
