//! The writer's hold: an answer kept back, for at most [`HOLD_MAX`], so
//! that the next few share its write.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::{HOLD_MAX, HOLD_MESSAGES};
use crate::notify::outbox::Outgoing;

/// The hold in progress, shared by the writer with the connection's other
/// tasks (the reader, the request tasks), so that whichever of them runs
/// first once it is due ends it.
///
/// A timer alone would not bound the hold: tokio fires timers (and runs
/// the wakes it defers, such as `yield_now`'s) only when a worker has no
/// ready task left or at its periodic maintenance, every 61 polls, so with
/// handlers that keep computing a held answer would wait up to 61 of their
/// polls. The tasks that keep a stdio server's workers busy are the
/// connection's own: each checks after its polls ([`check`](Self::check)),
/// and the first to find the hold due wakes the writer as an answer does.
/// (Tasks outside the connection do not check: should they keep the worker
/// busy, the hold ends when a timer would.)
#[derive(Debug)]
pub(crate) struct Hold {
    epoch: Instant,
    /// When the hold in progress is due, in ns after `epoch`; 0: none.
    due: AtomicU64,
    over: Notify,
    /// Set by the reader when it gives the writer its turn: what waits in
    /// the queue has waited [`HOLD_MAX`] already.
    reader_gave_way: AtomicBool,
}

impl Hold {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            due: AtomicU64::new(0),
            over: Notify::new(),
            reader_gave_way: AtomicBool::new(false),
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        let ns = t.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX).max(1)
    }

    /// Ends the hold in progress if it is due. Called by the connection's
    /// tasks after their polls: one atomic load when no hold is in
    /// progress, a clock read during one.
    #[inline]
    pub(crate) fn check(&self) {
        let due = self.due.load(Ordering::Acquire);
        if due != 0 && self.nanos(Instant::now()) >= due && self.due.swap(0, Ordering::AcqRel) != 0
        {
            self.over.notify_waiters();
        }
    }

    /// Awaits `call`, [checking](Self::check) the hold after each of its
    /// polls: a request task's part, so that handlers that keep computing
    /// do not keep a held answer waiting.
    pub(crate) async fn checked<F: Future>(&self, call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        std::future::poll_fn(|cx| {
            let polled = call.as_mut().poll(cx);
            self.check();
            polled
        })
        .await
    }

    /// Notes that the reader gives the writer its turn (see
    /// [`ReaderTurn`](super::ReaderTurn)): what the writer finds has waited
    /// [`HOLD_MAX`] already, so it is written without a hold.
    pub(crate) fn reader_gives_way(&self) {
        self.reader_gave_way.store(true, Ordering::Release);
    }

    /// Whether the reader gave the writer its turn since the last call. A
    /// stale note only spares a hold, never adds one.
    pub(crate) fn take_reader_turn(&self) -> bool {
        self.reader_gave_way.load(Ordering::Acquire)
            && self.reader_gave_way.swap(false, Ordering::AcqRel)
    }
}

/// Adds to `held` what arrives until it has [`HOLD_MESSAGES`], or until
/// [`HOLD_MAX`] has passed since the hold began: the writer checks on each
/// arrival, and the connection's other tasks after their polls
/// ([`Hold::check`]). It also ends, sooner, when the task, yielded, is
/// polled again (tokio runs that wake once the worker has no other ready
/// task: no answer is coming from it now); that only ever shortens it.
/// Returns whether the queue closed.
pub(crate) async fn hold_for_more(
    rx: &mut mpsc::Receiver<Outgoing>,
    held: &mut Vec<Outgoing>,
    hold: &Hold,
) -> bool {
    let due = Instant::now() + HOLD_MAX;
    let over = hold.over.notified();
    tokio::pin!(over);
    // Registered before the hold is published, so no check can miss it.
    over.as_mut().enable();
    hold.due.store(hold.nanos(due), Ordering::Release);
    let mut closed = false;
    while held.len() < HOLD_MESSAGES && Instant::now() < due {
        tokio::select! {
            biased;
            m = rx.recv() => match m {
                Some(m) => held.push(m),
                None => {
                    closed = true;
                    break;
                }
            },
            () = &mut over => break,
            () = tokio::task::yield_now() => break,
        }
    }
    hold.due.store(0, Ordering::Release);
    closed
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_due_hold_is_ended_by_the_first_check() {
        let hold = Hold::new();
        let over = hold.over.notified();
        tokio::pin!(over);
        over.as_mut().enable();
        let due = Instant::now() + HOLD_MAX;
        hold.due.store(hold.nanos(due), Ordering::Release);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        hold.check();
        assert!(over.as_mut().poll(&mut cx).is_pending(), "not due yet");
        tokio::time::advance(HOLD_MAX).await;
        hold.check();
        assert!(over.as_mut().poll(&mut cx).is_ready(), "due: ended");
        assert_eq!(
            hold.due.load(Ordering::Acquire),
            0,
            "and no longer in progress"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_arrival_after_the_bound_ends_the_hold() {
        let hold = Hold::new();
        let (tx, mut rx) = mpsc::channel(8);
        let mut held = vec![Outgoing::unscoped(b"a".to_vec())];
        let mut cx = Context::from_waker(std::task::Waker::noop());
        {
            let holding = hold_for_more(&mut rx, &mut held, &hold);
            tokio::pin!(holding);
            assert!(holding.as_mut().poll(&mut cx).is_pending());
            tx.send(Outgoing::unscoped(b"b".to_vec())).await.unwrap();
            assert!(
                holding.as_mut().poll(&mut cx).is_pending(),
                "within the bound: holds on"
            );
            tokio::time::advance(HOLD_MAX).await;
            tx.send(Outgoing::unscoped(b"c".to_vec())).await.unwrap();
            assert_eq!(
                holding.as_mut().poll(&mut cx),
                Poll::Ready(false),
                "past it: ends"
            );
        }
        assert_eq!(held.len(), 3);
        assert_eq!(hold.due.load(Ordering::Acquire), 0);
    }
}
