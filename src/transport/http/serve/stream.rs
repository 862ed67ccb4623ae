//! The accepted stream: its first bytes read within the header timer (they
//! tell HTTP/2 from HTTP/1), then handed to hyper with those bytes first
//! and a timer on writes the peer leaves pending.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// The HTTP/2 client preface (RFC 9113, 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
/// fails.
pub(super) struct Io {
    prefix: Bytes,
    stream: TcpStream,
    write_timeout: Option<Duration>,
    /// Running while a write is pending (kept to be reset, not reallocated).
    stall: Option<(Pin<Box<Sleep>>, bool)>,
}

impl Io {
    /// `stream`, whose first bytes `prefix` were read from it already.
    pub(super) fn new(prefix: Bytes, stream: TcpStream, write_timeout: Option<Duration>) -> Self {
        Self {
            prefix,
            stream,
            write_timeout,
            stall: None,
        }
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
        match Pin::new(&mut self.stream).poll_write_vectored(cx, bufs) {
            Poll::Ready(out) => self.wrote(out),
            Poll::Pending => self.poll_stalled(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
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
