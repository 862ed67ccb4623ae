//! Progress the rmcp handler reports over Streamable HTTP, seen in the
//! response bodies of rmcp's `StreamableHttpService`: [`ObserveHttpLayer`].
//!
//! rmcp builds a transport per HTTP request inside its service, so
//! [`ObserveProgress`](super::ObserveProgress) cannot wrap it; what the
//! handler sends still leaves through the response body (a handler that
//! reports progress gets an SSE stream even in JSON-response mode). The
//! layer wraps each SSE body and checks every `notifications/progress`
//! event with the wrapper's progress registry as it passes: recorded if it
//! belongs to a request in flight and increases, taken out of the stream
//! otherwise. Events pass whole, once their blank line has come.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use tower_mcp_cancel::integration::ProgressRegistry;
use tower_mcp_cancel::jsonrpc::ProgressToken;

/// The longest SSE event held while waiting for its end; a longer one
/// passes unchecked (a progress event is a few hundred bytes).
const MAX_EVENT: usize = 64 * 1024;

/// Feeds the progress notifications in an rmcp `StreamableHttpService`'s
/// response bodies to the requests' idle limits, and takes out those of a
/// request that ended or whose value does not increase. Made by
/// [`Cancellable::observe_http`](super::Cancellable::observe_http).
#[derive(Clone)]
pub struct ObserveHttpLayer {
    registry: ProgressRegistry,
}

impl std::fmt::Debug for ObserveHttpLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserveHttpLayer").finish_non_exhaustive()
    }
}

impl ObserveHttpLayer {
    pub(super) fn new(registry: ProgressRegistry) -> Self {
        Self { registry }
    }
}

impl<S> Layer<S> for ObserveHttpLayer {
    type Service = ObserveHttp<S>;
    fn layer(&self, inner: S) -> ObserveHttp<S> {
        ObserveHttp {
            inner,
            registry: self.registry.clone(),
        }
    }
}

/// The service of [`ObserveHttpLayer`].
#[derive(Clone)]
pub struct ObserveHttp<S> {
    inner: S,
    registry: ProgressRegistry,
}

impl<S: std::fmt::Debug> std::fmt::Debug for ObserveHttp<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserveHttp")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, RB> Service<http::Request<B>> for ObserveHttp<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    RB: Body<Data = Bytes>,
{
    type Response = http::Response<ObserveBody<RB>>;
    type Error = S::Error;
    type Future = ObserveFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        ObserveFuture {
            inner: self.inner.call(req),
            registry: Some(self.registry.clone()),
        }
    }
}

pin_project! {
    /// The response future of [`ObserveHttp`].
    pub struct ObserveFuture<F> {
        #[pin]
        inner: F,
        registry: Option<ProgressRegistry>,
    }
}

impl<F, RB, E> Future for ObserveFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
    RB: Body<Data = Bytes>,
{
    type Output = Result<http::Response<ObserveBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        let registry = this.registry.take().unwrap_or_default();
        Poll::Ready(out.map(|r| {
            // Only an event stream carries notifications.
            let sse = r
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
            r.map(|inner| ObserveBody {
                inner,
                events: sse.then(|| Events::new(registry)),
                held: None,
                done: false,
            })
        }))
    }
}

pin_project! {
    /// A response body whose progress events are checked as they pass: a
    /// refused one is taken out of the stream.
    pub struct ObserveBody<B> {
        #[pin]
        inner: B,
        // `None`: not an event stream, passed through as it is.
        events: Option<Events>,
        // A frame that came while part of an event was held: sent after it.
        held: Option<Frame<Bytes>>,
        // The inner body has ended.
        done: bool,
    }
}

impl<B: Body<Data = Bytes>> Body for ObserveBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let Some(events) = this.events else {
            return this.inner.poll_frame(cx);
        };
        if let Some(frame) = this.held.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        loop {
            if *this.done {
                return Poll::Ready(None);
            }
            let frame = match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    // An event cut short by the end goes as it is.
                    *this.done = true;
                    let rest = events.take_rest();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(rest.into()))));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = events.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out.into()))));
                    }
                }
                Err(frame) => {
                    let rest = events.take_rest();
                    if rest.is_empty() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    *this.held = Some(frame);
                    return Poll::Ready(Some(Ok(Frame::data(rest.into()))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none()
            && self.events.as_ref().is_none_or(Events::is_empty)
            && (self.done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.events {
            // Events taken out make the inner hint too large.
            Some(_) => http_body::SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

/// Splits an SSE stream into its events and passes on those the registry
/// does not refuse.
struct Events {
    registry: ProgressRegistry,
    // The event not yet ended.
    pending: Vec<u8>,
    // In an event longer than MAX_EVENT: passed on unchecked to its end.
    oversized: bool,
}

impl Events {
    fn new(registry: ProgressRegistry) -> Self {
        Self {
            registry,
            pending: Vec::new(),
            oversized: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// What is held of an unfinished event, as it is.
    fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// Takes in `data`; returns what may be sent now: the events it ended
    /// that are not refused.
    fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in data.split_inclusive(|&b| b == b'\n') {
            if self.oversized {
                out.extend_from_slice(part);
                if is_blank(part) {
                    self.oversized = false;
                }
                continue;
            }
            self.pending.extend_from_slice(part);
            if ends_event(&self.pending) {
                if admit(&self.registry, &self.pending) {
                    out.extend_from_slice(&self.pending);
                }
                self.pending.clear();
            } else if self.pending.len() > MAX_EVENT {
                out.append(&mut self.pending);
                self.oversized = true;
            }
        }
        out
    }
}

/// Whether `line` is an empty line (the end of an event).
fn is_blank(line: &[u8]) -> bool {
    line == b"\n" || line == b"\r\n"
}

/// Whether `event` ends with the empty line that ends an SSE event (or is
/// one: a stray empty line, passed on as it is).
fn ends_event(event: &[u8]) -> bool {
    is_blank(event) || event.ends_with(b"\n\n") || event.ends_with(b"\n\r\n")
}

/// Whether an SSE event may be sent: `false` only for a progress
/// notification the registry refuses.
fn admit(registry: &ProgressRegistry, event: &[u8]) -> bool {
    event
        .split(|&b| b == b'\n')
        .all(|line| admit_line(registry, line))
}

/// `false` if `line` is the `data:` of a progress notification the
/// registry refuses.
fn admit_line(registry: &ProgressRegistry, line: &[u8]) -> bool {
    let Some(data) = line.strip_prefix(b"data:") else {
        return true;
    };
    // Cheap test first: most events are not progress.
    if !data.windows(22).any(|w| w == b"notifications/progress") {
        return true;
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "progressToken")]
        token: ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Notification {
        method: String,
        params: Params,
    }
    let Ok(n) = serde_json::from_slice::<Notification>(data.trim_ascii()) else {
        return true;
    };
    if n.method != "notifications/progress" {
        return true;
    }
    let p = n.params;
    registry.admit(&p.token, p.progress, p.total, p.message.as_deref())
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, StreamBody};

    use super::*;
    use tower_mcp_cancel::ProgressTap;

    #[tokio::test]
    async fn progress_events_split_across_frames_are_recorded() {
        let registry = ProgressRegistry::default();
        let tap = ProgressTap::new(ProgressToken::from("p1"), None);
        let _registration = registry.register(tap.token(), Some(tap.clone()));
        let event = br#"data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":3,"total":10}}"#;
        let (a, b) = event.split_at(40);
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"id: 1\n"))),
            Ok(Frame::data(Bytes::copy_from_slice(a))),
            Ok(Frame::data(Bytes::copy_from_slice(b))),
            Ok(Frame::data(Bytes::from_static(b"\n\n"))),
            Ok(Frame::data(Bytes::from_static(
                b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            ))),
        ];
        let body = ObserveBody {
            inner: StreamBody::new(futures_util::stream::iter(frames)),
            events: Some(Events::new(registry)),
            held: None,
            done: false,
        };
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(
            &all[..],
            [
                &b"id: 1\n"[..],
                event,
                b"\n\n",
                b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
            ]
            .concat(),
            "passed through unchanged"
        );
        assert_eq!(tap.last(), Some(3.0));
    }

    #[tokio::test]
    async fn refused_progress_events_are_taken_out_whole() {
        let registry = ProgressRegistry::default();
        let _registration = registry.register(ProgressToken::from("p1"), None);
        let progress = |p: u32| {
            format!("id: {p}\r\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"p1\",\"progress\":{p}}}}}\r\n\r\n")
        };
        let stream = [progress(5), progress(3), progress(6)].concat();
        // One byte a frame: every split an event can have.
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = stream
            .bytes()
            .map(|b| Ok(Frame::data(Bytes::copy_from_slice(&[b]))))
            .collect();
        let body = ObserveBody {
            inner: StreamBody::new(futures_util::stream::iter(frames)),
            events: Some(Events::new(registry)),
            held: None,
            done: false,
        };
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(
            String::from_utf8_lossy(&all),
            [progress(5), progress(6)].concat()
        );
    }
}
