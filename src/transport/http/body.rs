//! [`ResponseBody`], the body type of the server adapter: a complete JSON
//! body, or an SSE stream that owns the request's [`Exchange`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;
use sse_stream::{KeepAlive, SseBody, Timer};

use super::exchange::Exchange;
use crate::error::BoxError;

/// A [`sse_stream::Timer`] on tokio's clock, for keep-alive comments.
struct TokioTimer {
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl std::fmt::Debug for TokioTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioTimer")
            .field("deadline", &self.sleep.deadline())
            .finish()
    }
}

impl Future for TokioTimer {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().sleep.as_mut().poll(cx)
    }
}

impl Timer for TokioTimer {
    fn reset(self: Pin<&mut Self>, instant: std::time::Instant) {
        // sse-stream speaks std's clock; keep the same distance on tokio's.
        let delay = instant.saturating_duration_since(std::time::Instant::now());
        // A deadline past what the clock can hold is never (30 years, as
        // tokio's own far future).
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 3600));
        self.get_mut().sleep.as_mut().reset(deadline);
    }
    fn from_duration(duration: Duration) -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(duration)),
        }
    }
}

pin_project! {
    /// The response body of [`StreamableHttpService`](super::StreamableHttpService):
    /// a complete JSON body, or an SSE stream that owns the request's handler.
    ///
    /// Dropping an SSE body before its end (the client went away) drops the
    /// handler future and fires its cancellation token.
    pub struct ResponseBody {
        // An SSE comment sent before anything else (the switch to SSE of a
        // silent handler).
        prelude: Option<Bytes>,
        #[pin]
        kind: Kind,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind {
        Full { #[pin] body: Full<Bytes> },
        Sse { #[pin] body: SseBody<Exchange, TokioTimer> },
        SseNoKeepAlive { #[pin] body: SseBody<Exchange> },
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Full { .. } => "json",
            _ => "sse",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

impl ResponseBody {
    /// A complete body.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            prelude: None,
            kind: Kind::Full {
                body: Full::new(bytes.into()),
            },
        }
    }

    /// An empty body.
    pub(crate) fn empty() -> Self {
        Self::full(Bytes::new())
    }

    /// A complete body already built.
    pub(crate) fn from_full(body: Full<Bytes>) -> Self {
        Self {
            prelude: None,
            kind: Kind::Full { body },
        }
    }

    pub(crate) fn sse(exchange: Exchange, keep_alive: Option<Duration>) -> Self {
        // sse-stream adds the interval to `Instant::now()` after each event
        // (and panics on overflow): an interval the clock cannot add means
        // never, so it gets no keep-alive at all. Twice the interval covers
        // the later additions (the process runs for less than that).
        let keep_alive = keep_alive.filter(|interval| {
            std::time::Instant::now()
                .checked_add(interval.saturating_mul(2))
                .is_some()
        });
        let kind = match keep_alive {
            Some(interval) => Kind::Sse {
                body: SseBody::new_keep_alive(exchange, KeepAlive::new().interval(interval)),
            },
            None => Kind::SseNoKeepAlive {
                body: SseBody::new(exchange),
            },
        };
        Self {
            prelude: None,
            kind,
        }
    }

    /// Starts the body with an SSE comment line (`:` and a blank line).
    pub(crate) fn comment_first(&mut self) {
        self.prelude = Some(Bytes::from_static(b":\n\n"));
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(comment) = this.prelude.take() {
            return Poll::Ready(Some(Ok(Frame::data(comment))));
        }
        match this.kind.project() {
            KindProj::Full { body } => body.poll_frame(cx).map_err(|e| match e {}),
            KindProj::Sse { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::SseNoKeepAlive { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.prelude.is_some() {
            return false;
        }
        match &self.kind {
            Kind::Full { body } => body.is_end_stream(),
            Kind::Sse { body } => body.is_end_stream(),
            Kind::SseNoKeepAlive { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { body } if self.prelude.is_none() => body.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_response_body_is_send() {
        fn is_send<T: Send>() {}
        is_send::<super::ResponseBody>();
    }
}
