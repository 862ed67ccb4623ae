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
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::Receiver<Outgoing>,
    close: CancellationToken,
) -> io::Result<()> {
    let mut w = BufWriter::new(writer);
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
        write_one(&mut w, msg).await?;
        if rx.is_empty() {
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
