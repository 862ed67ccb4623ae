//! Raw Streamable HTTP requests, for what the client must not smooth over:
//! a response stream closed at a moment the checker picks (before any byte
//! of the body, or after the first event), over HTTP/1.1 or HTTP/2 (h2c),
//! and headers that contradict the body.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::mcp;

/// Which HTTP version a raw request goes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    /// HTTP/1.1.
    H1,
    /// HTTP/2 with prior knowledge (h2c).
    H2,
}

impl Version {
    /// Its suffix in check ids.
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Version::H1 => "h1",
            Version::H2 => "h2",
        }
    }
}

/// When a raw call's response stream is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Close {
    /// After this long, before any message came on the stream (a priming
    /// event or a comment may have: they carry no message).
    BeforeFirstMessage(Duration),
    /// At the body's first bytes (its first event), or after this long.
    MidStream(Duration),
}

/// What happened to a raw call the checker closed.
#[derive(Debug)]
pub(crate) enum Closing {
    /// Closed as asked.
    Done,
    /// The moment could not be had (why).
    Missed(String),
    /// The request failed (why).
    Failed(String),
}

/// A fresh client (a connection of its own, closed with it).
fn client(version: Version) -> Client<HttpConnector, Full<Bytes>> {
    let mut b = Client::builder(TokioExecutor::new());
    b.pool_max_idle_per_host(0);
    if version == Version::H2 {
        b.http2_only(true);
    }
    b.build_http()
}

/// A 2026-07-28 POST of `method` with `params`, with the standard headers;
/// `headers` are set over them (a mismatch, an omission with an empty value).
pub(crate) fn post(
    uri: &Uri,
    id: &str,
    method: &str,
    params: Value,
    headers: &[(&str, &str)],
) -> Request<Full<Bytes>> {
    // `Mcp-Name`: a tool's name, or the task a `tasks/*` request names.
    let field = match method {
        "tools/call" => Some("name"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    let name = field
        .and_then(|f| params.get(f))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let token = (method == "tools/call").then(|| format!("{id}-progress"));
    let params = mcp::params(mcp::Era::Modern, params, token.as_deref());
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut req = Request::post(uri.clone())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", mcp::MODERN)
        .header("mcp-method", method);
    if let Some(name) = name {
        req = req.header("mcp-name", name);
    }
    let mut req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default();
    for (k, v) in headers {
        let (Ok(k), Ok(v)) = (
            http::HeaderName::try_from(*k),
            http::HeaderValue::try_from(*v),
        ) else {
            continue;
        };
        if v.is_empty() {
            req.headers_mut().remove(&k);
        } else {
            req.headers_mut().insert(k, v);
        }
    }
    req
}

/// Sends `req` and closes its response stream at `close` (dropping the
/// response, which closes the HTTP/1.1 connection or resets the HTTP/2 stream).
pub(crate) async fn call_and_close(
    version: Version,
    req: Request<Full<Bytes>>,
    close: Close,
    bound: Duration,
) -> Closing {
    let client = client(version);
    let start = Instant::now();
    let mut pending = Box::pin(client.request(req));
    let response = match close {
        Close::BeforeFirstMessage(after) => tokio::select! {
            r = &mut pending => r,
            () = tokio::time::sleep(after) => return Closing::Done,
        },
        Close::MidStream(_) => match tokio::time::timeout(bound, &mut pending).await {
            Ok(r) => r,
            Err(_) => return Closing::Missed(format!("no response head within {bound:?}")),
        },
    };
    let mut response = match response {
        Ok(r) => r,
        Err(e) => return Closing::Failed(format!("the request failed: {e}")),
    };
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = response.body_mut();
    let until = match close {
        Close::BeforeFirstMessage(after) => start + after,
        Close::MidStream(wait) => Instant::now() + wait.min(bound),
    };
    // Frames until the first one with a message in it (or the deadline).
    let message = loop {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => break None,
            Ok(None) => break Some(false),
            Ok(Some(Err(e))) => return Closing::Failed(format!("the stream failed: {e}")),
            Ok(Some(Ok(frame))) => {
                if frame.data_ref().is_some_and(|d| has_message(d)) {
                    break Some(true);
                }
            }
        }
    };
    match (close, message) {
        (Close::BeforeFirstMessage(_), None) => Closing::Done,
        (Close::BeforeFirstMessage(_), Some(_)) => {
            Closing::Missed("a message came on the stream before the close".into())
        }
        (Close::MidStream(_), Some(true)) if sse => Closing::Done,
        // A whole JSON answer is no stream: nothing left to close.
        (Close::MidStream(_), Some(true)) => {
            Closing::Missed("the server answered with a whole JSON body, not a stream".into())
        }
        (Close::MidStream(_), Some(false)) => {
            Closing::Missed("the stream ended before its first message".into())
        }
        (Close::MidStream(_), None) => Closing::Missed("no message on the stream in time".into()),
    }
}

/// Whether a piece of a response body carries a JSON-RPC message (not only
/// an SSE comment, or a priming event with empty data).
fn has_message(data: &[u8]) -> bool {
    data.windows(9).any(|w| w == b"\"jsonrpc\"")
}

/// Sends `req` and reads the whole answer: its status and body.
pub(crate) async fn call(
    version: Version,
    req: Request<Full<Bytes>>,
    bound: Duration,
) -> Result<(u16, String), String> {
    let client = client(version);
    let answer = async {
        let response = client
            .request(req)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body failed: {e}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(bound, answer)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {bound:?}")))
}

/// The JSON-RPC error code in a body (plain JSON, or the first SSE `data:` line).
pub(crate) fn error_code(body: &str) -> Option<i64> {
    let json = body
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(body)
        .trim();
    crate::number::read(&serde_json::from_str::<Value>(json).ok()?["error"]["code"]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_from_json_or_sse() {
        assert_eq!(
            error_code(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"x"}}"#),
            Some(-32020)
        );
        assert_eq!(
            error_code("event: message\ndata: {\"error\":{\"code\":-32600}}\n\n"),
            Some(-32600)
        );
        // The schema's integer, written as a float.
        assert_eq!(
            error_code(r#"{"error":{"code":-32020.0,"message":"x"}}"#),
            Some(-32020)
        );
        assert_eq!(error_code(r#"{"error":{"code":-32020.5}}"#), None);
        assert_eq!(error_code("<html>"), None);
    }

    #[test]
    fn messages_not_comments() {
        assert!(has_message(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"
        ));
        assert!(!has_message(b": keep-alive\n\n"));
        assert!(!has_message(b"id: 1\ndata:\n\n"));
    }

    #[test]
    fn headers_override_and_remove() {
        let uri: Uri = "http://127.0.0.1:1/mcp".parse().unwrap();
        let req = post(
            &uri,
            "a",
            "ping",
            json!({}),
            &[("mcp-method", "tools/list"), ("mcp-protocol-version", "")],
        );
        assert_eq!(req.headers()["mcp-method"], "tools/list");
        assert!(req.headers().get("mcp-protocol-version").is_none());
        let req = post(&uri, "b", "tools/call", json!({"name": "slow"}), &[]);
        assert_eq!(req.headers()["mcp-name"], "slow");
        let req = post(&uri, "c", "tasks/get", json!({"taskId": "t1"}), &[]);
        assert_eq!(req.headers()["mcp-name"], "t1");
    }
}
