//! Progress the rmcp handler reports over Streamable HTTP, seen in the
//! response bodies of rmcp's `StreamableHttpService`: [`ObserveHttpLayer`].
//!
//! rmcp builds a transport per HTTP request inside its service, so
//! [`ObserveProgress`](super::ObserveProgress) cannot wrap it; what the
//! handler sends still leaves through the response body (a handler that
//! reports progress gets an SSE stream even in JSON-response mode). The
//! layer wraps each body and records every `notifications/progress` event
//! in the wrapper's progress registry as it passes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::integrations::progress::ProgressRegistry;
use crate::jsonrpc::ProgressToken;

/// The longest SSE line kept while waiting for its end; a longer one is
/// skipped (a progress event is a few hundred bytes).
const MAX_LINE: usize = 64 * 1024;

/// Feeds the progress notifications in an rmcp `StreamableHttpService`'s
/// response bodies to the requests' idle limits. Made by
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
            r.map(|inner| ObserveBody {
                inner,
                registry,
                line: Vec::new(),
                skipping: false,
            })
        }))
    }
}

pin_project! {
    /// A response body that records the progress events passing through it.
    pub struct ObserveBody<B> {
        #[pin]
        inner: B,
        registry: ProgressRegistry,
        // The SSE line not yet ended.
        line: Vec<u8>,
        // In a line longer than MAX_LINE: skip to its end.
        skipping: bool,
    }
}

impl<B: Body<Data = Bytes>> Body for ObserveBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if let Some(Ok(frame)) = &frame {
            if let Some(data) = frame.data_ref() {
                for part in data.split_inclusive(|&b| b == b'\n') {
                    let ended = part.ends_with(b"\n");
                    if !*this.skipping {
                        if this.line.len() + part.len() > MAX_LINE {
                            this.line.clear();
                            *this.skipping = true;
                        } else {
                            this.line.extend_from_slice(part);
                        }
                    }
                    if ended {
                        if !*this.skipping {
                            record(this.registry, this.line);
                        }
                        this.line.clear();
                        *this.skipping = false;
                    }
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Records one SSE line if it is the `data:` of a progress notification.
fn record(registry: &ProgressRegistry, line: &[u8]) {
    let Some(data) = line.strip_prefix(b"data:") else {
        return;
    };
    // Cheap test first: most events are not progress.
    if !data.windows(22).any(|w| w == b"notifications/progress") {
        return;
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
        return;
    };
    if n.method == "notifications/progress" {
        let p = n.params;
        // Already on its way: only the idle limit can take note.
        let _ = registry.admit(&p.token, p.progress, p.total, p.message.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, StreamBody};

    use super::*;
    use crate::ProgressTap;

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
            registry,
            line: Vec::new(),
            skipping: false,
        };
        let all = body.collect().await.unwrap().to_bytes();
        assert!(
            all.ends_with(b"\"result\":{}}\n\n"),
            "passed through unchanged"
        );
        assert_eq!(tap.last(), Some(3.0));
    }
}
