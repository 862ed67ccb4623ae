//! This process's stdin and stdout ([`process_streams`]), as
//! [`StdioServer::serve_stdio`](super::StdioServer::serve_stdio) reads and
//! writes them, for any stdio transport.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(unix)]
type In = super::std_io::Stdin;
#[cfg(not(unix))]
type In = tokio::io::Stdin;
#[cfg(unix)]
type Out = super::std_io::Stdout;
#[cfg(not(unix))]
type Out = tokio::io::Stdout;

/// What the two halves share: the descriptors to put back in blocking
/// mode once both are dropped.
#[cfg(unix)]
type Restore = std::sync::Arc<super::std_io::NonBlocking>;
#[cfg(not(unix))]
type Restore = ();

/// This process's stdin and stdout, for a stdio server's transport (an
/// SDK's, or [`StdioServer::serve`](super::StdioServer::serve)).
///
/// On Unix, a stdin or stdout that is a pipe or a Unix socket (what an MCP
/// host gives its server) is read and written non-blocking through the
/// runtime's reactor, like a socket, where `tokio::io::stdin()`/`stdout()`
/// do every read and write on tokio's blocking thread pool. That saves a
/// thread hand-off per read and per write (the largest share of a stdio
/// server's CPU per request under load), and a read still pending when the
/// server stops is dropped with it: it does not hold the runtime's
/// shutdown until the peer writes or closes its end, as a blocking-pool
/// read does. A terminal, a file (and any stream on other platforms) keeps
/// tokio's handles.
///
/// Non-blocking mode is a property of the open file, shared with every
/// descriptor of it: while either half lives, a `println!` elsewhere in the
/// process could fail with `WouldBlock` when the pipe is full (it would
/// corrupt the protocol anyway). Blocking mode is restored once both halves
/// are dropped.
///
/// Call it within a tokio runtime with I/O enabled: the streams are
/// registered with its reactor (outside one it panics, as making any tokio
/// socket does).
///
/// ```no_run
/// use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
///
/// # async fn run() -> std::io::Result<()> {
/// let (stdin, mut stdout) = tower_mcp_cancel::transport::stdio::process_streams();
/// let mut lines = BufReader::new(stdin).lines();
/// while let Some(line) = lines.next_line().await? {
///     stdout.write_all(line.as_bytes()).await?;
///     stdout.write_all(b"\n").await?;
///     stdout.flush().await?;
/// }
/// # Ok(())
/// # }
/// ```
pub fn process_streams() -> (ProcessStdin, ProcessStdout) {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let (stdin, stdout) = (io::stdin(), io::stdout());
        halves(stdin.as_fd(), stdout.as_fd())
    }
    #[cfg(not(unix))]
    {
        let stdin = ProcessStdin {
            inner: tokio::io::stdin(),
            _restore: (),
        };
        let stdout = ProcessStdout {
            inner: tokio::io::stdout(),
            _restore: (),
        };
        (stdin, stdout)
    }
}

/// The two halves over `stdin` and `stdout` (duplicated), sharing what to
/// restore.
#[cfg(unix)]
fn halves(
    stdin: std::os::fd::BorrowedFd<'_>,
    stdout: std::os::fd::BorrowedFd<'_>,
) -> (ProcessStdin, ProcessStdout) {
    let mut restore = super::std_io::NonBlocking::default();
    let (inner_in, inner_out) = super::std_io::open(stdin, stdout, &mut restore);
    let restore = std::sync::Arc::new(restore);
    let stdin = ProcessStdin {
        inner: inner_in,
        _restore: restore.clone(),
    };
    let stdout = ProcessStdout {
        inner: inner_out,
        _restore: restore,
    };
    (stdin, stdout)
}

/// This process's stdin, from [`process_streams`].
#[derive(Debug)]
pub struct ProcessStdin {
    inner: In,
    _restore: Restore,
}

/// This process's stdout, from [`process_streams`].
#[derive(Debug)]
pub struct ProcessStdout {
    inner: Out,
    _restore: Restore,
}

impl AsyncRead for ProcessStdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ProcessStdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsFd;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::transport::stdio::std_io::non_blocking;

    /// Either half keeps the streams non-blocking; once both are dropped,
    /// in either order, blocking mode is back.
    #[tokio::test]
    async fn blocking_mode_comes_back_when_both_halves_are_dropped() {
        for reader_first in [true, false] {
            let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
            let read_end = rx.into_blocking_fd().unwrap();
            let write_end = tx.into_blocking_fd().unwrap();
            let (mut stdin, mut stdout) = halves(read_end.as_fd(), write_end.as_fd());
            stdout.write_all(b"line\n").await.unwrap();
            stdout.flush().await.unwrap();
            let mut buf = [0u8; 5];
            stdin.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"line\n");
            let (mut stdin, mut stdout) = (Some(stdin), Some(stdout));
            if reader_first {
                stdin.take();
            } else {
                stdout.take();
            }
            assert!(
                non_blocking(read_end.as_fd()) && non_blocking(write_end.as_fd()),
                "one half alive (reader dropped first: {reader_first})"
            );
            drop((stdin, stdout));
            assert!(
                !non_blocking(read_end.as_fd()) && !non_blocking(write_end.as_fd()),
                "both dropped (reader dropped first: {reader_first})"
            );
        }
    }
}
