//! Reading a POST's body: bounded in size (`413`), in the time between two
//! frames (`408`), and by the server's shutdown (`503`).
//!
//! One hand-written poll loop rather than `select!` over `timeout(frame())`:
//! a body that is already here (the common case — the head and a small body
//! arrive together) is read without arming a timer, without a second
//! future, and, when it is one frame, without a copy.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{header, HeaderMap, StatusCode};
use http_body::Body;
use http_body_util::LengthLimitError;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::config::Config;
use super::validation::Rejection;
use crate::error::BoxError;
use crate::jsonrpc::ErrorObject;

/// Reads the body, up to `max_body_bytes` (a declared `Content-Length` over
/// it is refused before reading; a `RequestBodyLimitLayer` outside that cut
/// the body is refused the same way), each frame within `body_timeout` of
/// the wait for it. The shutdown ends a wait, but a body already here is
/// read: a session's cancel is still served while draining.
pub(super) async fn read<B>(
    body: B,
    headers: &HeaderMap,
    config: &Config,
) -> Result<Bytes, Rejection>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let limit = config.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    collect(body, limit, config.body_timeout, config.shutdown.as_ref())
        .await
        .map_err(|stop| match stop {
            Stop::TooLarge => too_large(limit),
            Stop::Stalled => Rejection::new(
                StatusCode::REQUEST_TIMEOUT,
                None,
                ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    "Request Timeout: the request body stalled past the body timeout",
                ),
            ),
            Stop::ShuttingDown => Rejection::new(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                ErrorObject::new(
                    ErrorObject::INTERNAL_ERROR,
                    "Service Unavailable: the server is shutting down",
                ),
            ),
            Stop::Failed(e) if is_length_limit(&*e) => too_large(limit),
            Stop::Failed(e) => Rejection::new(
                StatusCode::BAD_REQUEST,
                None,
                ErrorObject::new(
                    ErrorObject::PARSE_ERROR,
                    format!("could not read the request body: {e}"),
                ),
            ),
        })
}

fn too_large(limit: usize) -> Rejection {
    Rejection::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        None,
        ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            format!("Payload Too Large: the request body exceeds the limit of {limit} bytes"),
        ),
    )
}

/// Why a body was not read to its end.
#[derive(Debug)]
enum Stop {
    TooLarge,
    /// No frame within the idle time.
    Stalled,
    ShuttingDown,
    Failed(BoxError),
}

/// Collects `body` up to `max` bytes. The idle timer and the shutdown wait
/// are polled only while the body is pending; the timer is armed once and
/// reset (not re-created) after each frame. An idle time too large to add
/// to the clock never fires.
async fn collect<B>(
    body: B,
    max: usize,
    idle: Option<Duration>,
    shutdown: Option<&CancellationToken>,
) -> Result<Bytes, Stop>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let mut body = pin!(body);
    let mut shutdown = pin!(shutdown.map(CancellationToken::cancelled));
    let mut stall: std::pin::Pin<&mut Option<Sleep>> = pin!(None);
    let mut collected = Collected::default();
    // Set when a frame came since the timer was last armed.
    let mut rearm = true;
    poll_fn(|cx| loop {
        match body.as_mut().poll_frame(cx) {
            Poll::Ready(None) => return Poll::Ready(Ok(collected.take())),
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(Stop::Failed(e.into()))),
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if !collected.push(data, max) {
                        return Poll::Ready(Err(Stop::TooLarge));
                    }
                }
                rearm = true;
                continue;
            }
            Poll::Pending => {}
        }
        if let Some(wait) = shutdown.as_mut().as_pin_mut() {
            if wait.poll(cx).is_ready() {
                return Poll::Ready(Err(Stop::ShuttingDown));
            }
        }
        if let (Some(idle), true) = (idle, rearm) {
            rearm = false;
            match Instant::now().checked_add(idle) {
                Some(deadline) => match stall.as_mut().as_pin_mut() {
                    Some(sleep) => sleep.reset(deadline),
                    None => stall.set(Some(tokio::time::sleep_until(deadline))),
                },
                None => stall.set(None),
            }
        }
        if let Some(sleep) = stall.as_mut().as_pin_mut() {
            if sleep.poll(cx).is_ready() {
                return Poll::Ready(Err(Stop::Stalled));
            }
        }
        return Poll::Pending;
    })
    .await
}

/// The frames read so far: one frame is kept as it came (no copy); only a
/// body in several frames is joined.
#[derive(Debug, Default)]
enum Collected {
    #[default]
    Empty,
    One(Bytes),
    Joined(BytesMut),
}

impl Collected {
    fn len(&self) -> usize {
        match self {
            Self::Empty => 0,
            Self::One(b) => b.len(),
            Self::Joined(b) => b.len(),
        }
    }

    /// Adds a frame; `false` when the body would exceed `max`.
    fn push(&mut self, mut data: impl Buf, max: usize) -> bool {
        let n = data.remaining();
        if n > max.saturating_sub(self.len()) {
            return false;
        }
        if n == 0 {
            return true;
        }
        *self = match std::mem::take(self) {
            Self::Empty => Self::One(data.copy_to_bytes(n)),
            Self::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + n);
                joined.put(first);
                joined.put(data);
                Self::Joined(joined)
            }
            Self::Joined(mut joined) => {
                joined.put(data);
                Self::Joined(joined)
            }
        };
        true
    }

    fn take(&mut self) -> Bytes {
        match std::mem::take(self) {
            Self::Empty => Bytes::new(),
            Self::One(b) => b,
            Self::Joined(b) => b.freeze(),
        }
    }
}

fn is_length_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::Context;

    use http_body::Frame;
    use http_body_util::Full;
    use tokio::sync::mpsc;

    use super::*;

    /// A body whose frames a test sends; it ends when the sender is dropped.
    struct Channel(mpsc::UnboundedReceiver<Bytes>);

    impl Body for Channel {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn channel() -> (mpsc::UnboundedSender<Bytes>, Channel) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Channel(rx))
    }

    const IDLE: Option<Duration> = Some(Duration::from_secs(10));

    #[tokio::test]
    async fn a_body_in_one_frame_is_not_copied() {
        let sent = Bytes::from_static(b"{\"jsonrpc\":\"2.0\"}");
        let read = collect(Full::new(sent.clone()), 1024, IDLE, None)
            .await
            .unwrap();
        assert_eq!(read, sent);
        assert_eq!(read.as_ptr(), sent.as_ptr(), "the frame was copied");
    }

    #[tokio::test]
    async fn frames_are_joined_in_order() {
        let (tx, body) = channel();
        for part in ["ab", "", "cd", "e"] {
            tx.send(Bytes::from(part)).unwrap();
        }
        drop(tx);
        assert_eq!(collect(body, 5, IDLE, None).await.unwrap(), "abcde");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_without_a_declared_length() {
        let (tx, body) = channel();
        tx.send(Bytes::from("abc")).unwrap();
        tx.send(Bytes::from("de")).unwrap();
        // The sender stays open: the limit ends the read, not the body's end.
        let stop = collect(body, 4, IDLE, None).await.unwrap_err();
        assert!(matches!(stop, Stop::TooLarge), "{stop:?}");
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_ends_after_the_idle_time() {
        let (tx, body) = channel();
        tx.send(Bytes::from("ab")).unwrap();
        let start = Instant::now();
        let stop = collect(body, 1024, IDLE, None).await.unwrap_err();
        assert!(matches!(stop, Stop::Stalled), "{stop:?}");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn each_frame_restarts_the_idle_time() {
        let (tx, body) = channel();
        tokio::spawn(async move {
            for part in ["a", "b", "c"] {
                tokio::time::sleep(Duration::from_secs(6)).await;
                tx.send(Bytes::from(part)).unwrap();
            }
            tokio::time::sleep(Duration::from_secs(6)).await;
        });
        let start = Instant::now();
        assert_eq!(collect(body, 1024, IDLE, None).await.unwrap(), "abc");
        // 24 s in all, more than the idle time, never 10 s without a frame.
        assert_eq!(start.elapsed(), Duration::from_secs(24));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_time_past_the_clocks_range_never_fires() {
        let (tx, body) = channel();
        let read = collect(body, 1024, Some(Duration::MAX), None);
        let outer = tokio::time::timeout(Duration::from_secs(1_000_000_000), read).await;
        assert!(outer.is_err(), "the read ended: {outer:?}");
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn the_shutdown_ends_a_wait_for_the_body() {
        let (tx, body) = channel();
        tx.send(Bytes::from("ab")).unwrap();
        let shutdown = CancellationToken::new();
        let fire = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            fire.cancel();
        });
        let stop = collect(body, 1024, IDLE, Some(&shutdown))
            .await
            .unwrap_err();
        assert!(matches!(stop, Stop::ShuttingDown), "{stop:?}");
        drop(tx);
    }

    #[tokio::test]
    async fn a_body_already_here_is_read_after_the_shutdown() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let read = collect(Full::new(Bytes::from("ab")), 1024, IDLE, Some(&shutdown)).await;
        assert_eq!(read.unwrap(), "ab");
    }
}
