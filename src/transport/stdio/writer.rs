//! The write loop: one task per connection drains the bounded outgoing
//! queue, so that a peer that stops reading slows senders down instead of
//! growing memory.

use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::framing::{write_line, write_lines};
use crate::notify::outbox::Outgoing;

/// Drains the queue into `writer`, one line per message, flushing when the
/// queue is empty; after `close` fires, writes what is queued and ends.
/// Messages of a request cancelled after they were queued are dropped.
///
/// When `backlogged` says answers are coming one after another (handlers
/// that compute, many requests running), the writer yields once to the
/// scheduler before a flush, so that answers finishing meanwhile share it.
/// Flushing at once costs the peer a wake-up per answer; on a machine the
/// peer shares, that time comes out of the handlers. The yield holds an
/// answer back only while the worker has other tasks to run (tokio wakes
/// a yielded task when its worker runs out of work, or every
/// `event_interval` polls), so an idle server still answers at once. The
/// message that found the queue empty is held unwritten during the yield,
/// so that it is still dropped if its request is cancelled meanwhile.
pub(super) async fn write_loop<W, B>(
    writer: W,
    mut rx: mpsc::Receiver<Outgoing>,
    close: CancellationToken,
    backlogged: B,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
    B: Fn() -> bool,
{
    let mut w = BufWriter::new(writer);
    // Whether the writer yielded since its last flush: once per flush.
    let mut yielded = false;
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
        if rx.is_empty() && !yielded && backlogged() {
            yielded = true;
            tokio::task::yield_now().await;
        }
        write_one(&mut w, msg).await?;
        if !rx.is_empty() {
            continue;
        }
        yielded = false;
        w.flush().await?;
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
    use std::sync::atomic::{AtomicBool, Ordering};
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
        backlogged: Arc<AtomicBool>,
    }

    fn start(backlogged: bool) -> Peer {
        let flushes = Flushes::default();
        let (tx, rx) = mpsc::channel(64);
        let backlog = Arc::new(AtomicBool::new(backlogged));
        let b = backlog.clone();
        let close = CancellationToken::new();
        tokio::spawn(write_loop(flushes.clone(), rx, close, move || {
            b.load(Ordering::Relaxed)
        }));
        Peer {
            tx,
            flushes,
            backlogged: backlog,
        }
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

    #[tokio::test]
    async fn with_a_backlog_answers_finishing_during_the_yield_share_a_flush() {
        let peer = start(true);
        peer.answer("a").await;
        assert!(peer.flushes().is_empty(), "held while other tasks run");
        peer.answer("b").await;
        assert_eq!(peer.flushes(), ["a b"], "one yield a flush: no second hold");
    }

    #[tokio::test]
    async fn a_message_held_during_the_yield_is_dropped_if_its_request_is_cancelled() {
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

    #[tokio::test]
    async fn with_a_backlog_an_answer_alone_goes_out_once_the_tasks_have_run() {
        let peer = start(true);
        peer.answer("a").await;
        settle_rounds(4).await;
        assert_eq!(peer.flushes(), ["a"], "one yield, not a wait for more");
        // One yield per flush: the next answer is held again.
        peer.answer("b").await;
        assert_eq!(peer.flushes(), ["a"]);
        peer.backlogged.store(false, Ordering::Relaxed);
        settle_rounds(4).await;
        assert_eq!(peer.flushes(), ["a", "b"]);
    }
}
