//! Newline-delimited framing with a maximum line size; a line over it is
//! skipped, and what its envelope said (`envelope`) is reported.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

mod envelope;

use envelope::Scanner;
pub(crate) use envelope::{Envelope, Id, MAX_ID_BYTES};

/// Writes one message and its newline. The message is one line already:
/// the `jsonrpc::encode_*` functions never produce a line break.
pub(crate) async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, line: &[u8]) -> io::Result<()> {
    debug_assert!(!line.contains(&b'\n'), "a message must be one line");
    w.write_all(line).await?;
    w.write_all(b"\n").await
}

/// Writes messages that are already lines, each with its newline.
pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(w: &mut W, lines: &[u8]) -> io::Result<()> {
    debug_assert!(lines.ends_with(b"\n"), "lines end with a newline");
    w.write_all(lines).await
}

/// One frame read off the stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A complete line, without its `\n` (and without a trailing `\r`).
    Line(Vec<u8>),
    /// A line longer than the limit; it was discarded up to its newline.
    TooLong {
        /// How many bytes it had (at least the limit + 1).
        len: usize,
        /// Its top-level id and whether it has a method, read as it went by.
        envelope: Envelope,
    },
}

/// A line being discarded: its length so far, and its envelope.
struct Discarding {
    len: usize,
    scan: Scanner,
}

impl Discarding {
    fn frame(self) -> Frame {
        Frame::TooLong {
            len: self.len,
            envelope: self.scan.finish(),
        }
    }
}

/// Reads newline-delimited frames, never buffering more than `max` bytes of
/// one line: an oversize line is discarded up to the next newline and
/// reported as [`Frame::TooLong`] with its envelope (read as it streamed
/// past, in at most [`MAX_ID_BYTES`] more), and reading goes on.
///
/// Cancel-safe: all state lives in `self`, and bytes are taken out of the
/// buffered reader only synchronously after `fill_buf` returned.
pub(crate) struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    /// The current line when it is being discarded.
    discarding: Option<Discarding>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max: max.max(1),
            buf: Vec::new(),
            discarding: None,
        }
    }

    /// The largest line kept.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The next frame; `None` at end of stream. A last line without a
    /// newline is returned as a line.
    pub(crate) async fn next(&mut self) -> io::Result<Option<Frame>> {
        loop {
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if let Some(d) = self.discarding.take() {
                    return Ok(Some(d.frame()));
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Frame::Line(finish(std::mem::take(&mut self.buf)))));
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.unwrap_or(available.len());
            let consumed = newline.map_or(take, |n| n + 1);
            match &mut self.discarding {
                Some(d) => {
                    d.len += take;
                    d.scan.push(&available[..take]);
                }
                None if self.buf.len() + take > self.max => {
                    let mut scan = Scanner::default();
                    scan.push(&self.buf);
                    scan.push(&available[..take]);
                    self.discarding = Some(Discarding {
                        len: self.buf.len() + take,
                        scan,
                    });
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(&available[..take]),
            }
            self.inner.consume(consumed);
            if newline.is_some() {
                if let Some(d) = self.discarding.take() {
                    return Ok(Some(d.frame()));
                }
                return Ok(Some(Frame::Line(finish(std::mem::take(&mut self.buf)))));
            }
        }
    }
}

impl<R: tokio::io::AsyncRead> LineReader<tokio::io::BufReader<R>> {
    /// Whether a complete line is buffered, so that [`next`](Self::next)
    /// returns without waiting for input.
    pub(crate) fn line_buffered(&self) -> bool {
        self.inner.buffer().contains(&b'\n')
    }
}

fn finish(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize, cap: usize) -> Vec<Frame> {
        let reader = tokio::io::BufReader::with_capacity(cap, input);
        let mut lines = LineReader::new(reader, max);
        let mut out = Vec::new();
        while let Some(f) = lines.next().await.unwrap() {
            out.push(f);
        }
        out
    }

    #[tokio::test]
    async fn splits_bounds_and_recovers() {
        for cap in [1, 3, 8, 1024] {
            let got = frames(b"ab\r\n0123456789\n\nxyz\nlast", 5, cap).await;
            assert_eq!(
                got,
                vec![
                    Frame::Line(b"ab".to_vec()),
                    Frame::TooLong {
                        len: 10,
                        envelope: Envelope::default()
                    },
                    Frame::Line(Vec::new()),
                    Frame::Line(b"xyz".to_vec()),
                    Frame::Line(b"last".to_vec()),
                ],
                "buffer capacity {cap}"
            );
        }
        assert_eq!(
            frames(b"toolongline", 4, 2).await,
            vec![Frame::TooLong {
                len: 11,
                envelope: Envelope::default()
            }]
        );
    }

    /// An oversize line's id is read as it goes by, wherever it is in the
    /// line, whatever the buffer's size; the lines around it are whole.
    #[tokio::test]
    async fn an_oversize_lines_envelope_is_read_while_it_is_skipped() {
        let input =
            b"{\"id\":1}\n{\"result\":{\"pad\":\"xxxxxxxxxxxxxxxx\"},\"id\":\"a\"}\n{\"id\":2}\n";
        for cap in [1, 3, 8, 1024] {
            let got = frames(input, 20, cap).await;
            assert_eq!(
                got,
                vec![
                    Frame::Line(b"{\"id\":1}".to_vec()),
                    Frame::TooLong {
                        len: 46,
                        envelope: Envelope {
                            id: Id::Found("a".into()),
                            method: false
                        }
                    },
                    Frame::Line(b"{\"id\":2}".to_vec()),
                ],
                "buffer capacity {cap}"
            );
        }
    }
}
