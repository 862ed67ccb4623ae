//! The answer to one POST, in either shape: a JSON body, or an SSE stream
//! whose progress goes to the request's route and whose final response (or
//! the server's `notifications/cancelled` of a torn-down listen) ends the
//! call; the JSON body, and each SSE event, bounded in size
//! ([`HttpClientBuilder::max_response_bytes`](super::HttpClientBuilder::max_response_bytes)).

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::StreamExt;
use http::header;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sse_stream::SseStream;

use super::HttpClientError;
use crate::error::{BoxError, Cancelled};
use crate::jsonrpc::{Message, RequestId, CANCELLED, PROGRESS};
use crate::transport::call::client::{outcome, route_progress, Route};

/// The default bound on a JSON body, and on one SSE event.
pub(crate) const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// A response body that fails once more than `limit` bytes arrive without
/// the SSE parser giving out an event (`pending` is reset at each event), so
/// a server streaming one endless event cannot grow the client's memory.
struct EventBounded<B> {
    inner: B,
    pending: Arc<AtomicUsize>,
    limit: usize,
}

/// The error of an [`EventBounded`] body.
#[derive(Debug)]
enum EventBoundedError {
    Body(BoxError),
    TooLarge(usize),
}

impl fmt::Display for EventBoundedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Body(e) => write!(f, "response body: {e}"),
            Self::TooLarge(limit) => write!(f, "SSE event larger than {limit} bytes"),
        }
    }
}

impl std::error::Error for EventBoundedError {}

impl<B> http_body::Body for EventBounded<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = Bytes;
    type Error = EventBoundedError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, Bytes::len);
                let pending = this.pending.fetch_add(len, Ordering::Relaxed) + len;
                if pending > this.limit {
                    return Poll::Ready(Some(Err(EventBoundedError::TooLarge(this.limit))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(EventBoundedError::Body(Box::new(e)))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// Reads the answer to request `id` out of a response: a JSON body, or an
/// SSE stream whose progress goes to `route`; a body, or one event, of more
/// than `limit` bytes is [`HttpClientError::ResponseTooLarge`].
pub(crate) async fn read_response<B>(
    res: http::Response<B>,
    id: &RequestId,
    route: Route,
    limit: usize,
) -> Result<serde_json::Value, BoxError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let status = res.status();
    let mime = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if status.is_success() && mime == "text/event-stream" {
        return read_events(res.into_body(), id, route, limit).await;
    }
    // A declared length over the limit is refused before anything is read.
    if http_body::Body::size_hint(res.body()).lower() > limit as u64 {
        return Err(HttpClientError::ResponseTooLarge { limit }.into());
    }
    let body = match Limited::new(res.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Err(HttpClientError::ResponseTooLarge { limit }.into())
        }
        Err(e) => return Err(e),
    };
    match Message::decode(&body) {
        Ok(Message::Response(r)) if r.outcome.is_err() => outcome(r.outcome),
        Ok(Message::Response(r)) if status.is_success() => {
            if r.id.as_ref() != Some(id) {
                return Err(HttpClientError::InvalidResponse(format!(
                    "response id {:?} does not match request id {id}",
                    r.id
                ))
                .into());
            }
            outcome(r.outcome)
        }
        _ if status.is_success() && mime != "application/json" => {
            Err(HttpClientError::UnexpectedContentType(crate::sanitize::for_log(&mime)).into())
        }
        _ if status.is_success() => Err(HttpClientError::InvalidResponse(
            "the body is not a JSON-RPC response".into(),
        )
        .into()),
        _ => Err(HttpClientError::Status {
            status,
            body: crate::sanitize::for_log(&String::from_utf8_lossy(&body)),
        }
        .into()),
    }
}

/// Reads an SSE response stream up to the response to `id`; its progress
/// goes to `route` (the stream carries only this request's).
async fn read_events<B>(
    body: B,
    id: &RequestId,
    route: Route,
    limit: usize,
) -> Result<serde_json::Value, BoxError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let pending = Arc::new(AtomicUsize::new(0));
    let body = EventBounded {
        inner: body,
        pending: pending.clone(),
        limit,
    };
    let mut events = SseStream::new(body);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(_) if pending.load(Ordering::Relaxed) > limit => {
                return Err(HttpClientError::ResponseTooLarge { limit }.into())
            }
            Err(e) => return Err(e.into()),
        };
        // The parser buffers an event until its blank line: what it may
        // hold is what arrived since the last event it gave out.
        pending.store(0, Ordering::Relaxed);
        let Some(data) = event.data else { continue };
        if !matches!(event.event.as_deref(), None | Some("message")) {
            continue;
        }
        match Message::decode(data.as_bytes()) {
            Ok(Message::Response(r)) if r.id.as_ref() == Some(id) => return outcome(r.outcome),
            Ok(Message::Response(r)) => {
                tracing::debug!(request_id = %id, other = ?r.id, "response for another id on this stream ignored");
            }
            Ok(Message::Notification(n)) if n.method == PROGRESS => {
                route_progress(n.params.as_deref(), |t| route.tap_for(t));
            }
            // The server tore the request down (a `subscriptions/listen`,
            // the one request a server cancels): no result will follow.
            Ok(Message::Notification(n)) if n.method == CANCELLED => match n.cancel_request() {
                Some((cancelled, reason)) if cancelled == *id => {
                    tracing::debug!(request_id = %id, %reason, "server ended the request (subscription torn down)");
                    return Err(Box::new(Cancelled::new(reason)));
                }
                _ => {
                    tracing::debug!(request_id = %id, "notifications/cancelled for another request on this stream ignored");
                }
            },
            Ok(Message::Notification(n)) => {
                tracing::debug!(request_id = %id, method = ?n.method, "notification on the response stream");
            }
            Ok(Message::Request(r)) => {
                tracing::debug!(request_id = %id, method = ?r.method, "server request on the response stream ignored (not allowed in 2026-07-28)");
            }
            Err(e) => {
                tracing::debug!(request_id = %id, error = %e, "undecodable SSE event ignored");
            }
        }
    }
    Err(HttpClientError::StreamEnded.into())
}

#[cfg(test)]
mod event_bound_tests {
    use super::*;
    use http_body_util::StreamBody;

    fn sse(
        body: impl http_body::Body<Data = Bytes, Error = std::io::Error> + Unpin,
    ) -> http::Response<impl http_body::Body<Data = Bytes, Error = std::io::Error> + Unpin> {
        http::Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(body)
            .unwrap()
    }

    /// A server streaming one `data:` line that never ends is cut off at the
    /// limit instead of growing the client's memory without bound.
    #[tokio::test]
    async fn an_endless_sse_event_is_refused() {
        let chunk = Bytes::from(vec![b'x'; 1 << 20]);
        let head = futures_util::stream::once(std::future::ready(Ok(http_body::Frame::data(
            Bytes::from_static(b"data: "),
        ))));
        let endless = futures_util::stream::repeat_with(move || {
            Ok::<_, std::io::Error>(http_body::Frame::data(chunk.clone()))
        });
        let body = StreamBody::new(head.chain(endless));
        let res = sse(body);
        let limit = 3 << 20;
        let err = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            read_response(res, &RequestId::Number(1), Route::default(), limit),
        )
        .await
        .expect("bounded")
        .unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<HttpClientError>(),
                Some(HttpClientError::ResponseTooLarge { limit: l }) if *l == limit
            ),
            "{err}"
        );
        assert!(err.to_string().contains("limit of 3145728 bytes"), "{err}");
    }

    /// Many small events add up to far more than the limit and are fine: the
    /// bound is per event.
    #[tokio::test]
    async fn the_bound_is_per_event() {
        let progress = Bytes::from_static(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/ping\"}\n\n",
        );
        let n = (MAX_RESPONSE_BYTES / progress.len()) + 1000;
        let events = futures_util::stream::iter(
            (0..n).map(move |_| Ok::<_, std::io::Error>(http_body::Frame::data(progress.clone()))),
        );
        let last = futures_util::stream::once(std::future::ready(Ok(http_body::Frame::data(
            Bytes::from_static(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}\n\n",
            ),
        ))));
        let res = sse(StreamBody::new(events.chain(last)));
        let v = read_response(
            res,
            &RequestId::Number(1),
            Route::default(),
            MAX_RESPONSE_BYTES,
        )
        .await
        .unwrap();
        assert_eq!(v["ok"], true);
    }
}
