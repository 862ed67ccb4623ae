//! Sending one HTTP request: [`Outgoing`], whose body is made at each
//! attempt, its budget counted when hyper writes it ([`WireBody`]), and
//! [`send`], which tries again when the connection pool gave up on a
//! request before it was sent.

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::Full;

use hyper_util::client::legacy::connect::Connect;

use super::connector::{check_scheme, classify, PooledClient, Timed};
use super::wire_body::WireBody;
use super::HttpClientError;
use crate::error::BoxError;
use crate::timeout::WireRequest;

/// A request to send: its head, and its body — fixed, or a JSON-RPC request
/// encoded for each attempt when hyper writes it ([`WireBody`]), so that the
/// budget it carries is the time left when it goes out (after a fallback
/// handshake, a connection's opening, or another attempt), not when its
/// call started.
pub(super) struct Outgoing {
    head: Request<()>,
    body: Body,
}

enum Body {
    Fixed(Full<Bytes>),
    Encoded(WireRequest),
}

impl Outgoing {
    /// `head` (method, URI, headers) with `request`, encoded when sent.
    pub(super) fn new(head: Request<()>, request: WireRequest) -> Self {
        Self {
            head,
            body: Body::Encoded(request),
        }
    }

    /// The headers it is sent with.
    pub(super) fn headers(&self) -> &HeaderMap {
        self.head.headers()
    }

    /// The request of one attempt.
    fn attempt(&self) -> Result<Request<WireBody>, HttpClientError> {
        let body = match &self.body {
            Body::Fixed(body) => WireBody::Fixed(body.clone()),
            Body::Encoded(request) => WireBody::stamped(request.clone())
                .map_err(|e| HttpClientError::InvalidRequest(e.to_string()))?,
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.head.method().clone();
        *req.uri_mut() = self.head.uri().clone();
        *req.version_mut() = self.head.version();
        *req.headers_mut() = self.head.headers().clone();
        Ok(req)
    }
}

impl From<Request<Full<Bytes>>> for Outgoing {
    fn from(req: Request<Full<Bytes>>) -> Self {
        let (parts, body) = req.into_parts();
        Self {
            head: Request::from_parts(parts, ()),
            body: Body::Fixed(body),
        }
    }
}

/// Sends `req`. Over HTTP/2, concurrent calls share one connection
/// attempt run by one of them, and when it ends without a connection
/// hyper-util's pool fails the others with `CheckoutNoLongerWanted`
/// although nothing of theirs was sent. If the attempt failed
/// ([`ConnectFailures`](super::connector::ConnectFailures) recorded a
/// failure since this call's attempt began), the call fails the same way,
/// at once. Otherwise the call running it was dropped, and this one is sent
/// again (each attempt's body is made then: its budget is the time left).
/// That repeats only as often as calls running the attempt it waits on
/// are dropped: it ends when one connects, fails, or this call is dropped.
/// A connection failure comes back as the [`HttpClientError`] variant of
/// what failed ([`HttpClientError::is_connect`]).
pub(super) async fn send<C>(
    client: &PooledClient<C>,
    req: impl Into<Outgoing>,
) -> Result<http::Response<hyper::body::Incoming>, BoxError>
where
    Timed<C>: Connect + Clone + Send + Sync + 'static,
{
    let req = req.into();
    let uri = req.head.uri().clone();
    check_scheme(&uri)?;
    let mut attempt = 0u64;
    loop {
        let failed_before = client.failures.count();
        match client.hyper.request(req.attempt()?).await {
            Err(e) if e.is_connect() && is_checkout_gone(&e) => {
                if let Some(failed) = client.failures.since(failed_before, &uri) {
                    return Err(failed.into());
                }
                attempt += 1;
                tracing::debug!(
                    attempt,
                    "the call running the connection attempt was dropped; sending again"
                );
            }
            Err(e) => return Err(classify(&uri, e)),
            Ok(res) => return Ok(res),
        }
    }
}

fn is_checkout_gone(e: &hyper_util::client::legacy::Error) -> bool {
    format!("{e:?}").contains("CheckoutNoLongerWanted")
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tokio::sync::mpsc;

    use http_body::Body as _;
    use http_body_util::BodyExt;

    use super::*;
    use crate::jsonrpc::RequestId;
    use crate::timeout::{BudgetKey, WireBudget};
    use crate::{DeadlineCap, McpRequest};

    /// The budget an attempt's body carries when it is read (as hyper
    /// does once the connection is open), and that its length is the one
    /// announced.
    async fn budget_when_read(req: Request<WireBody>) -> serde_json::Value {
        let announced = req.body().size_hint().exact();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(announced, Some(body.len() as u64));
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        body["params"]["_meta"]["com.example/budgetMs"].clone()
    }

    /// The budget is counted when the body is read, not when the request
    /// (or an attempt at it: the pool may give up on one) was made.
    #[tokio::test(start_paused = true)]
    async fn the_budget_is_the_time_left_when_the_body_is_written() {
        let key = BudgetKey::new("com.example/budgetMs").unwrap();
        let req = McpRequest::new(1, "tools/call")
            .with_params(serde_json::json!({"name": "x"}))
            .with_extension(DeadlineCap::after(Duration::from_secs(3)));
        let deadline = WireBudget::of(&req, Some(&key));
        let wire = WireRequest::new(RequestId::from(1), "tools/call", None, deadline);
        let out = Outgoing::new(Request::post("http://x/mcp").body(()).unwrap(), wire);
        assert_eq!(budget_when_read(out.attempt().unwrap()).await, 3_000);
        // A connection that took 1.2 s to open.
        let attempt = out.attempt().unwrap();
        tokio::time::advance(Duration::from_millis(1_200)).await;
        assert_eq!(budget_when_read(attempt).await, 1_800);
        // Another attempt, made later still; once due, 0 (one digit of four:
        // padded to the announced length).
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(budget_when_read(out.attempt().unwrap()).await, 0);
    }

    /// A loopback HTTP/2 server answering every request `200` with `{}`.
    async fn h2_server() -> std::net::SocketAddr {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"{}"),
                    )))
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        addr
    }

    /// A connector whose connects wait for the test: each takes one word
    /// from `gate` (`true`: connect, `false`: refused) and counts itself.
    #[derive(Clone, Debug)]
    struct Gated {
        tcp: hyper_util::client::legacy::connect::HttpConnector,
        gate: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<bool>>>,
        connects: Arc<AtomicUsize>,
    }

    impl tower_service::Service<http::Uri> for Gated {
        type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
        type Error = BoxError;
        type Future =
            std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, uri: http::Uri) -> Self::Future {
            self.connects.fetch_add(1, Ordering::SeqCst);
            let (gate, mut tcp) = (self.gate.clone(), self.tcp.clone());
            Box::pin(async move {
                if gate.lock().await.recv().await != Some(true) {
                    let refused = std::io::ErrorKind::ConnectionRefused;
                    return Err(std::io::Error::new(refused, "refused by the test").into());
                }
                Ok(tcp.call(uri).await?)
            })
        }
    }

    /// An HTTP/2 client whose connects wait for the returned sender, and
    /// the count of connects it began.
    fn gated_client() -> (
        PooledClient<Gated>,
        mpsc::UnboundedSender<bool>,
        Arc<AtomicUsize>,
    ) {
        let (open, gate) = mpsc::unbounded_channel();
        let connects = Arc::new(AtomicUsize::new(0));
        let gated = Gated {
            tcp: hyper_util::client::legacy::connect::HttpConnector::new(),
            gate: Arc::new(tokio::sync::Mutex::new(gate)),
            connects: connects.clone(),
        };
        let mut builder =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
        builder.http2_only(true);
        (PooledClient::new(&builder, gated, None), open, connects)
    }

    fn post(addr: std::net::SocketAddr) -> Request<Full<Bytes>> {
        Request::post(format!("http://{addr}/mcp"))
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    }

    /// One poll, with a waker that does nothing (the test polls again).
    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        std::pin::Pin::new(f).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    /// Over HTTP/2 a call waits on the connection attempt another call
    /// runs; each time that call is dropped (cancelled) mid-connect, the
    /// waiting one was never sent, and it must not fail — however many
    /// times in a row that happens.
    #[tokio::test]
    async fn a_call_waiting_on_a_connection_outlives_every_call_that_ran_it() {
        let addr = h2_server().await;
        let (client, gate, connects) = gated_client();
        let mut driver = Box::pin(send(&client, post(addr)));
        assert!(poll_once(&mut driver).is_pending());
        let mut waiter = Box::pin(send(&client, post(addr)));
        assert!(poll_once(&mut waiter).is_pending());
        assert_eq!(connects.load(Ordering::SeqCst), 1, "one attempt, shared");
        for round in 2..=8 {
            drop(driver);
            driver = Box::pin(send(&client, post(addr)));
            assert!(poll_once(&mut driver).is_pending());
            if let Poll::Ready(r) = poll_once(&mut waiter) {
                panic!(
                    "round {round}: the waiting call ended with {:?}",
                    r.map(|r| r.status())
                );
            }
            assert_eq!(
                connects.load(Ordering::SeqCst),
                round,
                "it waits, not connects"
            );
        }
        gate.send(true).unwrap();
        let (a, b) = tokio::join!(driver, waiter);
        assert_eq!(a.unwrap().status(), 200);
        assert_eq!(b.unwrap().status(), 200);
    }

    /// When the shared attempt fails, the calls waiting on it fail the same
    /// way at once — not each after a connect of its own, one by one.
    #[tokio::test]
    async fn calls_waiting_on_a_connection_that_failed_fail_the_same_way() {
        let addr = h2_server().await;
        let (client, gate, connects) = gated_client();
        let mut driver = Box::pin(send(&client, post(addr)));
        assert!(poll_once(&mut driver).is_pending());
        let mut waiters: Vec<_> = (0..3)
            .map(|_| Box::pin(send(&client, post(addr))))
            .collect();
        for w in &mut waiters {
            assert!(poll_once(w).is_pending());
        }
        gate.send(false).unwrap();
        let refused = |r: Result<_, BoxError>| match r.map(|r: http::Response<_>| r.status()) {
            Err(e) => matches!(
                e.downcast_ref::<HttpClientError>(),
                Some(HttpClientError::ConnectionRefused { detail, .. }) if detail.contains("refused by the test")
            ),
            Ok(_) => false,
        };
        assert!(refused(driver.await));
        for (i, w) in waiters.iter_mut().enumerate() {
            match poll_once(w) {
                Poll::Ready(r) => assert!(refused(r), "call {i}: not the attempt's failure"),
                Poll::Pending => panic!("call {i} waits on a connect of its own"),
            }
        }
        assert_eq!(connects.load(Ordering::SeqCst), 1);
        // The failure does not stick: the next call connects.
        let next = send(&client, post(addr));
        gate.send(true).unwrap();
        assert_eq!(next.await.unwrap().status(), 200);
    }
}
