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
/// The flags of this process's stdin and stdout are left as they are:
/// non-blocking mode is a property of the open file, which every
/// descriptor of it shares (the rest of the process, a parent, siblings),
/// so nothing here sets it there. A pipe is opened anew through
/// `/proc/self/fd` (Linux), an open file of its own that alone is
/// non-blocking, and a socket is read and written with `MSG_DONTWAIT` on
/// each call. A `println!` elsewhere in the process never sees `WouldBlock`
/// because of these streams (it would corrupt the protocol anyway). A pipe
/// that cannot be opened anew (another Unix, no `/proc`, a pipe the process
/// may not open) keeps tokio's blocking-pool handle.
///
/// # Dropping, and more than one pair
///
/// Dropping either half closes that half's own descriptor (a duplicate, or
/// the pipe opened anew) and nothing else: this process's stdin and stdout
/// stay open, and their flags were never changed, so there is nothing to
/// restore. A pair holds no state shared with any other, so `process_streams`
/// can be called any number of times, and the pairs dropped in any order:
/// each reads and writes as if it were alone, and dropping one never turns
/// another's reads into blocking ones. (Two pairs read from the same input
/// take turns at its bytes, as two readers of one pipe do: which pair gets
/// a line is not defined, so a program serves one pair at a time.)
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
        };
        let stdout = ProcessStdout {
            inner: tokio::io::stdout(),
        };
        (stdin, stdout)
    }
}

/// The two halves over `stdin` and `stdout` (this process's, but for tests).
#[cfg(unix)]
fn halves(
    stdin: std::os::fd::BorrowedFd<'_>,
    stdout: std::os::fd::BorrowedFd<'_>,
) -> (ProcessStdin, ProcessStdout) {
    let (inner_in, inner_out) = super::std_io::open(stdin, stdout);
    (
        ProcessStdin { inner: inner_in },
        ProcessStdout { inner: inner_out },
    )
}

/// This process's stdin, from [`process_streams`].
#[derive(Debug)]
pub struct ProcessStdin {
    inner: In,
}

/// This process's stdout, from [`process_streams`].
#[derive(Debug)]
pub struct ProcessStdout {
    inner: Out,
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
    use std::io::Write;
    use std::os::fd::{AsFd, OwnedFd};
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::transport::stdio::std_io::non_blocking;

    /// Writes a byte to `fd` unless disarmed (dropped) within five seconds:
    /// it ends a read that blocked the runtime's only thread (the failure
    /// this guards against), so that the test fails rather than hangs.
    /// Disarmed, it writes nothing; it closes its own copy of `fd` only.
    struct Watchdog {
        _disarm: std::sync::mpsc::Sender<()>,
    }

    impl Watchdog {
        fn arm(fd: &OwnedFd) -> Watchdog {
            let fd = fd.try_clone().unwrap();
            let (disarm, disarmed) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                // Dropping the sender disconnects: only the time running out
                // is the failure.
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    disarmed.recv_timeout(Duration::from_secs(5))
                {
                    let _ = std::fs::File::from(fd).write_all(b"!");
                }
            });
            Watchdog { _disarm: disarm }
        }
    }

    /// A pipe (read end, write end), or a socket pair (ours twice, peer).
    fn streams(socket: bool) -> (OwnedFd, OwnedFd, OwnedFd) {
        if socket {
            let (ours, peer) = std::os::unix::net::UnixStream::pair().unwrap();
            let ours = OwnedFd::from(ours);
            (ours.try_clone().unwrap(), ours, OwnedFd::from(peer))
        } else {
            let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
            let (read_end, write_end) = (
                rx.into_blocking_fd().unwrap(),
                tx.into_blocking_fd().unwrap(),
            );
            let peer = write_end.try_clone().unwrap();
            (read_end, write_end, peer)
        }
    }

    /// Two pairs over the same descriptors: whichever is dropped first, a
    /// read on the other that has nothing to read waits without blocking
    /// the runtime's (only) thread, and the descriptors themselves are
    /// never put in non-blocking mode.
    #[tokio::test(flavor = "current_thread")]
    async fn dropping_one_pair_does_not_block_the_other() {
        for socket in [false, true] {
            let (input, output, peer) = streams(socket);
            let first = halves(input.as_fd(), output.as_fd());
            let (mut stdin, mut stdout) = halves(input.as_fd(), output.as_fd());
            let what = if socket { "socket" } else { "pipe" };
            std::fs::File::from(peer.try_clone().unwrap())
                .write_all(b"four")
                .unwrap();
            drop(first);
            // A read that fills its buffer leaves the reactor's readiness
            // set: the next read goes straight to the descriptor.
            let mut four = [0u8; 4];
            stdin.read_exact(&mut four).await.unwrap();
            assert_eq!(&four, b"four");
            let watchdog = Watchdog::arm(&peer);
            let started = Instant::now();
            let mut one = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_millis(200), stdin.read(&mut one)).await;
            drop(watchdog);
            let took = started.elapsed();
            assert!(
                read.is_err(),
                "{what}: the read returned {read:?} after {took:?}"
            );
            assert!(
                took < Duration::from_secs(2),
                "{what}: the read took {took:?}"
            );
            // Nor were the descriptors' own flags changed, under a live pair
            // or after.
            assert!(
                !non_blocking(input.as_fd()) && !non_blocking(output.as_fd()),
                "{what}"
            );
            stdout.write_all(b"out\n").await.unwrap();
            stdout.flush().await.unwrap();
            drop((stdin, stdout));
            assert!(
                !non_blocking(input.as_fd()) && !non_blocking(output.as_fd()),
                "{what}"
            );
        }
    }
}
