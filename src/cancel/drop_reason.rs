//! The drop-reason scope: how a reason travels with a drop.
//!
//! A layer that gives up on its inner future drops it inside
//! [`with_drop_reason`] / [`drop_with_reason`]; a client transport below,
//! whose response future is being dropped, reads [`current_drop_reason`] to
//! tell the peer why.

use std::cell::RefCell;

use crate::error::CancelReason;

thread_local! {
    static DROP_REASON: RefCell<Option<CancelReason>> = const { RefCell::new(None) };
}

/// Drops `value` with `reason` visible to [`current_drop_reason`] for the
/// duration of the drop.
///
/// This is how a reason travels with a drop: a layer that gives up on its
/// inner future (a timer fired) drops it inside this scope, and a client
/// transport below, whose response future is being dropped, reads the reason
/// to put in `notifications/cancelled`. The scope is the synchronous drop on
/// this thread only; nothing outlives it.
pub fn drop_with_reason<T>(reason: &CancelReason, value: T) {
    with_drop_reason(reason, move || drop(value));
}

/// Runs `f` with `reason` visible to [`current_drop_reason`].
pub fn with_drop_reason<R>(reason: &CancelReason, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<CancelReason>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            let _ = DROP_REASON.try_with(|r| *r.borrow_mut() = prev);
        }
    }
    let prev = DROP_REASON
        .try_with(|r| r.borrow_mut().replace(reason.clone()))
        .ok()
        .flatten();
    let _restore = Restore(prev);
    f()
}

/// The reason of the drop in progress on this thread, if a layer set one with
/// [`drop_with_reason`]. `None` means the future was dropped by its caller.
pub fn current_drop_reason() -> Option<CancelReason> {
    DROP_REASON.try_with(|r| r.borrow().clone()).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reason_is_scoped_and_nests() {
        struct Probe(std::sync::Arc<std::sync::Mutex<Vec<Option<CancelReason>>>>);
        impl Drop for Probe {
            fn drop(&mut self) {
                self.0.lock().unwrap().push(current_drop_reason());
            }
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        drop(Probe(seen.clone()));
        drop_with_reason(&CancelReason::Shutdown, Probe(seen.clone()));
        with_drop_reason(&CancelReason::TransportClosed, || {
            drop_with_reason(&CancelReason::CallerDropped, Probe(seen.clone()));
            drop(Probe(seen.clone()));
        });
        drop(Probe(seen.clone()));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                None,
                Some(CancelReason::Shutdown),
                Some(CancelReason::CallerDropped),
                Some(CancelReason::TransportClosed),
                None
            ]
        );
    }
}
