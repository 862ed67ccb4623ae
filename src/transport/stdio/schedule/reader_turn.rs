//! The reader giving the writer its turn while it reads on.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::HOLD_MAX;
use crate::notify::outbox::Outgoing;

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
pub(crate) struct ReaderTurn {
    /// When the reader first saw something waiting in the queue.
    since: Option<Instant>,
}

impl ReaderTurn {
    /// Whether the reader, having handled a line, must give way: something
    /// has waited in `queue` for [`HOLD_MAX`] since it first saw it there.
    /// One atomic load when the queue is empty, a clock read otherwise.
    #[inline]
    pub(crate) fn due(&mut self, queue: &mpsc::Sender<Outgoing>) -> bool {
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
pub(crate) async fn give_way() {
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
