//! A reader of newline-delimited input that leaves out the lines a check
//! refuses ([`LineFilter`], [`LineCheck`]).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Past this many bytes without a newline, a line is passed through as it
/// comes, unjudged (the reader behind applies its own line limit): the
/// filter never holds more than this, whatever the peer sends.
const MAX_HELD_LINE: usize = 1 << 20;

/// How much is read from the inner reader at once.
const CHUNK: usize = 8 * 1024;

/// What a [`LineFilter`] asks of each line: whether it goes on.
///
/// A closure `FnMut(&[u8]) -> bool` is one; a type of its own (with
/// [`Default`]) lets a filter be made with [`LineFilter::new`] alone and
/// named as a type, as the SDK integrations' `CheckedInput` are.
///
/// ```
/// use tower_mcp_cancel::transport::{LineCheck, LineFilter};
///
/// /// Leaves out comment lines.
/// #[derive(Debug, Default)]
/// struct NoComments;
///
/// impl LineCheck for NoComments {
///     const LEFT_OUT: &'static str = "a comment line: left out";
///
///     fn passes(&mut self, line: &[u8]) -> bool {
///         !line.starts_with(b"#")
///     }
/// }
///
/// type Commentless<R> = LineFilter<R, NoComments>;
/// let input = Commentless::new(tokio::io::empty());
/// ```
pub trait LineCheck {
    /// What the filter logs (at debug level, with the line) when it leaves
    /// a line out.
    const LEFT_OUT: &'static str = "an input line its check refused: left out";

    /// Whether `line` goes on to the reader: its content, without its line
    /// ending (`\n` or `\r\n`) and without a leading UTF-8 byte-order mark.
    fn passes(&mut self, line: &[u8]) -> bool;
}

impl<F: FnMut(&[u8]) -> bool> LineCheck for F {
    fn passes(&mut self, line: &[u8]) -> bool {
        self(line)
    }
}

pin_project_lite::pin_project! {
    /// An [`AsyncRead`] over newline-delimited input (stdio's JSON-RPC) that
    /// leaves out each whole line its [`LineCheck`] refuses and passes every
    /// other byte through unchanged, in order.
    ///
    /// The check sees each line's content: without its line ending (`\n`
    /// or `\r\n`) and without a leading UTF-8 byte-order mark, which the
    /// SDKs' readers skip too; a line that passes goes on as it was read
    /// (ending and mark included), one that does not is left out (and
    /// logged at debug level). Two kinds of line go on unjudged, for the
    /// reader behind to deal with as it would without the filter: a line
    /// longer than 1 MiB (passed as it comes, from the moment it is known
    /// to be that long) and a last line without its newline at the end of
    /// input.
    ///
    /// It holds at most one line (up to 1 MiB), what one read of the inner
    /// reader yields (8 KiB) and the lines of that read that passed. Nothing
    /// is read ahead of the reader's own reads, and nothing is written
    /// anywhere: dropping it drops what it held (at most a part of a line
    /// and lines read but not yet passed on) with the inner reader. An
    /// error of the inner reader is returned as it is; the filter can be
    /// read again after it.
    ///
    /// The SDK integrations build on it: `tower_mcp_cancel_rmcp::CheckedInput`
    /// and `tower_mcp_cancel_tower_mcp::CheckedInput` are this filter with
    /// a check that leaves out the notifications their SDK would answer.
    ///
    /// ```
    /// use tokio::io::AsyncReadExt;
    /// use tower_mcp_cancel::transport::LineFilter;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let input = &b"{\"id\":1}\r\n# a comment\n{\"id\":2}\n"[..];
    /// let mut lines = LineFilter::with_check(input, |line: &[u8]| !line.starts_with(b"#"));
    /// let mut out = String::new();
    /// lines.read_to_string(&mut out).await?;
    /// assert_eq!(out, "{\"id\":1}\r\n{\"id\":2}\n");
    /// # Ok(())
    /// # }
    /// ```
    pub struct LineFilter<R, C> {
        #[pin]
        inner: R,
        lines: Lines<C>,
    }
}

/// What a [`LineFilter`] holds beside its reader.
struct Lines<C> {
    check: C,
    /// The line being read, up to its newline.
    line: Vec<u8>,
    /// What is ready for the reader, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    /// The current line grew past [`MAX_HELD_LINE`]: pass it through.
    passing: bool,
    eof: bool,
}

impl<R, C: LineCheck> LineFilter<R, C> {
    /// Reads `inner` (a pipe, a socket, stdin), passing on the lines
    /// `check` lets through.
    pub fn with_check(inner: R, check: C) -> Self {
        LineFilter {
            inner,
            lines: Lines {
                check,
                line: Vec::new(),
                ready: Vec::new(),
                ready_at: 0,
                passing: false,
                eof: false,
            },
        }
    }
}

impl<R, C: LineCheck + Default> LineFilter<R, C> {
    /// Reads `inner` (a pipe, a socket, stdin), passing on the lines a
    /// `C::default()` lets through.
    pub fn new(inner: R) -> Self {
        Self::with_check(inner, C::default())
    }
}

impl<R, C> LineFilter<R, C> {
    /// The reader it reads from.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The reader it reads from, mutably. Reading from it directly takes
    /// those bytes past the filter.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

impl<R: fmt::Debug, C> fmt::Debug for LineFilter<R, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The check is a closure as a rule: nothing to show.
        f.debug_struct("LineFilter")
            .field("inner", &self.inner)
            .field("held", &self.lines.line.len())
            .field("ready", &(self.lines.ready.len() - self.lines.ready_at))
            .field("eof", &self.lines.eof)
            .finish_non_exhaustive()
    }
}

/// A line's content as the check sees it: without its line ending
/// and without a leading byte-order mark.
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

impl<C: LineCheck> Lines<C> {
    /// Sorts `data` into lines; whole lines that pass go to `ready`.
    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let (segment, rest) = match data.iter().position(|&b| b == b'\n') {
                Some(i) => data.split_at(i + 1),
                None => (data, &[][..]),
            };
            data = rest;
            let whole = segment.ends_with(b"\n");
            if self.passing {
                self.ready.extend_from_slice(segment);
                self.passing = !whole;
                continue;
            }
            self.line.extend_from_slice(segment);
            if self.line.len() > MAX_HELD_LINE {
                self.ready.append(&mut self.line);
                self.passing = !whole;
            } else if whole {
                let line = content(&self.line);
                if self.check.passes(line) {
                    self.ready.extend_from_slice(&self.line);
                } else {
                    tracing::debug!(line = %String::from_utf8_lossy(line), "{}", C::LEFT_OUT);
                }
                self.line.clear();
            }
        }
    }
}

impl<R: AsyncRead, C: LineCheck> AsyncRead for LineFilter<R, C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let (mut inner, lines) = (this.inner, this.lines);
        loop {
            if lines.ready_at < lines.ready.len() {
                let n = buf.remaining().min(lines.ready.len() - lines.ready_at);
                buf.put_slice(&lines.ready[lines.ready_at..lines.ready_at + n]);
                lines.ready_at += n;
                if lines.ready_at == lines.ready.len() {
                    lines.ready.clear();
                    lines.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if lines.eof {
                // A trailing line without its newline: the reader's to judge.
                if lines.line.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                lines.ready.append(&mut lines.line);
                continue;
            }
            let mut chunk = [0u8; CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(inner.as_mut().poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                lines.eof = true;
            } else {
                lines.take(read.filled());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Hands its bytes over `step` at a time, so lines span reads.
    struct Trickle(Vec<u8>, usize, usize);

    impl AsyncRead for Trickle {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let end = (this.1 + this.2)
                .min(this.0.len())
                .min(this.1 + buf.remaining());
            buf.put_slice(&this.0[this.1..end]);
            this.1 = end;
            Poll::Ready(Ok(()))
        }
    }

    /// Leaves out the lines whose content is `drop` exactly; records what
    /// it was asked to judge.
    async fn through(input: &[u8], step: usize, judged: &mut Vec<Vec<u8>>) -> Vec<u8> {
        let mut out = Vec::new();
        LineFilter::with_check(Trickle(input.to_vec(), 0, step), |line: &[u8]| {
            judged.push(line.to_vec());
            line != b"drop"
        })
        .read_to_end(&mut out)
        .await
        .unwrap();
        out
    }

    #[tokio::test]
    async fn refused_lines_are_left_out_and_the_rest_is_unchanged_however_the_reads_fall() {
        let kept: &[&[u8]] = &[
            b"{\"id\":1}\n",
            b"{\"id\":2}\r\n",
            b"\n",
            b"\xEF\xBB\xBFbom then text\n",
            b"dropped? no: more than drop\n",
            b"\r\n",
        ];
        let dropped: &[&[u8]] = &[b"drop\n", b"drop\r\n", b"\xEF\xBB\xBFdrop\n"];
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for (i, line) in kept.iter().enumerate() {
            input.extend_from_slice(line);
            input.extend_from_slice(dropped[i % dropped.len()]);
            expected.extend_from_slice(line);
        }
        // A trailing line without its newline is passed on unjudged.
        input.extend_from_slice(b"drop");
        expected.extend_from_slice(b"drop");
        for step in [1, 3, 7, 64, CHUNK, 1 << 20] {
            let mut judged = Vec::new();
            assert_eq!(
                through(&input, step, &mut judged).await,
                expected,
                "read {step} at a time"
            );
            // The check saw each whole line once, ending and mark off.
            assert_eq!(judged.len(), kept.len() * 2, "read {step} at a time");
            assert_eq!(judged[1], b"drop");
            assert_eq!(judged[6], b"bom then text");
            assert_eq!(judged[7], b"drop");
        }
    }

    #[tokio::test]
    async fn a_line_over_the_held_limit_passes_through_whole_unjudged_and_the_next_is_judged() {
        let long = format!("drop{}", "x".repeat(MAX_HELD_LINE + 10));
        let input = format!("{long}\ndrop\n{{\"id\":1}}");
        let mut judged = Vec::new();
        let out = through(input.as_bytes(), CHUNK, &mut judged).await;
        assert_eq!(out, format!("{long}\n{{\"id\":1}}").into_bytes());
        assert_eq!(judged, [b"drop".to_vec()]);
    }

    #[tokio::test]
    async fn what_a_short_read_leaves_comes_with_the_next() {
        let mut filter = LineFilter::with_check(&b"one\ntwo\n"[..], |_: &[u8]| true);
        let mut two = [0u8; 2];
        filter.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"on");
        let mut rest = String::new();
        filter.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "e\ntwo\n");
        assert!(format!("{filter:?}").starts_with("LineFilter"));
    }
}
