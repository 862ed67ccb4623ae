//! [`DropProbe`] and its [`DropGuard`]s: whether and when a future was
//! dropped, and whether it ran to its end first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// Observes [`DropGuard`]s: whether and when one was dropped.
///
/// Clone it into a `service_fn` and arm a guard per call with
/// [`DropProbe::guard`]; [`DropProbe::new`] gives a probe and its first
/// guard at once.
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
}

/// Records its drop in its [`DropProbe`]. Move it into the future under test.
#[derive(Debug)]
pub struct DropGuard {
    inner: Arc<ProbeInner>,
    finished: AtomicBool,
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
            inner: self.inner.clone(),
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
    /// Marks the work as finished (call it at the end of the future).
    pub fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        self.inner.finished.store(true, Ordering::SeqCst);
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::SeqCst) {
            self.inner.dropped_unfinished.store(true, Ordering::SeqCst);
        }
        *self
            .inner
            .dropped_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}
