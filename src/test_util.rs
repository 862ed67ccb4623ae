//! Helpers for testing your own handlers and stacks (feature `test-util`).
//!
//! * [`DropProbe`]: a guard you move into a future; the probe tells whether
//!   and when (on tokio's clock, so paused time works) it was dropped, and
//!   whether it was dropped before being marked finished.
//! * [`mock_stack`]: a layer stack over a [`tower_test::mock`] service, for
//!   driving a stack under `tokio::time::pause()`.
//! * [`settle`]: lets spawned tasks and woken futures run, without sleeping.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Service, ServiceExt};
//! use tower_mcp_cancel::{test_util::{mock_stack, DropProbe}, McpRequest, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let (mut svc, mut handle) = mock_stack::<serde_json::Value, _>(TimeoutLayer::new(Duration::from_secs(1)));
//! let (probe, guard) = DropProbe::new();
//! let call = tokio::spawn(async move {
//!     let _guard = guard; // dropped when the call's future is
//!     svc.ready().await.unwrap().call(McpRequest::new(1, "ping")).await
//! });
//! let (_req, _respond) = handle.next_request().await.unwrap();
//! tokio::time::advance(Duration::from_secs(2)).await;
//! assert!(call.await.unwrap().is_err());
//! assert!(probe.is_dropped());
//! # }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tower::{Layer, ServiceBuilder};
use tower_test::mock;

use crate::McpRequest;

/// Observes a [`DropGuard`]: whether and when it was dropped.
#[derive(Clone, Debug)]
pub struct DropProbe {
    inner: Arc<ProbeInner>,
}

#[derive(Debug)]
struct ProbeInner {
    dropped_at: Mutex<Option<Instant>>,
    finished: AtomicBool,
    dropped_unfinished: AtomicBool,
}

/// Records its drop in its [`DropProbe`]. Move it into the future under test.
#[derive(Debug)]
pub struct DropGuard {
    inner: Arc<ProbeInner>,
}

impl DropProbe {
    /// A probe and the guard it watches.
    pub fn new() -> (DropProbe, DropGuard) {
        let inner = Arc::new(ProbeInner {
            dropped_at: Mutex::new(None),
            finished: AtomicBool::new(false),
            dropped_unfinished: AtomicBool::new(false),
        });
        (
            DropProbe {
                inner: inner.clone(),
            },
            DropGuard { inner },
        )
    }

    /// Whether the guard was dropped.
    pub fn is_dropped(&self) -> bool {
        self.inner.dropped_at.lock().unwrap().is_some()
    }

    /// When the guard was dropped (tokio's clock).
    pub fn dropped_at(&self) -> Option<Instant> {
        *self.inner.dropped_at.lock().unwrap()
    }

    /// Whether the guard was dropped before [`DropGuard::finish`]: the
    /// future holding it was cancelled rather than run to its end.
    pub fn was_cancelled(&self) -> bool {
        self.inner.dropped_unfinished.load(Ordering::SeqCst)
    }

    /// Whether [`DropGuard::finish`] was called.
    pub fn is_finished(&self) -> bool {
        self.inner.finished.load(Ordering::SeqCst)
    }
}

impl DropGuard {
    /// Marks the work as finished (call it at the end of the future).
    pub fn finish(&self) {
        self.inner.finished.store(true, Ordering::SeqCst);
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.inner.finished.load(Ordering::SeqCst) {
            self.inner.dropped_unfinished.store(true, Ordering::SeqCst);
        }
        *self
            .inner
            .dropped_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// The mocked inner service of [`mock_stack`], boxed so any layer stack fits.
pub type MockService<T> = mock::Mock<McpRequest, T>;

/// `layer` over a [`tower_test::mock`] service answering with `T`; the handle
/// receives each request and answers it (or not).
pub fn mock_stack<T, L>(layer: L) -> (L::Service, mock::Handle<McpRequest, T>)
where
    L: Layer<MockService<T>>,
{
    let (service, handle) = mock::pair::<McpRequest, T>();
    (ServiceBuilder::new().layer(layer).service(service), handle)
}

/// Yields to the scheduler until spawned tasks and woken futures have run
/// (a bounded number of rounds), without advancing time.
pub async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}
