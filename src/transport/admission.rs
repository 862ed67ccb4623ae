//! The bound on the requests one server runs at once: a place is taken
//! before a request starts and given back when its last holder is dropped.
//! Past the bound a request is refused, never queued, so the bound is a
//! counter and one compare-and-swap, not a semaphore: a semaphore's release
//! takes its waiters' lock, which the server's worker threads then contend
//! for on every request although nobody ever waits.

use sync::{Arc, AtomicUsize, Ordering};

/// At most `max` places taken at once; clones share the count.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    taken: Arc<AtomicUsize>,
    max: usize,
}

/// One place under an [`Admission`]; given back on drop.
#[derive(Debug)]
pub(crate) struct Place(Arc<AtomicUsize>);

impl Admission {
    /// A bound of `max` places (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            taken: Arc::new(AtomicUsize::new(0)),
            max: max.max(1),
        }
    }

    /// The bound.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The places taken now.
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Relaxed)
    }

    /// A place, or `None` when all `max` are taken. The count never exceeds
    /// `max`, not even for an instant: the increment is conditional.
    pub(crate) fn try_take(&self) -> Option<Place> {
        self.taken
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(&self.taken)))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // Release: what the request did happens before the place is seen free.
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// std's atomics normally, loom's in the model below.
mod sync {
    #[cfg(not(all(test, tower_mcp_cancel_loom)))]
    pub(super) use std::sync::atomic::{AtomicUsize, Ordering};
    #[cfg(not(all(test, tower_mcp_cancel_loom)))]
    pub(super) use std::sync::Arc;

    #[cfg(all(test, tower_mcp_cancel_loom))]
    pub(super) use loom::sync::atomic::{AtomicUsize, Ordering};
    #[cfg(all(test, tower_mcp_cancel_loom))]
    pub(super) use loom::sync::Arc;
}

#[cfg(all(test, not(tower_mcp_cancel_loom)))]
mod tests {
    use super::*;

    #[test]
    fn places_up_to_the_bound_then_none_until_one_is_given_back() {
        let bound = Admission::new(2);
        let a = bound.try_take().expect("first place");
        let b = bound
            .clone()
            .try_take()
            .expect("second place, through a clone");
        assert!(
            bound.try_take().is_none(),
            "a third place past a bound of 2"
        );
        assert_eq!(bound.taken(), 2);
        drop(a);
        assert_eq!(bound.taken(), 1);
        let _c = bound.try_take().expect("the place given back");
        assert!(bound.try_take().is_none());
        drop(b);
    }

    #[test]
    fn a_bound_of_zero_is_one_and_the_largest_bound_does_not_overflow() {
        let one = Admission::new(0);
        assert_eq!(one.max(), 1);
        let _p = one.try_take().expect("one place");
        assert!(one.try_take().is_none());
        let huge = Admission::new(usize::MAX);
        let places: Vec<_> = (0..3).map(|_| huge.try_take().expect("place")).collect();
        assert_eq!(huge.taken(), places.len());
    }
}

#[cfg(all(test, tower_mcp_cancel_loom))]
mod loom_model {
    //! Every interleaving of two requests taking places under a bound of
    //! one while a third gives its place back (run by `.ci/run`'s loom step).

    use loom::thread;

    use super::*;

    #[test]
    fn loom_model_admission_never_exceeds_its_bound() {
        loom::model(|| {
            let bound = Admission::new(1);
            let held = bound.try_take().expect("the first place");
            let racers: Vec<_> = (0..2)
                .map(|_| {
                    let bound = bound.clone();
                    thread::spawn(move || {
                        let place = bound.try_take();
                        // Within the bound while this place is held.
                        assert!(bound.taken() <= 1);
                        place.is_some()
                    })
                })
                .collect();
            drop(held);
            let admitted = racers
                .into_iter()
                .map(|r| r.join().unwrap())
                .filter(|a| *a)
                .count();
            // The place given back can go to one racer, and once that
            // racer's place is dropped, to the other.
            assert!(admitted <= 2);
            assert_eq!(bound.taken(), 0, "every place given back");
        });
    }
}
