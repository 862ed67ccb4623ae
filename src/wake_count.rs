//! A waker that counts its wakes, for the crate's unit tests of futures
//! that must (or must not) wake their task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// Counts the wakes of the wakers made from it.
#[derive(Default)]
pub(crate) struct WakeCount(AtomicUsize);

impl WakeCount {
    /// A counter and a waker that adds to it.
    pub(crate) fn new() -> (Arc<Self>, Waker) {
        let count = Arc::new(Self::default());
        let waker = Waker::from(count.clone());
        (count, waker)
    }

    /// The wakes so far.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
