//! The reactor side of [`process_streams`](super::process_streams) (Unix):
//! a pipe or Unix socket registered with the reactor, anything else (a
//! terminal, a file) left to tokio's blocking-pool handle; why, and what
//! non-blocking mode means for the rest of the process, is on
//! `process_streams`. The blocking-pool hand-offs cost two cross-thread
//! wakes (a futex wake and a sleep each) per read and per flush.
//! [`NonBlocking`] puts the descriptors back in blocking mode when the last
//! half holding it is dropped.

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::either::Either;

/// This process's stdin: non-blocking through the reactor where possible.
pub(super) type Stdin = Either<Reactor<tokio::net::unix::pipe::Receiver>, tokio::io::Stdin>;
/// This process's stdout: non-blocking through the reactor where possible.
pub(super) type Stdout = Either<Reactor<tokio::net::unix::pipe::Sender>, tokio::io::Stdout>;

/// A pipe end or a Unix socket registered with the reactor.
pub(super) type Reactor<P> = Either<P, tokio::net::UnixStream>;

/// Restores blocking mode on the descriptors it holds when dropped.
#[derive(Debug, Default)]
pub(super) struct NonBlocking {
    fds: Vec<std::os::fd::OwnedFd>,
}

impl Drop for NonBlocking {
    fn drop(&mut self) {
        for fd in &self.fds {
            let _ = rustix::io::ioctl_fionbio(fd, false);
        }
    }
}

/// Opens `stdin` and `stdout` (this process's, but for tests);
/// `restore` gets what to put back in blocking mode.
pub(super) fn open(
    stdin: std::os::fd::BorrowedFd<'_>,
    stdout: std::os::fd::BorrowedFd<'_>,
    restore: &mut NonBlocking,
) -> (Stdin, Stdout) {
    let stdin =
        reader(stdin, restore).map_or_else(|| Either::Right(tokio::io::stdin()), Either::Left);
    let stdout =
        writer(stdout, restore).map_or_else(|| Either::Right(tokio::io::stdout()), Either::Left);
    (stdin, stdout)
}

/// `fd` (duplicated) as a non-blocking reader, if it is a pipe or a socket.
fn reader(
    fd: std::os::fd::BorrowedFd<'_>,
    restore: &mut NonBlocking,
) -> Option<Reactor<tokio::net::unix::pipe::Receiver>> {
    let fd = reactor(fd, restore)?;
    match Kind::of(&fd) {
        Kind::Pipe => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(Either::Left),
        Kind::Socket => socket(fd).map(Either::Right),
        Kind::Other => None,
    }
}

/// `fd` (duplicated) as a non-blocking writer, if it is a pipe or a socket.
fn writer(
    fd: std::os::fd::BorrowedFd<'_>,
    restore: &mut NonBlocking,
) -> Option<Reactor<tokio::net::unix::pipe::Sender>> {
    let fd = reactor(fd, restore)?;
    match Kind::of(&fd) {
        Kind::Pipe => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(Either::Left),
        Kind::Socket => socket(fd).map(Either::Right),
        Kind::Other => None,
    }
}

/// A duplicate of `fd` to register, if it is a pipe or a socket; a second
/// duplicate goes to `restore`.
fn reactor(
    fd: std::os::fd::BorrowedFd<'_>,
    restore: &mut NonBlocking,
) -> Option<std::os::fd::OwnedFd> {
    let owned = fd.try_clone_to_owned().ok()?;
    if Kind::of(&owned) == Kind::Other {
        return None;
    }
    restore.fds.push(fd.try_clone_to_owned().ok()?);
    Some(owned)
}

#[derive(PartialEq, Eq)]
enum Kind {
    Pipe,
    Socket,
    Other,
}

impl Kind {
    fn of(fd: &std::os::fd::OwnedFd) -> Kind {
        use std::os::unix::fs::FileTypeExt;
        let Ok(file) = fd.try_clone().map(std::fs::File::from) else {
            return Kind::Other;
        };
        match file.metadata().map(|m| m.file_type()) {
            Ok(t) if t.is_fifo() => Kind::Pipe,
            Ok(t) if t.is_socket() => Kind::Socket,
            _ => Kind::Other,
        }
    }
}

fn socket(fd: std::os::fd::OwnedFd) -> Option<tokio::net::UnixStream> {
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(std).ok()
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
    async fn a_socket_is_served_through_the_reactor_and_made_blocking_again() {
        let (ours, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut restore = NonBlocking::default();
        let mut r = reader(ours.as_fd(), &mut restore).expect("a socket is registered");
        let mut w = writer(ours.as_fd(), &mut restore).expect("a socket is registered");
        assert!(matches!(r, Either::Right(_)) && matches!(w, Either::Right(_)));
        #[cfg(target_os = "linux")]
        assert!(non_blocking(ours.as_fd()));
        peer.write_all(b"ping\n").unwrap();
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping\n");
        w.write_all(b"pong\n").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0u8; 5];
        std::io::Read::read_exact(&mut peer, &mut got).unwrap();
        assert_eq!(&got, b"pong\n");
        drop((r, w, restore));
        #[cfg(target_os = "linux")]
        assert!(!non_blocking(ours.as_fd()), "blocking mode restored");
    }

    #[tokio::test]
    async fn a_pipe_is_served_through_the_reactor_and_made_blocking_again() {
        let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        let read_end = rx.into_blocking_fd().unwrap();
        let write_end = tx.into_blocking_fd().unwrap();
        let mut restore = NonBlocking::default();
        let mut r = reader(read_end.as_fd(), &mut restore).expect("a pipe is registered");
        let mut w = writer(write_end.as_fd(), &mut restore).expect("a pipe is registered");
        assert!(matches!(r, Either::Left(_)) && matches!(w, Either::Left(_)));
        w.write_all(b"line\n").await.unwrap();
        w.flush().await.unwrap();
        let mut buf = [0u8; 5];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"line\n");
        drop((r, w, restore));
        #[cfg(target_os = "linux")]
        assert!(!non_blocking(read_end.as_fd()) && !non_blocking(write_end.as_fd()));
    }

    #[test]
    fn a_file_keeps_the_blocking_handles() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let mut restore = NonBlocking::default();
        assert!(reader(file.as_fd(), &mut restore).is_none());
        assert!(restore.fds.is_empty(), "nothing to restore");
    }
}
