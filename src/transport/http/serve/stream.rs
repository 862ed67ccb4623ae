//! The accepted stream: its first bytes read within the header timer (they
//! tell HTTP/2 from HTTP/1), then handed to hyper with those bytes first
//! and a timer on writes the peer leaves pending.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::Activity;

/// The HTTP/2 client preface (RFC 9113, 3.4).
pub(super) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads a new connection's first bytes, up to what tells HTTP/2 (its
/// whole 24-byte preface) from HTTP/1 (anything else), within `timeout`.
/// `None`: the peer closed it first; an error of kind `TimedOut`: it was
/// too slow.
pub(super) async fn first_bytes(
    stream: &mut TcpStream,
    timeout: Option<Duration>,
) -> io::Result<Option<Bytes>> {
    let read = async {
        let mut buf = Vec::with_capacity(H2_PREFACE.len());
        while buf.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&buf) {
            let n = (&mut *stream)
                .take((H2_PREFACE.len() - buf.len()) as u64)
                .read_buf(&mut buf)
                .await?;
            if n == 0 {
                return Ok(None);
            }
        }
        Ok(Some(Bytes::from(buf)))
    };
    match timeout {
        None => read.await,
        Some(t) => tokio::time::timeout(t, read).await.unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request head within the header read timeout",
            ))
        }),
    }
}

/// An accepted stream as hyper sees it: its first bytes, read already, are
/// read again first; a write the peer leaves pending for the write timeout
/// fails; HTTP/2 writes are coalesced.
///
/// Coalescing (HTTP/2): the first write after a flush is put off by one
/// yield while other requests of the connection are in flight, so that the
/// responses that finish meanwhile leave in the same system call instead of
/// one call each (each call also wakes the peer). The bound: one pass of
/// the scheduler per flush, and none when no other request is in flight
/// (a lone request's response is written at once).
pub(super) struct Io {
    prefix: Bytes,
    stream: TcpStream,
    write_timeout: Option<Duration>,
    /// Running while a write is pending (kept to be reset, not reallocated).
    stall: Option<(Pin<Box<Sleep>>, bool)>,
    /// HTTP/2: the connection's requests, whose count decides a yield.
    coalesce: Option<Arc<Activity>>,
    /// Yielded since the last flush: the next write goes out.
    yielded: bool,
}

impl Io {
    /// `stream`, whose first bytes `prefix` were read from it already.
    pub(super) fn new(
        prefix: Bytes,
        stream: TcpStream,
        write_timeout: Option<Duration>,
        coalesce: Option<Arc<Activity>>,
    ) -> Self {
        Self {
            prefix,
            stream,
            write_timeout,
            stall: None,
            coalesce,
            yielded: false,
        }
    }

    /// Whether to put this write off by one yield (see [`Io`]): the first
    /// write after a flush, while other requests are in flight.
    fn put_off(&mut self, cx: &Context<'_>) -> bool {
        let busy = self
            .coalesce
            .as_ref()
            .is_some_and(|a| a.open.load(std::sync::atomic::Ordering::Acquire) > 0);
        if !busy || std::mem::replace(&mut self.yielded, true) {
            return false;
        }
        cx.waker().wake_by_ref();
        true
    }

    /// After a write returned `Pending`: `Pending` too, until the write
    /// timeout since the first such write, then an error.
    fn poll_stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let Some(timeout) = self.write_timeout else {
            return Poll::Pending;
        };
        let (sleep, running) = self
            .stall
            .get_or_insert_with(|| (Box::pin(tokio::time::sleep(timeout)), true));
        if !*running {
            // `checked_add`: a huge timeout is "never", not a panic.
            if let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) {
                sleep.as_mut().reset(deadline);
            } else {
                return Poll::Pending;
            }
            *running = true;
        }
        std::task::ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer took nothing within the write timeout",
        )))
    }

    /// A write made progress (or failed): the stall is over.
    fn wrote<T>(&mut self, out: io::Result<T>) -> Poll<io::Result<T>> {
        if let Some((_, running)) = self.stall.as_mut() {
            *running = false;
        }
        Poll::Ready(out)
    }
}

impl AsyncRead for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.prefix.has_remaining() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.put_off(cx) {
            return Poll::Pending;
        }
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
            Poll::Ready(out) => self.wrote(out),
            Poll::Pending => self.poll_stalled(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.put_off(cx) {
            return Poll::Pending;
        }
        match Pin::new(&mut self.stream).poll_write_vectored(cx, bufs) {
            Poll::Ready(out) => self.wrote(out),
            Poll::Pending => self.poll_stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.stream).poll_flush(cx);
        if flushed.is_ready() {
            self.yielded = false;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Errors of one incoming connection, not of the listener.
pub(super) fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::wake_count::WakeCount;

    /// A server-side stream of a loopback connection, as `Io` with
    /// `in_flight` requests on its connection (`coalesce`: HTTP/2).
    async fn io(coalesce: bool, in_flight: usize) -> (Io, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (tx, _rx) = mpsc::channel(1);
        let activity = Arc::new(Activity::new(tx));
        activity.open.store(in_flight, Ordering::SeqCst);
        let io = Io::new(Bytes::new(), server, None, coalesce.then_some(activity));
        (io, client)
    }

    #[tokio::test]
    async fn http2_writes_yield_once_per_flush_while_other_requests_are_in_flight() {
        let (mut io, _client) = io(true, 3).await;
        let (count, waker) = WakeCount::new();
        let mut cx = Context::from_waker(&waker);
        let mut io = Pin::new(&mut io);
        // The first write after a flush is put off, and the task woken to
        // come back at once: the bound is this one yield.
        assert!(io.as_mut().poll_write(&mut cx, b"a").is_pending());
        assert_eq!(count.get(), 1);
        assert!(matches!(
            io.as_mut().poll_write(&mut cx, b"a"),
            Poll::Ready(Ok(1))
        ));
        // Until the flush, the other writes of the burst go out directly.
        assert!(matches!(
            io.as_mut().poll_write(&mut cx, b"b"),
            Poll::Ready(Ok(1))
        ));
        assert!(io.as_mut().poll_flush(&mut cx).is_ready());
        // The next burst yields once again (vectored writes alike).
        let bufs = [io::IoSlice::new(b"c")];
        assert!(io.as_mut().poll_write_vectored(&mut cx, &bufs).is_pending());
        assert!(matches!(
            io.as_mut().poll_write_vectored(&mut cx, &bufs),
            Poll::Ready(Ok(1))
        ));
        assert_eq!(count.get(), 2);
    }

    #[tokio::test]
    async fn a_lone_request_and_http1_are_written_at_once() {
        let (count, waker) = WakeCount::new();
        let mut cx = Context::from_waker(&waker);
        // HTTP/2, no other request in flight: nothing to wait for.
        let (mut h2, _c) = io(true, 0).await;
        assert!(matches!(
            Pin::new(&mut h2).poll_write(&mut cx, b"a"),
            Poll::Ready(Ok(1))
        ));
        // HTTP/1: one response at a time, never put off.
        let (mut h1, _c) = io(false, 5).await;
        assert!(matches!(
            Pin::new(&mut h1).poll_write(&mut cx, b"a"),
            Poll::Ready(Ok(1))
        ));
        assert_eq!(count.get(), 0, "no yield");
    }
}
