//! The primitives the per-request state is built from: std's (and
//! futures') normally, loom's under `--cfg tower_mcp_cancel_loom`, so that
//! the loom model in `cancellation` checks the real file's orderings and
//! not copies of them.

#[cfg(not(all(test, tower_mcp_cancel_loom)))]
pub(super) use futures_util::task::AtomicWaker;
#[cfg(not(all(test, tower_mcp_cancel_loom)))]
pub(super) use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
#[cfg(not(all(test, tower_mcp_cancel_loom)))]
pub(super) use std::sync::{Arc, OnceLock};

#[cfg(all(test, tower_mcp_cancel_loom))]
pub(super) use self::model::{AtomicWaker, OnceLock};
#[cfg(all(test, tower_mcp_cancel_loom))]
pub(super) use loom::sync::atomic::{AtomicU32, AtomicU8, Ordering};
#[cfg(all(test, tower_mcp_cancel_loom))]
pub(super) use loom::sync::Arc;

#[cfg(all(test, tower_mcp_cancel_loom))]
mod model {
    use std::task::Waker;

    /// `std::sync::OnceLock` as loom sees it: a cell behind a loom mutex.
    /// It models what std documents and `cancellation` relies on: `set` and
    /// `get_or_init` are linearizable, and when `set` returns (won or
    /// lost) the cell holds a value. Values are leaked (`&'static`), which
    /// gives `get` a plain reference without `unsafe`; tests only.
    pub(in crate::state) struct OnceLock<T: 'static> {
        slot: loom::sync::Mutex<Option<&'static T>>,
    }

    impl<T> OnceLock<T> {
        pub(in crate::state) fn new() -> Self {
            Self {
                slot: loom::sync::Mutex::new(None),
            }
        }

        pub(in crate::state) fn get(&self) -> Option<&T> {
            *self.slot.lock().unwrap()
        }

        pub(in crate::state) fn get_or_init(&self, f: impl FnOnce() -> T) -> &T {
            let mut slot = self.slot.lock().unwrap();
            slot.get_or_insert_with(|| Box::leak(Box::new(f())))
        }

        /// Blocks until the cell holds a value (loom: yields until then).
        pub(in crate::state) fn wait(&self) -> &T {
            loop {
                if let Some(v) = *self.slot.lock().unwrap() {
                    return v;
                }
                loom::thread::yield_now();
            }
        }

        pub(in crate::state) fn set(&self, value: T) -> Result<(), T> {
            let mut slot = self.slot.lock().unwrap();
            match *slot {
                Some(_) => Err(value),
                None => {
                    *slot = Some(Box::leak(Box::new(value)));
                    Ok(())
                }
            }
        }
    }

    /// `futures`' `AtomicWaker` with its signature, on loom's mock.
    pub(in crate::state) struct AtomicWaker(loom::future::AtomicWaker);

    impl AtomicWaker {
        pub(in crate::state) fn new() -> Self {
            Self(loom::future::AtomicWaker::new())
        }

        pub(in crate::state) fn register(&self, waker: &Waker) {
            self.0.register_by_ref(waker)
        }

        pub(in crate::state) fn wake(&self) {
            self.0.wake()
        }
    }
}
