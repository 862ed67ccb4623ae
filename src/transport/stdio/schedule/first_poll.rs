//! The first poll of a request on the reader, and what it teaches about
//! the handlers' cost.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::{BACKLOG, BACK_OFF, SHORT_FIRST_POLL, SLOW_FIRST_POLL};

/// What the reader knows of its handlers' cost, shared with the writer.
///
/// * Whether the reader polls a new request once itself before spawning
///   it ([`first_poll`](Self::first_poll)). A handler that computes for
///   long before its first `.await` would hold up the reader (and keep the
///   other workers idle): after a first poll longer than
///   [`SLOW_FIRST_POLL`], the next [`BACK_OFF`] requests are spawned at
///   once, to run in parallel.
/// * Whether answers are coming one after another
///   ([`backlogged`](Self::backlogged)), so that the writer lets a few
///   share a flush.
pub(crate) struct HandlerLoad {
    /// The user's switch: without it every request is spawned unpolled.
    on_reader: bool,
    /// Requests still to spawn without a first poll here.
    skip: AtomicU32,
    /// The last first poll longer than [`SLOW_FIRST_POLL`], in µs.
    slow_poll_us: AtomicU32,
    /// Spawned requests not yet ended.
    running: AtomicUsize,
}

/// Counts a spawned request as running until dropped.
pub(crate) struct Running(Arc<HandlerLoad>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

impl HandlerLoad {
    /// `first_poll_on_reader`: see
    /// [`StdioServer::first_poll_on_reader`](crate::transport::stdio::StdioServer::first_poll_on_reader).
    pub(crate) fn new(first_poll_on_reader: bool) -> Self {
        Self {
            on_reader: first_poll_on_reader,
            skip: AtomicU32::new(0),
            slow_poll_us: AtomicU32::new(0),
            running: AtomicUsize::new(0),
        }
    }

    /// Polls a new request once here, on the reader, unless that is off or
    /// backing off: its output if it is ready, `None` if it must be
    /// spawned. Most requests are ready at their first poll: finishing them
    /// here spares a task and two thread hand-offs (reader → task →
    /// writer). The waker is a no-op: a request still pending is spawned,
    /// and its task polls it again at once.
    pub(crate) fn first_poll<F: Future + ?Sized>(&self, call: Pin<&mut F>) -> Option<F::Output> {
        if !self.inline_allowed() {
            return None;
        }
        let started = Instant::now();
        let first = call.poll(&mut Context::from_waker(Waker::noop()));
        self.first_poll_took(started.elapsed());
        match first {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    fn inline_allowed(&self) -> bool {
        if !self.on_reader {
            return false;
        }
        let skip = self.skip.load(Ordering::Relaxed);
        if skip == 0 {
            return true;
        }
        self.skip.store(skip - 1, Ordering::Relaxed);
        false
    }

    fn first_poll_took(&self, first_poll: Duration) {
        if first_poll > SLOW_FIRST_POLL {
            self.skip.store(BACK_OFF, Ordering::Relaxed);
            let us = u32::try_from(first_poll.as_micros()).unwrap_or(u32::MAX);
            self.slow_poll_us.store(us, Ordering::Relaxed);
        }
    }

    /// Counts a request spawned now as running until the guard is dropped.
    pub(crate) fn spawned(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::Relaxed);
        Running(self.clone())
    }

    /// Whether handlers were seen to compute briefly (a first poll
    /// between [`SLOW_FIRST_POLL`] and [`SHORT_FIRST_POLL`], the last slow
    /// one among the last [`BACK_OFF`] requests) and at least [`BACKLOG`]
    /// spawned requests run: then answers come one after another, a short
    /// run apart, and the writer holds one for the next few (see
    /// [`hold_for_more`](super::hold_for_more)). Never, with the first poll
    /// on the reader off: nothing is known of the handlers' cost.
    pub(crate) fn backlogged(&self) -> bool {
        let short_us = SHORT_FIRST_POLL.as_micros() as u32;
        self.skip.load(Ordering::Relaxed) > 0
            && self.slow_poll_us.load(Ordering::Relaxed) <= short_us
            && self.running.load(Ordering::Relaxed) >= BACKLOG
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_first_poll_spawns_the_next_requests_at_once() {
        let load = HandlerLoad::new(true);
        assert!(load.inline_allowed());
        load.first_poll_took(SLOW_FIRST_POLL / 2);
        assert!(load.inline_allowed());
        load.first_poll_took(SLOW_FIRST_POLL * 2);
        for i in 0..BACK_OFF {
            assert!(!load.inline_allowed(), "request {i} after the slow one");
        }
        assert!(load.inline_allowed(), "polled in the reader again");
    }

    #[test]
    fn backlogged_only_while_handlers_compute_briefly_and_enough_run() {
        let load = Arc::new(HandlerLoad::new(true));
        let mut running: Vec<_> = (0..BACKLOG).map(|_| load.spawned()).collect();
        assert!(!load.backlogged(), "handlers not seen to compute");
        load.first_poll_took(SLOW_FIRST_POLL * 2);
        assert!(load.backlogged());
        running.pop();
        assert!(!load.backlogged(), "too few running");
        running.push(load.spawned());
        assert!(load.backlogged());
        load.first_poll_took(SHORT_FIRST_POLL * 2);
        assert!(!load.backlogged(), "handlers that compute long");
        load.first_poll_took(SHORT_FIRST_POLL);
        assert!(load.backlogged());
        for _ in 0..BACK_OFF {
            load.inline_allowed();
        }
        assert!(
            !load.backlogged(),
            "no slow first poll among the last requests"
        );
    }

    #[test]
    fn with_the_first_poll_on_the_reader_off_no_request_is_polled_here() {
        let load = HandlerLoad::new(false);
        let polled = std::cell::Cell::new(false);
        let mut call = std::pin::pin!(std::future::poll_fn(|_| {
            polled.set(true);
            Poll::Ready(())
        }));
        assert_eq!(load.first_poll(call.as_mut()), None);
        assert!(!polled.get(), "left to its own task");
        let on = HandlerLoad::new(true);
        assert_eq!(on.first_poll(call.as_mut()), Some(()), "on: ready here");
    }
}
