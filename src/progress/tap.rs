use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Context;

use futures_util::task::AtomicWaker;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::jsonrpc::{ProgressParams, ProgressToken};

/// One progress report.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Progress so far.
    pub progress: f64,
    /// The total, when known.
    pub total: Option<f64>,
    /// A human-readable message.
    pub message: Option<String>,
}

/// What [`ProgressTap::record`] did with a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// It increased: the idle clock restarts and observers see it.
    Accepted,
    /// It did not increase (a repeat, a decrease, or not a number): ignored.
    NotIncreasing,
    /// The request already ended: ignored (progress stops after completion).
    Closed,
}

/// A callback that sees every accepted progress report of a request; put one
/// in the request's extensions before calling (e.g. to draw a progress bar).
///
/// ```
/// use tower_mcp_cancel::{McpRequest, ProgressObserver};
/// let req = McpRequest::new(1, "tools/call")
///     .with_extension(ProgressObserver::new(|p| eprintln!("{}/{:?}", p.progress, p.total)));
/// # let _ = req;
/// ```
#[derive(Clone)]
pub struct ProgressObserver(Arc<dyn Fn(&Progress) + Send + Sync>);

impl ProgressObserver {
    /// An observer calling `f`.
    pub fn new(f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl fmt::Debug for ProgressObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressObserver")
    }
}

/// Where progress for one request is recorded, and seen.
///
/// [`ProgressResetLayer`](super::ProgressResetLayer) creates one per request
/// and sets it on the request ([`RequestView::set_progress_tap`](crate::RequestView::set_progress_tap));
/// the idle clock restarts on each
/// accepted report. Clones share the tap. After the request ends the tap is
/// closed and records nothing more.
#[derive(Clone)]
pub struct ProgressTap {
    inner: Arc<TapInner>,
}

struct TapInner {
    token: ProgressToken,
    state: Mutex<TapState>,
    /// Bumped on each accepted report; the layer compares it to what it saw.
    epoch: AtomicU64,
    waker: AtomicWaker,
    observer: Option<ProgressObserver>,
    watch: OnceLock<watch::Sender<Option<Progress>>>,
    /// Set by the layer: what its response future needs only once the
    /// request waits, kept in this allocation so that the future is small.
    request: Option<TapRequest>,
}

/// The request a [`ProgressResetLayer`](super::ProgressResetLayer) tap
/// belongs to: its limits from `started`, and what an expiry logs and
/// cancels.
pub(crate) struct TapRequest {
    pub(crate) started: Instant,
    pub(crate) limits: super::limits::ProgressLimits,
    pub(crate) id: Option<crate::jsonrpc::RequestId>,
    pub(crate) method: Option<crate::jsonrpc::Method>,
    pub(crate) cancellation: Option<crate::cancel::Cancellation>,
}

impl TapRequest {
    /// The idle deadline (from the last report, else from the start) and
    /// the hard maximum; `None`: no such limit (disabled, or past what an
    /// `Instant` holds, e.g. `Duration::MAX`).
    pub(crate) fn deadlines(
        &self,
        last_report: Option<Instant>,
    ) -> (Option<Instant>, Option<Instant>) {
        let idle = last_report
            .unwrap_or(self.started)
            .checked_add(self.limits.idle);
        let max = self.limits.max.and_then(|m| self.started.checked_add(m));
        (idle, max)
    }
}

struct TapState {
    last: Option<f64>,
    last_at: Option<Instant>,
    closed: bool,
}

impl ProgressTap {
    /// A tap for the request with progress token `token`.
    pub fn new(token: ProgressToken, observer: Option<ProgressObserver>) -> Self {
        Self::with_request(token, observer, None)
    }

    /// A tap that also carries its request's [`TapRequest`] (the layer's).
    pub(crate) fn with_request(
        token: ProgressToken,
        observer: Option<ProgressObserver>,
        request: Option<TapRequest>,
    ) -> Self {
        Self {
            inner: Arc::new(TapInner {
                token,
                state: Mutex::new(TapState {
                    last: None,
                    last_at: None,
                    closed: false,
                }),
                epoch: AtomicU64::new(0),
                waker: AtomicWaker::new(),
                observer,
                watch: OnceLock::new(),
                request,
            }),
        }
    }

    /// The request's progress token.
    pub fn token(&self) -> &ProgressToken {
        &self.inner.token
    }

    /// Records a progress report. Only a value strictly greater than the last
    /// accepted one counts.
    pub fn record(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> RecordOutcome {
        let mut st = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.closed {
            tracing::debug!(progress_token = %self.inner.token, progress, "progress after completion ignored");
            return RecordOutcome::Closed;
        }
        let increases = progress.is_finite() && st.last.is_none_or(|last| progress > last);
        if !increases {
            tracing::debug!(
                progress_token = %self.inner.token,
                progress,
                last = st.last,
                "progress that does not increase ignored"
            );
            return RecordOutcome::NotIncreasing;
        }
        st.last = Some(progress);
        st.last_at = Some(Instant::now());
        drop(st);
        self.inner.epoch.fetch_add(1, Ordering::AcqRel);
        self.inner.waker.wake();
        let p = Progress {
            progress,
            total,
            message,
        };
        if let Some(obs) = &self.inner.observer {
            (obs.0)(&p);
        }
        if let Some(tx) = self.inner.watch.get() {
            tx.send_replace(Some(p));
        }
        RecordOutcome::Accepted
    }

    /// Records the params of a `notifications/progress` (the token is not
    /// checked: the caller routed it here by token).
    pub fn record_params(&self, params: ProgressParams) -> RecordOutcome {
        self.record(params.progress, params.total, params.message)
    }

    /// The last accepted progress value.
    pub fn last(&self) -> Option<f64> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last
    }

    /// Subscribes to the latest accepted report (for a progress bar, or a
    /// handler watching its own progress).
    pub fn subscribe(&self) -> watch::Receiver<Option<Progress>> {
        self.inner
            .watch
            .get_or_init(|| watch::channel(None).0)
            .subscribe()
    }

    /// Closes the tap: the request ended, later reports are ignored.
    pub fn close(&self) {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
    }

    /// Whether the tap is closed.
    pub fn is_closed(&self) -> bool {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed
    }

    pub(crate) fn register(&self, cx: &mut Context<'_>) {
        self.inner.waker.register(cx.waker());
    }

    /// The request this tap belongs to, when the layer made it.
    pub(crate) fn request(&self) -> Option<&TapRequest> {
        self.inner.request.as_ref()
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::Acquire)
    }

    pub(crate) fn last_at(&self) -> Option<Instant> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_at
    }
}

impl fmt::Debug for ProgressTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressTap")
            .field("token", &self.inner.token)
            .field("last", &self.last())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_strict_increase_counts() {
        let tap = ProgressTap::new(ProgressToken::from(1), None);
        assert_eq!(tap.record(1.0, None, None), RecordOutcome::Accepted);
        assert_eq!(tap.record(1.0, None, None), RecordOutcome::NotIncreasing);
        assert_eq!(tap.record(0.5, None, None), RecordOutcome::NotIncreasing);
        assert_eq!(
            tap.record(f64::NAN, None, None),
            RecordOutcome::NotIncreasing
        );
        assert_eq!(tap.record(1.5, None, None), RecordOutcome::Accepted);
        assert_eq!(tap.epoch(), 2);
        tap.close();
        assert_eq!(tap.record(9.0, None, None), RecordOutcome::Closed);
        assert_eq!(tap.last(), Some(1.5));
    }

    #[test]
    fn observers_and_subscribers_see_accepted_only() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let tap = ProgressTap::new(
            ProgressToken::from("t"),
            Some(ProgressObserver::new(move |p| {
                s2.lock().unwrap().push(p.progress)
            })),
        );
        let rx = tap.subscribe();
        tap.record(0.0, Some(2.0), Some("start".into()));
        tap.record(0.0, None, None);
        tap.record(2.0, Some(2.0), None);
        assert_eq!(*seen.lock().unwrap(), vec![0.0, 2.0]);
        assert_eq!(rx.borrow().as_ref().unwrap().progress, 2.0);
    }
}
