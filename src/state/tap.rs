//! [`ProgressTap`]: where one request's progress is recorded, and the
//! progress layer's per-request limits kept with it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::sync::Arc;
use super::{Cancellation, RequestLabel, RequestState, Stamp};
use crate::error::{CancelReason, Elapsed, Limit};
use crate::jsonrpc::{Method, ProgressToken, RequestId};

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
pub struct ProgressObserver(std::sync::Arc<dyn Fn(&Progress) + Send + Sync>);

impl ProgressObserver {
    /// An observer calling `f`.
    pub fn new(f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }
}

impl fmt::Debug for ProgressObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProgressObserver")
    }
}

/// Where progress for one request is recorded, and seen.
///
/// [`ProgressResetLayer`](crate::ProgressResetLayer) creates one per request
/// and sets it on the request ([`RequestView::set_progress_tap`](crate::RequestView::set_progress_tap));
/// the idle clock restarts on each
/// accepted report. Clones share the tap. After the request ends the tap is
/// closed and records nothing more.
///
/// The tap lives with its request's [`Cancellation`] (the layer's tap is
/// therefore no allocation of its own); a tap made with
/// [`new`](Self::new) has a `Cancellation` to itself.
#[derive(Clone)]
pub struct ProgressTap {
    // The request's shared state; this handle reaches its progress part.
    request: Arc<RequestState>,
}

/// The progress part of a request's shared state. Empty until a tap is
/// made there.
pub(super) struct ProgressState {
    state: Mutex<TapState>,
    /// Set when the request ends: reports after it are refused. An atomic
    /// rather than a field under the lock, so that closing (once per
    /// request) is one store; a report racing the close is ordered by the
    /// lock's acquire either way, and what it forwards was never ordered
    /// by the lock (observers run after it is released).
    closed: AtomicBool,
}

struct TapState {
    /// Set once, when the tap is made; a second tap for the same request
    /// gets a state of its own (see `ProgressTap::for_request`).
    tap: Option<TapConfig>,
    /// The last accepted report, and when it came.
    last: Option<(f64, Instant)>,
    /// Made on the first `subscribe`.
    watch: Option<watch::Sender<Option<Progress>>>,
}

struct TapConfig {
    token: ProgressToken,
    observer: Option<ProgressObserver>,
    /// Set by the layer: its limits, read by its response future only once
    /// the request waits.
    request: Option<TapRequest>,
}

/// The request a [`ProgressResetLayer`](crate::ProgressResetLayer) tap
/// belongs to: its limits, counted from `started`.
pub(crate) struct TapRequest {
    started: Instant,
    idle: Nanos,
    max: Nanos,
    /// A `TimeoutLayer`'s deadline, or an inherited one, this layer's
    /// timer enforces too
    /// ([`DeadlineHandOff::offered`](super::DeadlineHandOff::offered)): a
    /// raw [`Stamp`], turned into an instant only when the request waits;
    /// only for the tap that lives in the request's state, the one that
    /// [takes](super::DeadlineHandOff::take) it.
    timeout: u64,
    /// The request's own cancellation when the tap could not live in its
    /// state (that already held another layer's tap): an expiry fires it
    /// too, and the progress recorded on that other tap restarts this idle
    /// clock.
    pub(crate) also: Option<Cancellation>,
}

/// A limit in nanoseconds, `u64::MAX` for none: half the size of an
/// `Option<Duration>`, in the state every request in flight keeps. A limit
/// of 584 years or more counts as none, as one past what an `Instant`
/// holds does.
#[derive(Clone, Copy)]
struct Nanos(u64);

impl Nanos {
    #[inline]
    fn of(limit: Option<Duration>) -> Self {
        // In `u64` throughout: `as_nanos` would go through `u128`.
        let nanos = limit.and_then(|l| {
            l.as_secs()
                .checked_mul(1_000_000_000)?
                .checked_add(u64::from(l.subsec_nanos()))
        });
        Self(nanos.unwrap_or(u64::MAX))
    }

    #[inline]
    fn get(self) -> Option<Duration> {
        (self.0 != u64::MAX).then(|| Duration::from_nanos(self.0))
    }
}

impl TapRequest {
    #[inline]
    pub(crate) fn new(
        started: Instant,
        idle: Duration,
        max: Option<Duration>,
        timeout: Option<Stamp>,
    ) -> Self {
        Self {
            started,
            idle: Nanos::of(Some(idle)),
            max: Nanos::of(max),
            timeout: Stamp::raw(timeout),
            also: None,
        }
    }

    /// The hard maximum's deadline, if any.
    pub(crate) fn max_deadline(&self) -> Option<Instant> {
        self.started.checked_add(self.max.get()?)
    }

    /// The deadlines as of `last_report`: the idle one (from the last
    /// report, else from the start), the hard maximum, and the taken
    /// timeout, each with its limit; `None`: no such limit (disabled, or
    /// past what an `Instant` holds).
    fn deadlines(&self, last_report: Option<Instant>) -> Deadlines {
        let after = |from: Instant, limit: Nanos| {
            let limit = limit.get()?;
            Some((from.checked_add(limit)?, limit))
        };
        let taken = Stamp::get(self.timeout);
        Deadlines {
            idle: after(last_report.unwrap_or(self.started), self.idle),
            max: after(self.started, self.max),
            timeout: taken.map(|s| {
                let at = s.at();
                (at, at.saturating_duration_since(self.started))
            }),
            inherited: taken.is_some_and(Stamp::inherited),
        }
    }
}

/// A progress layer's deadlines at one moment, each with its limit (see
/// `TapRequest::deadlines`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    idle: Option<(Instant, Duration)>,
    max: Option<(Instant, Duration)>,
    timeout: Option<(Instant, Duration)>,
    /// Whether `timeout` was inherited (named `Limit::Inherited`).
    inherited: bool,
}

impl Deadlines {
    /// The first of them: what the one timer is set to.
    pub(crate) fn first(&self) -> Option<Instant> {
        [self.idle, self.max, self.timeout]
            .into_iter()
            .flatten()
            .map(|(at, _)| at)
            .min()
    }

    /// The limit that has elapsed at `now`, if any. On a tie the layer's
    /// own limits win, as they did when the timeout ran its own timer
    /// around the layer's future.
    pub(crate) fn elapsed_at(&self, now: Instant) -> Option<Elapsed> {
        let hit = |d: Option<(Instant, Duration)>| d.filter(|(at, _)| now >= *at);
        if let Some((_, limit)) = hit(self.max) {
            Some(Elapsed::new(Limit::Max, limit))
        } else if let Some((_, limit)) = hit(self.idle) {
            Some(Elapsed::new(Limit::Idle, limit))
        } else {
            let kind = if self.inherited {
                Limit::Inherited
            } else {
                Limit::Timeout
            };
            hit(self.timeout).map(|(_, limit)| Elapsed::new(kind, limit))
        }
    }
}

impl ProgressState {
    #[inline]
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(TapState {
                tap: None,
                last: None,
                watch: None,
            }),
            closed: AtomicBool::new(false),
        }
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, TapState> {
        // Every update is a few plain stores: a panic elsewhere cannot leave
        // the state half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the tap made here was closed: its request ended, or at least
    /// the layer that made it did.
    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Makes the tap here, unless one already is (then `config` comes back).
    #[inline]
    fn claim(&self, config: TapConfig) -> Result<(), TapConfig> {
        let mut st = self.lock();
        if st.tap.is_some() {
            return Err(config);
        }
        st.tap = Some(config);
        Ok(())
    }
}

impl ProgressTap {
    /// A tap for the request with progress token `token`.
    pub fn new(token: ProgressToken, observer: Option<ProgressObserver>) -> Self {
        let config = TapConfig {
            token,
            observer,
            request: None,
        };
        Self::in_new_state(RequestLabel::default(), config)
    }

    /// The layer's tap for a request, made in the state of `cancellation`
    /// (the request's) unless that already holds a tap.
    #[inline]
    pub(crate) fn for_request(
        cancellation: &Cancellation,
        token: ProgressToken,
        observer: Option<ProgressObserver>,
        request: TapRequest,
    ) -> Self {
        let config = TapConfig {
            token,
            observer,
            request: Some(request),
        };
        let request = cancellation.request_state();
        match request.progress.claim(config) {
            Ok(()) => Self {
                request: request.clone(),
            },
            Err(mut config) => {
                if let Some(r) = &mut config.request {
                    r.also = Some(cancellation.clone());
                    // A deadline offered here is enforced by the tap that
                    // lives in the request's state (it took it) or by the
                    // offering layer's own timer, never by this one: it
                    // would name a tie with an outer layer's limit by the
                    // deadline rather than by that innermost limit.
                    r.timeout = Stamp::NONE_RAW;
                }
                Self::in_new_state(request.label.clone(), config)
            }
        }
    }

    fn in_new_state(label: RequestLabel, config: TapConfig) -> Self {
        let request = RequestState::new(label);
        // A new state holds no tap yet: the claim cannot fail.
        let _ = request.progress.claim(config);
        Self { request }
    }

    fn state(&self) -> &ProgressState {
        &self.request.progress
    }

    /// The request's progress token.
    pub fn token(&self) -> ProgressToken {
        self.with_config(|c| c.token.clone())
    }

    fn with_config<T>(&self, f: impl FnOnce(&TapConfig) -> T) -> T {
        let st = self.state().lock();
        f(st.tap
            .as_ref()
            .expect("a tap's config is set when it is made"))
    }

    /// Records a progress report. Only a value strictly greater than the last
    /// accepted one counts.
    ///
    /// Returns `true` when it was accepted: the idle clock restarts and
    /// observers see it. Returns `false` when it is ignored: it does not
    /// increase (a repeat, a decrease, or not a finite number), the
    /// request already ended ([`is_closed`](Self::is_closed); progress stops
    /// at completion), or a server transport cancelled it (its handler, in
    /// its [grace](crate::Cancellation::set_grace), reaches nobody).
    pub fn record(&self, progress: f64, total: Option<f64>, message: Option<String>) -> bool {
        let state = self.state();
        let mut st = state.lock();
        let token = || st.tap.as_ref().map(|c| c.token.to_string());
        if state.closed.load(Ordering::Acquire) {
            tracing::debug!(
                progress_token = token(),
                progress,
                "progress after completion ignored"
            );
            return false;
        }
        // Cancelled under a transport: a handler in its grace reaches
        // nobody, observers included.
        let also = || {
            st.tap
                .as_ref()
                .and_then(|c| c.request.as_ref()?.also.as_ref())
        };
        if self.request.cancel.cancelled_owned() || also().is_some_and(|c| c.cancelled_owned()) {
            tracing::debug!(
                progress_token = token(),
                progress,
                "progress after the cancel ignored"
            );
            return false;
        }
        let last = st.last.map(|(last, _)| last);
        let increases = progress.is_finite() && last.is_none_or(|last| progress > last);
        if !increases {
            tracing::debug!(
                progress_token = token(),
                progress,
                last,
                "progress that does not increase ignored"
            );
            return false;
        }
        st.last = Some((progress, Instant::now()));
        let observer = st.tap.as_ref().and_then(|c| c.observer.clone());
        let watch = st.watch.clone();
        drop(st);
        let p = Progress {
            progress,
            total,
            message,
        };
        if let Some(obs) = observer {
            (obs.0)(&p);
        }
        if let Some(tx) = watch {
            tx.send_replace(Some(p));
        }
        true
    }

    /// Records the params of a `notifications/progress` (the token is not
    /// checked: the caller routed it here by token).
    #[cfg(any(feature = "stdio", feature = "http"))]
    pub(crate) fn record_params(&self, params: crate::jsonrpc::ProgressParams) -> bool {
        self.record(params.progress, params.total, params.message)
    }

    /// The last accepted progress value.
    pub fn last(&self) -> Option<f64> {
        self.state().lock().last.map(|(last, _)| last)
    }

    /// Subscribes to the latest accepted report (for a progress bar, or a
    /// handler watching its own progress).
    pub fn subscribe(&self) -> watch::Receiver<Option<Progress>> {
        self.state()
            .lock()
            .watch
            .get_or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Closes the tap: the request ended, later reports are ignored.
    #[inline]
    pub fn close(&self) {
        self.state().closed.store(true, Ordering::Release);
    }

    /// Whether the tap is closed.
    pub fn is_closed(&self) -> bool {
        self.state().closed.load(Ordering::Acquire)
    }

    /// The layer's deadlines as of now; `None` for a tap the layer did not
    /// make.
    pub(crate) fn deadlines(&self) -> Option<Deadlines> {
        let st = self.state().lock();
        let request = st.tap.as_ref()?.request.as_ref()?;
        let mut last = st.last.map(|(_, at)| at);
        // A layer inside another: the request's progress is recorded on the
        // outer layer's tap (locked second: an outer tap never locks an
        // inner one).
        if let Some(outer) = &request.also {
            let outer = &outer.request_state().progress;
            last = last.max(outer.lock().last.map(|(_, at)| at));
        }
        Some(request.deadlines(last))
    }

    /// The deadline of the layer's hard maximum, while the tap is open;
    /// `None` for a tap the layer did not make, or without a maximum.
    pub(crate) fn max_deadline(&self) -> Option<Instant> {
        if self.is_closed() {
            return None;
        }
        let st = self.state().lock();
        st.tap.as_ref()?.request.as_ref()?.max_deadline()
    }

    /// Whether the tap lives in the state of `cancellation`: `false` for a
    /// layer's tap made inside another layer's, whose tap stays the
    /// request's.
    #[inline]
    pub(crate) fn lives_in(&self, cancellation: &Cancellation) -> bool {
        Arc::ptr_eq(&self.request, cancellation.request_state())
    }

    /// Whether the drop of the tap's request is owned by a transport's
    /// lifecycle that grants it a grace (see
    /// [`Cancellation::grace_handed`]).
    pub(crate) fn grace_handed(&self) -> bool {
        self.request.cancel.grace_handed()
            || self.with_config(|c| {
                c.request
                    .as_ref()
                    .and_then(|r| r.also.as_ref())
                    .is_some_and(Cancellation::grace_handed)
            })
    }

    /// Fires the cancellation(s) of the tap's request with `reason`.
    pub(crate) fn cancel(&self, reason: &CancelReason) {
        let also = self.with_config(|c| c.request.as_ref().and_then(|r| r.also.clone()));
        self.request.cancel.cancel(reason.clone());
        if let Some(c) = also {
            c.cancel(reason.clone());
        }
    }

    /// The id and method of the tap's request, for log events.
    pub(crate) fn label(&self) -> (Option<&RequestId>, Option<&Method>) {
        (self.request.request_id(), self.request.method())
    }
}

impl fmt::Debug for ProgressTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgressTap")
            .field("token", &self.token())
            .field("last", &self.last())
            .finish()
    }
}

#[cfg(test)]
mod tests;
