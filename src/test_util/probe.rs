//! [`DropProbe`] and the [`DropGuard`]s (of a probe or of a
//! [`Recorder`](super::Recorder)): whether and when a future was dropped,
//! and whether it ran to its end first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::event::Event;
use super::WAIT_BOUND;
use crate::jsonrpc::RequestId;

/// Observes [`DropGuard`]s: whether and when one was dropped.
///
/// Clone it into a `service_fn` (or any handler: a guard is a plain value
/// to move into a future) and arm a guard per call with
/// [`DropProbe::guard`]; [`DropProbe::new`] gives a probe and its first
/// guard at once. [`DropProbe::dropped`] waits for a drop.
///
/// ```
/// use tower::{service_fn, BoxError, ServiceExt};
/// use tower_mcp_cancel::{test_util::DropProbe, McpRequest};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let probe = DropProbe::default();
/// let guards = probe.clone();
/// let svc = service_fn(move |_req: McpRequest| {
///     let guard = guards.guard(); // one per call
///     async move {
///         guard.finish();
///         Ok::<_, BoxError>(serde_json::json!({}))
///     }
/// });
/// svc.oneshot(McpRequest::new(1, "ping")).await.unwrap();
/// assert!(probe.is_dropped() && probe.is_finished() && !probe.was_cancelled());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct DropProbe {
    inner: Arc<ProbeInner>,
}

#[derive(Debug, Default)]
struct ProbeInner {
    dropped_at: Mutex<Option<Instant>>,
    finished: AtomicBool,
    dropped_unfinished: AtomicBool,
    /// Wakes [`DropProbe::dropped`] at each drop.
    drop_seen: Notify,
}

/// Move it into the future under test: its drop is what its
/// [`DropProbe`] records ([`DropProbe::guard`]), or what its
/// [`Recorder`](super::Recorder) reports ([`Recorder::start`](super::Recorder::start):
/// [`Event::Dropped`] when dropped before [`finish`](Self::finish),
/// [`Event::Done`] after).
#[derive(Debug)]
pub struct DropGuard {
    watcher: Watcher,
    finished: AtomicBool,
}

/// Who learns of a guard's drop.
#[derive(Debug)]
enum Watcher {
    Probe(Arc<ProbeInner>),
    Recorder(mpsc::UnboundedSender<Event>, RequestId),
}

impl DropProbe {
    /// A probe and the guard it watches.
    pub fn new() -> (DropProbe, DropGuard) {
        let probe = DropProbe::default();
        let guard = probe.guard();
        (probe, guard)
    }

    /// A new guard reporting to this probe; the probe keeps the most recent
    /// drop, and [`was_cancelled`](Self::was_cancelled) holds once any of
    /// its guards was dropped unfinished.
    pub fn guard(&self) -> DropGuard {
        DropGuard {
            watcher: Watcher::Probe(self.inner.clone()),
            finished: AtomicBool::new(false),
        }
    }

    /// Whether a guard was dropped.
    pub fn is_dropped(&self) -> bool {
        self.dropped_at().is_some()
    }

    /// When a guard was last dropped (tokio's clock).
    pub fn dropped_at(&self) -> Option<Instant> {
        *self
            .inner
            .dropped_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until a guard of this probe has been dropped (at once if one
    /// was) and returns when it was, on tokio's clock: what a test awaits
    /// instead of polling [`is_dropped`](Self::is_dropped) in a loop.
    ///
    /// # Panics
    ///
    /// After an hour on tokio's clock without a drop: a guard against a
    /// hang, as [`Events::next`](super::Events::next) has (under a paused
    /// clock the hour passes at once when nothing else can run).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_mcp_cancel::test_util::DropProbe;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let (probe, guard) = DropProbe::new();
    /// // Any handler: here a plain task that a timeout drops.
    /// tokio::spawn(tokio::time::timeout(Duration::from_secs(2), async move {
    ///     let _guard = guard;
    ///     std::future::pending::<()>().await
    /// }));
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(probe.dropped().await - start, Duration::from_secs(2));
    /// assert!(probe.was_cancelled());
    /// # }
    /// ```
    pub async fn dropped(&self) -> Instant {
        let wait = async {
            loop {
                // Registered before the check, so that a drop in between
                // still wakes it.
                let mut seen = std::pin::pin!(self.inner.drop_seen.notified());
                seen.as_mut().enable();
                if let Some(at) = self.dropped_at() {
                    return at;
                }
                seen.await;
            }
        };
        tokio::time::timeout(WAIT_BOUND, wait)
            .await
            .expect("timed out waiting for a guard of the probe to be dropped")
    }

    /// Whether a guard was dropped before [`DropGuard::finish`]: the future
    /// holding it was cancelled rather than run to its end.
    pub fn was_cancelled(&self) -> bool {
        self.inner.dropped_unfinished.load(Ordering::SeqCst)
    }

    /// Whether [`DropGuard::finish`] was called on a guard.
    pub fn is_finished(&self) -> bool {
        self.inner.finished.load(Ordering::SeqCst)
    }
}

impl DropGuard {
    /// A guard reporting to a recorder's channel.
    pub(super) fn recording(tx: mpsc::UnboundedSender<Event>, id: RequestId) -> Self {
        DropGuard {
            watcher: Watcher::Recorder(tx, id),
            finished: AtomicBool::new(false),
        }
    }

    /// Marks the work as finished (call it at the end of the future): its
    /// drop is then a completion, not a cancellation.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        if let Watcher::Probe(inner) = &self.watcher {
            inner.finished.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        let finished = self.finished.load(Ordering::SeqCst);
        match &self.watcher {
            Watcher::Probe(inner) => {
                if !finished {
                    inner.dropped_unfinished.store(true, Ordering::SeqCst);
                }
                *inner.dropped_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                inner.drop_seen.notify_waiters();
            }
            Watcher::Recorder(tx, id) => {
                let id = id.clone();
                // Nobody listening is not an error.
                let _ = tx.send(if finished {
                    Event::Done(id)
                } else {
                    Event::Dropped(id)
                });
            }
        }
    }
}
