//! A connection's requests as `serve` tracks them: how many are in flight
//! (for its idle and header read timeouts, and HTTP/2 write coalescing),
//! the watcher that asks it to end, and the response body that keeps a
//! request counted until it is dropped.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why [`watch`] asks a connection to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Shutdown,
    /// No request in flight for the idle (HTTP/1: or header read) timeout.
    Quiet,
}

/// Asks the connection to end (through `ask_end`) when the shutdown fires
/// or it had no request in flight for `idle`; returns when the connection
/// ended first.
pub(super) async fn watch(
    shutdown: CancellationToken,
    activity: Arc<Activity>,
    idle: Option<Duration>,
    mut ask_end: oneshot::Sender<End>,
) {
    let quiet = async {
        match idle {
            Some(idle) => activity.quiet_for(idle).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        _ = ask_end.closed() => return,
        _ = shutdown.cancelled() => End::Shutdown,
        _ = quiet => {
            tracing::debug!("no request in flight for the idle timeout; ending the connection");
            End::Quiet
        }
    };
    let _ = ask_end.send(end);
}

/// One connection's requests: how many are in flight and since when none
/// is, for its idle timer. While it lives `serve` does not return (it holds
/// one of the senders `serve` waits on), and every request of the
/// connection, and what it leaves running, holds it.
///
/// Nothing here wakes the connection: a request that starts or ends
/// updates two atomics, and the idle timer reads them when it fires (a
/// `Notify` woke the connection's task twice per request, and re-armed a
/// timer each time the connection went quiet).
#[derive(Debug)]
pub(super) struct Activity {
    /// Requests in flight.
    pub(super) open: AtomicUsize,
    /// When a request last ended, in nanoseconds since `base`.
    last_end: AtomicU64,
    base: Instant,
    _serving: mpsc::Sender<()>,
}

impl Activity {
    pub(super) fn new(serving: mpsc::Sender<()>) -> Self {
        Self {
            open: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            base: Instant::now(),
            _serving: serving,
        }
    }

    /// Returns once no request has been in flight for `idle` in a row:
    /// the timer is due `idle` after the later of its start and the last
    /// request's end, and is re-armed (not woken early) when a request came
    /// meanwhile.
    async fn quiet_for(&self, idle: Duration) {
        let mut since = Instant::now();
        loop {
            let Some(due) = since.checked_add(idle) else {
                return std::future::pending().await;
            };
            tokio::time::sleep_until(due).await;
            let now = Instant::now();
            if self.open.load(Ordering::Acquire) > 0 {
                since = now;
                continue;
            }
            // The end stamp is stored before the count drops, so a count
            // of 0 read above comes with the stamp of the last end.
            let last_end = self.base + Duration::from_nanos(self.last_end.load(Ordering::Acquire));
            if last_end.checked_add(idle).is_some_and(|quiet| quiet <= now) {
                return;
            }
            since = since.max(last_end);
        }
    }
}

/// One request in flight on its connection, until dropped.
#[derive(Debug)]
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn new(activity: &Arc<Activity>) -> Self {
        activity.open.fetch_add(1, Ordering::AcqRel);
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        // Nanoseconds since the connection's start: u64 lasts 584 years.
        let since_base = Instant::now().saturating_duration_since(activity.base);
        let stamp = u64::try_from(since_base.as_nanos()).unwrap_or(u64::MAX);
        // `fetch_max`: of two requests ending together, the later stamp stays.
        activity.last_end.fetch_max(stamp, Ordering::AcqRel);
        activity.open.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request counted in flight until it
    /// is dropped.
    pub(super) struct Tracked<B> {
        #[pin]
        pub(super) body: B,
        pub(super) _busy: Busy,
    }
}

impl<B: http_body::Body> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
