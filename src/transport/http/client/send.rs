//! Sending one HTTP request: [`Outgoing`], whose body is made at each
//! attempt, its budget counted when hyper writes it ([`WireBody`]), and
//! [`send`], which tries again when the connection pool gave up on a
//! request before it was sent.

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::Full;

use super::connector::{check_scheme, classify, PooledClient};
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

/// How often a request is tried again when the connection pool gave up on
/// it before it was sent (see [`send`]).
const CHECKOUT_RETRIES: usize = 3;

/// Sends `req`, trying again when hyper-util's pool reports
/// `CheckoutNoLongerWanted`: over HTTP/2, concurrent first requests share one
/// connection attempt, driven by one of them; if that one is cancelled
/// (dropped), the others fail with that error although nothing was sent, so
/// sending them again is safe and loses nothing (each attempt's body is
/// made then: its budget is the time left). A connection failure comes
/// back as the [`HttpClientError`] variant of what failed
/// ([`HttpClientError::is_connect`]).
pub(super) async fn send(
    client: &PooledClient,
    req: impl Into<Outgoing>,
) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
    let req = req.into();
    let uri = req.head.uri().clone();
    check_scheme(&uri)?;
    let mut attempt = 0;
    loop {
        match client.request(req.attempt()?).await {
            Err(e) if e.is_connect() && is_checkout_gone(&e) && attempt < CHECKOUT_RETRIES => {
                attempt += 1;
                tracing::debug!(
                    attempt,
                    "connection attempt given up by the pool; sending again"
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
    use std::time::Duration;

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
}
