//! The reactor side of [`process_streams`](super::process_streams) (Unix):
//! a pipe or Unix socket registered with the reactor, anything else (a
//! terminal, a file) left to tokio's blocking-pool handle; why is on
//! `process_streams`. The blocking-pool hand-offs cost two cross-thread
//! wakes (a futex wake and a sleep each) per read and per flush.
//!
//! Neither way changes the flags of this process's stdin or stdout: their
//! open files are shared with the rest of the process (and with other
//! processes), so a pipe is opened anew (`/proc/self/fd/N`, Linux: an open
//! file of its own, non-blocking from the start) and a socket is read and
//! written with `MSG_DONTWAIT` on each call. Where neither can be done (a
//! pipe on another Unix, a pipe `/proc` does not reopen), the stream keeps
//! tokio's blocking-pool handle. Any number of pairs can live side by side,
//! and dropping one restores nothing because nothing was changed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio_util::either::Either;

/// This process's stdin: non-blocking through the reactor where possible.
pub(super) type Stdin = Either<Reactor<tokio::net::unix::pipe::Receiver>, tokio::io::Stdin>;
/// This process's stdout: non-blocking through the reactor where possible.
pub(super) type Stdout = Either<Reactor<tokio::net::unix::pipe::Sender>, tokio::io::Stdout>;

/// A pipe end (opened anew) or a Unix socket registered with the reactor.
pub(super) type Reactor<P> = Either<P, Socket>;

/// Opens `stdin` and `stdout` (this process's, but for tests).
pub(super) fn open(stdin: BorrowedFd<'_>, stdout: BorrowedFd<'_>) -> (Stdin, Stdout) {
    let stdin = reader(stdin).map_or_else(|| Either::Right(tokio::io::stdin()), Either::Left);
    let stdout = writer(stdout).map_or_else(|| Either::Right(tokio::io::stdout()), Either::Left);
    (stdin, stdout)
}

/// `fd` as a non-blocking reader, if it is a pipe (opened anew) or a socket.
fn reader(fd: BorrowedFd<'_>) -> Option<Reactor<tokio::net::unix::pipe::Receiver>> {
    match Kind::of(fd) {
        Kind::Pipe => tokio::net::unix::pipe::Receiver::from_owned_fd(reopen(fd, false)?)
            .ok()
            .map(Either::Left),
        Kind::Socket => Socket::new(fd, Interest::READABLE).map(Either::Right),
        Kind::Other => None,
    }
}

/// `fd` as a non-blocking writer, if it is a pipe (opened anew) or a socket.
fn writer(fd: BorrowedFd<'_>) -> Option<Reactor<tokio::net::unix::pipe::Sender>> {
    match Kind::of(fd) {
        Kind::Pipe => tokio::net::unix::pipe::Sender::from_owned_fd(reopen(fd, true)?)
            .ok()
            .map(Either::Left),
        Kind::Socket => Socket::new(fd, Interest::WRITABLE).map(Either::Right),
        Kind::Other => None,
    }
}

/// The pipe `fd` is an end of, opened anew for reading or writing: a new
/// open file, non-blocking, that shares no flags with `fd`'s.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn reopen(fd: BorrowedFd<'_>, write: bool) -> Option<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let access = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let opened = rustix::fs::open(
        path,
        access | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    );
    // The same pipe, or nothing (a descriptor number reused meanwhile
    // cannot be: `fd` is borrowed, so open, for the whole call).
    opened.ok().filter(|new| same_file(fd, new.as_fd()))
}

/// Elsewhere a pipe cannot be opened anew (`/dev/fd/N` duplicates the
/// descriptor, open file and flags included): it keeps tokio's handle.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn reopen(_: BorrowedFd<'_>, _: bool) -> Option<OwnedFd> {
    None
}

/// Whether two descriptors are of the same file (device and inode).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

#[derive(PartialEq, Eq)]
enum Kind {
    Pipe,
    Socket,
    Other,
}

impl Kind {
    fn of(fd: BorrowedFd<'_>) -> Kind {
        match rustix::fs::fstat(fd).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode)) {
            Ok(rustix::fs::FileType::Fifo) => Kind::Pipe,
            Ok(rustix::fs::FileType::Socket) => Kind::Socket,
            _ => Kind::Other,
        }
    }
}

/// A Unix socket (a duplicate of this process's descriptor) read or
/// written through the reactor without non-blocking mode: each call asks
/// for it alone (`MSG_DONTWAIT`), so the open file's flags, shared with
/// the rest of the process, stay as they are.
#[derive(Debug)]
pub(super) struct Socket {
    fd: AsyncFd<OwnedFd>,
}

impl Socket {
    fn new(fd: BorrowedFd<'_>, interest: Interest) -> Option<Socket> {
        let fd = fd.try_clone_to_owned().ok()?;
        // Calls never block (`MSG_DONTWAIT`), which is what the reactor
        // needs of them; the descriptor's own mode does not matter.
        // `with_interest` is deprecated (tokio 1.54) for a generic `T` whose
        // descriptor could be closed or swapped while registered; an
        // `OwnedFd` moved into the `AsyncFd` cannot be, which is the whole
        // of what the unsafe `register_with_interest` asks its caller.
        #[allow(deprecated)]
        let registered = AsyncFd::with_interest(fd, interest);
        registered.ok().map(|fd| Socket { fd })
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use rustix::net::RecvFlags;
        loop {
            let mut ready = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match ready.try_io(|fd| {
                rustix::net::recv(fd, &mut *unfilled, RecvFlags::DONTWAIT)
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Not readable after all: the readiness was cleared; wait.
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        use rustix::net::SendFlags;
        loop {
            let mut ready = ready!(self.fd.poll_write_ready(cx))?;
            match ready.try_io(|fd| {
                rustix::net::send(fd, buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
                    .map_err(io::Error::from)
            }) {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(written) => return Poll::Ready(written),
                Err(_would_block) => {}
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Shuts the socket's sending side, as tokio's `UnixStream` does.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let shut = rustix::net::shutdown(self.fd.get_ref(), rustix::net::Shutdown::Write);
        Poll::Ready(shut.map_err(io::Error::from))
    }
}

// Both handle types must stay usable by the generic driver.
const _: fn() = || {
    fn io<R: AsyncRead + Unpin + Send, W: AsyncWrite + Unpin + Send + 'static>() {}
    io::<Stdin, Stdout>();
};

/// Whether `fd` is in non-blocking mode (its open file's flags).
#[cfg(all(test, target_os = "linux"))]
pub(super) fn non_blocking(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let info =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).expect("fdinfo");
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .map(|f| u32::from_str_radix(f.trim(), 8).expect("octal flags"))
        .expect("flags line");
    flags & 0o4000 != 0 // O_NONBLOCK
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_socket_is_served_through_the_reactor_its_flags_untouched() {
        let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut r = reader(ours.as_fd()).expect("a socket is registered");
        let mut w = writer(ours.as_fd()).expect("a socket is registered");
        assert!(matches!(r, Either::Right(_)) && matches!(w, Either::Right(_)));
        peer.write_all(b"ping\n").unwrap();
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping\n");
        w.write_all(b"pong\n").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0u8; 5];
        std::io::Read::read_exact(&mut peer, &mut got).unwrap();
        assert_eq!(&got, b"pong\n");
        #[cfg(target_os = "linux")]
        assert!(!non_blocking(ours.as_fd()));
        // Shutting the writer down ends what the peer reads.
        w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut peer, &mut rest).unwrap();
        assert!(rest.is_empty());
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_pipe_is_served_through_the_reactor_its_flags_untouched() {
        let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        let read_end = rx.into_blocking_fd().unwrap();
        let write_end = tx.into_blocking_fd().unwrap();
        let mut r = reader(read_end.as_fd()).expect("a pipe is registered");
        let mut w = writer(write_end.as_fd()).expect("a pipe is registered");
        assert!(matches!(r, Either::Left(_)) && matches!(w, Either::Left(_)));
        w.write_all(b"line\n").await.unwrap();
        w.flush().await.unwrap();
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"line\n");
        assert!(!non_blocking(read_end.as_fd()) && !non_blocking(write_end.as_fd()));
        // The write end opened anew counts as a writer until dropped: once
        // it and the original are closed, the reader sees the end.
        drop((w, write_end));
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn a_file_keeps_the_blocking_handles() {
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(reader(file.as_fd()).is_none());
    }
}
