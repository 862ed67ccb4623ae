//! The write loop: one task per connection drains the bounded outgoing
//! queue, so that a peer that stops reading slows senders down instead of
//! growing memory.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::framing::{write_line, write_lines};
use super::schedule::{hold_for_more, Hold};
use crate::notify::outbox::Outgoing;

/// Drains the queue into `writer`, one line per message, flushing when the
/// queue is empty; after `close` fires, writes what is queued and ends.
/// Messages of a request cancelled after they were queued are dropped.
///
/// When the queue runs dry while `backlogged` says answers are coming one
/// after another (handlers that compute briefly, several running), the
/// writer holds what it has for more ([`hold_for_more`]): until
/// [`HOLD_MESSAGES`](super::schedule::HOLD_MESSAGES) messages are together
/// or [`HOLD_MAX`](super::schedule::HOLD_MAX) has passed, whichever comes
/// first; then it writes and flushes them together.
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
    // do, not by a slow machine's `HOLD_MAX`.
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
}
