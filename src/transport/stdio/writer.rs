//! The write loop: one task per connection drains the bounded outgoing
//! queue, so that a peer that stops reading slows senders down instead of
//! growing memory.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::framing::{write_line, write_lines};
use crate::notify::outbox::Outgoing;

/// Drains the queue into `writer`, one line per message, flushing when the
/// queue is empty; after `close` fires, writes what is queued and ends.
/// Messages of a request cancelled after they were queued are dropped.
///
/// When the queue runs dry while `backlogged` says answers are coming one
/// after another (handlers that compute briefly, several running), the
/// writer holds what it has for more ([`hold_for_more`]): until
/// [`HOLD_MESSAGES`] messages are together or [`HOLD_MAX`] has passed,
/// whichever comes first; then it writes and flushes them together.
/// Flushing each answer alone costs the peer a wake-up per answer, and on a
/// machine the peer shares that time comes out of the handlers. At most one
/// hold per flush. Held messages are written after the hold, so one whose
/// request is cancelled meanwhile is still dropped.
pub(super) async fn write_loop<W, B>(
    writer: W,
    mut rx: mpsc::Receiver<Outgoing>,
    close: CancellationToken,
    backlogged: B,
    hold: Arc<Hold>,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    B: Fn() -> bool,
{
    let mut w = BufWriter::new(writer);
    let mut held = Vec::new();
    // Whether the messages since the last flush were held once already.
    let mut was_held = false;
    loop {
        let msg = tokio::select! {
            biased;
            m = rx.recv() => m,
            () = close.cancelled() => {
                rx.close();
                while let Ok(m) = rx.try_recv() {
                    write_one(&mut w, m).await?;
                }
                break;
            }
        };
        let Some(msg) = msg else { break };
        let mut closed = false;
        if rx.is_empty() && !was_held && backlogged() && !hold.take_reader_turn() {
            was_held = true;
            held.push(msg);
            closed = hold_for_more(&mut rx, &mut held, &hold).await;
            for m in held.drain(..) {
                write_one(&mut w, m).await?;
            }
        } else {
            write_one(&mut w, msg).await?;
        }
        if closed {
            break;
        }
        if rx.is_empty() {
            was_held = false;
            w.flush().await?;
        }
    }
    w.flush().await?;
    w.shutdown().await
}

/// The most messages one hold gathers.
const HOLD_MESSAGES: usize = 4;

/// The longest the writer holds a finished answer for company: 100 µs, a
/// tenth of the longest first poll for which it holds at all
/// (`HandlerLoad::SHORT`, 1 ms), so that holding costs such a handler's
/// answer at most a tenth of its run. In figure 3's `spin` benchmark (50 µs
/// handlers on two workers) four answers come within it.
pub(super) const HOLD_MAX: Duration = Duration::from_micros(100);

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
pub(super) struct Hold {
    epoch: Instant,
    /// When the hold in progress is due, in ns after `epoch`; 0: none.
    due: AtomicU64,
    over: Notify,
    /// Set by the reader when it gives the writer its turn: what waits in
    /// the queue has waited [`HOLD_MAX`] already.
    reader_gave_way: AtomicBool,
}

impl Hold {
    pub(super) fn new() -> Self {
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
    pub(super) fn check(&self) {
        let due = self.due.load(Ordering::Acquire);
        if due != 0 && self.nanos(Instant::now()) >= due && self.due.swap(0, Ordering::AcqRel) != 0
        {
            self.over.notify_waiters();
        }
    }

    /// Notes that the reader gives the writer its turn (see
    /// [`ReaderTurn`]): what the writer finds has waited [`HOLD_MAX`]
    /// already, so it is written without a hold.
    pub(super) fn reader_gives_way(&self) {
        self.reader_gave_way.store(true, Ordering::Release);
    }

    /// Whether the reader gave the writer its turn since the last call. A
    /// stale note only spares a hold, never adds one.
    fn take_reader_turn(&self) -> bool {
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
async fn hold_for_more(
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

/// When the reader gives the writer its turn while it reads on.
///
/// The reader wakes the writer as it queues answers, but on tokio the
/// writer runs only once the reader's poll ends: on `multi_thread` the
/// woken writer waits in the reader's worker's LIFO slot, which no other
/// worker steals from; on `current_thread` behind the reader. A reader with
/// input to spare ends its poll only when the input runs dry, the queue
/// fills or its cooperative budget is spent: thousands of lines. So after
/// each line it checks the queue ([`due`](Self::due)), and once something
/// has waited there [`HOLD_MAX`] it ends its poll ([`give_way`]).
#[derive(Debug, Default)]
pub(super) struct ReaderTurn {
    /// When the reader first saw something waiting in the queue.
    since: Option<Instant>,
}

impl ReaderTurn {
    /// Whether the reader, having handled a line, must give way: something
    /// has waited in `queue` for [`HOLD_MAX`] since it first saw it there.
    /// One atomic load when the queue is empty, a clock read otherwise.
    #[inline]
    pub(super) fn due(&mut self, queue: &mpsc::Sender<Outgoing>) -> bool {
        if queue.capacity() == queue.max_capacity() {
            self.since = None;
            return false;
        }
        let now = Instant::now();
        match self.since {
            None => {
                self.since = Some(now);
                false
            }
            Some(since) if now.saturating_duration_since(since) >= HOLD_MAX => {
                // Afresh: a writer the peer holds up makes the reader give
                // way once per bound, no more.
                self.since = None;
                true
            }
            Some(_) => false,
        }
    }
}

/// Ends the current poll of its task, woken again at once: the tasks it
/// woke meanwhile (the writer) run first. Not `yield_now`, whose wake tokio
/// defers until the worker has nothing else to run or its maintenance tick.
pub(super) async fn give_way() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

async fn write_one<W: AsyncWrite + Unpin>(w: &mut W, msg: Outgoing) -> io::Result<()> {
    let lines = msg.is_lines();
    match msg.into_live_bytes() {
        Some(bytes) if lines => write_lines(w, &bytes).await,
        Some(bytes) => write_line(w, &bytes).await,
        None => {
            tracing::trace!("message for a cancelled request dropped unsent");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use super::*;
    use crate::notify::outbox::Scope;
    use crate::{CancelReason, Cancellation};

    /// What reached the peer: one entry per flush, the lines it carried.
    #[derive(Clone, Default)]
    struct Flushes {
        pending: Arc<Mutex<Vec<u8>>>,
        done: Arc<Mutex<Vec<String>>>,
    }

    impl AsyncWrite for Flushes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.pending.lock().unwrap().extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            let bytes = std::mem::take(&mut *self.pending.lock().unwrap());
            if !bytes.is_empty() {
                let lines = String::from_utf8(bytes).unwrap();
                self.done
                    .lock()
                    .unwrap()
                    .push(lines.replace('\n', " ").trim_end().to_owned());
            }
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    async fn settle_rounds(rounds: usize) {
        for _ in 0..rounds {
            tokio::task::yield_now().await;
        }
    }

    struct Peer {
        tx: mpsc::Sender<Outgoing>,
        flushes: Flushes,
    }

    fn start(backlogged: bool) -> Peer {
        let flushes = Flushes::default();
        let (tx, rx) = mpsc::channel(64);
        let close = CancellationToken::new();
        let hold = Arc::new(Hold::new());
        tokio::spawn(write_loop(
            flushes.clone(),
            rx,
            close,
            move || backlogged,
            hold,
        ));
        Peer { tx, flushes }
    }

    impl Peer {
        /// Queues `text` and waits until the writer has taken it (alone:
        /// the queue runs dry after it, as when answers come one by one).
        async fn answer(&self, text: &str) {
            let msg = Outgoing::unscoped(text.as_bytes().to_vec());
            self.tx.send(msg).await.unwrap();
            while self.tx.capacity() < self.tx.max_capacity() {
                tokio::task::yield_now().await;
            }
        }

        fn flushes(&self) -> Vec<String> {
            self.flushes.done.lock().unwrap().clone()
        }
    }

    #[tokio::test]
    async fn without_a_backlog_each_answer_is_flushed_at_once() {
        let peer = start(false);
        peer.answer("a").await;
        assert_eq!(peer.flushes(), ["a"], "flushed before the writer gave way");
        peer.answer("b").await;
        assert_eq!(peer.flushes(), ["a", "b"]);
    }

    // The clock is paused in the tests with a hold: it ends by what they
    // do, not by a slow machine's [`HOLD_MAX`].
    #[tokio::test(start_paused = true)]
    async fn with_a_backlog_answers_arriving_during_a_hold_share_a_flush() {
        let peer = start(true);
        for (i, text) in ["a", "b", "c"].into_iter().enumerate() {
            peer.answer(text).await;
            assert!(peer.flushes().is_empty(), "held after {} answers", i + 1);
        }
        // The fourth fills the hold: out at once, all together.
        peer.answer("d").await;
        assert_eq!(peer.flushes(), ["a b c d"]);
        // The next answer starts a hold of its own.
        peer.answer("e").await;
        assert_eq!(peer.flushes(), ["a b c d"]);
        settle_rounds(4).await;
        assert_eq!(peer.flushes(), ["a b c d", "e"]);
    }

    #[tokio::test(start_paused = true)]
    async fn one_hold_per_flush() {
        let peer = start(true);
        peer.answer("a").await;
        // Five more at once: the hold fills at four, and the last two,
        // taken after it, go with them rather than into a second hold.
        for text in ["b", "c", "d", "e", "f"] {
            let msg = Outgoing::unscoped(text.as_bytes().to_vec());
            peer.tx.send(msg).await.unwrap();
        }
        peer.answer("g").await;
        assert_eq!(peer.flushes(), ["a b c d e f g"]);
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_backlog_an_answer_alone_goes_out_once_the_tasks_have_run() {
        let peer = start(true);
        peer.answer("a").await;
        assert!(peer.flushes().is_empty(), "held while other tasks run");
        settle_rounds(4).await;
        assert_eq!(
            peer.flushes(),
            ["a"],
            "not held for company that does not come"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_held_is_dropped_if_its_request_is_cancelled_meanwhile() {
        let peer = start(true);
        let cancellation = Cancellation::new();
        let scope = Scope::new(cancellation.clone());
        let permit = peer.tx.reserve().await.unwrap();
        assert!(scope.send(permit, b"progress".to_vec()));
        while peer.tx.capacity() < peer.tx.max_capacity() {
            tokio::task::yield_now().await;
        }
        cancellation.cancel(CancelReason::ClientDisconnected);
        peer.answer("other").await;
        settle_rounds(4).await;
        assert_eq!(
            peer.flushes(),
            ["other"],
            "nothing of the cancelled request"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_queue_closing_during_a_hold_writes_what_was_held() {
        let Peer { tx, flushes } = start(true);
        tx.send(Outgoing::unscoped(b"a".to_vec())).await.unwrap();
        while tx.capacity() < tx.max_capacity() {
            tokio::task::yield_now().await;
        }
        drop(tx);
        settle_rounds(4).await;
        assert_eq!(*flushes.done.lock().unwrap(), ["a"]);
    }

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
