//! A server's input with the notifications rmcp would answer taken out
//! ([`CheckedInput`]).

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use ::rmcp::service::RxJsonRpcMessage;
use ::rmcp::RoleServer;
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// Past this many bytes without a newline, a line is passed through as it
/// comes (rmcp's reader then applies its own line limit): the filter never
/// holds more than this, whatever the peer sends.
const MAX_HELD_LINE: usize = 1 << 20;

/// How much is read from the inner reader at once.
const CHUNK: usize = 8 * 1024;

/// rmcp's `stdio()` with its input read through [`CheckedInput`]: serve it
/// with [`Cancellable::serve`](crate::Cancellable::serve) in place of
/// `rmcp::transport::stdio()`.
pub fn stdio() -> (CheckedInput<tokio::io::Stdin>, tokio::io::Stdout) {
    (CheckedInput::new(tokio::io::stdin()), tokio::io::stdout())
}

/// A reader of newline-delimited JSON-RPC for an rmcp server that leaves
/// out each notification rmcp would answer with an error.
///
/// rmcp's line transport answers a line it cannot decode with a `-32600`
/// error without an id, a notification included (a `notifications/cancelled`
/// whose `params` are not an object): JSON-RPC answers no notification, and
/// the cancellation page has a server ignore a cancel it cannot use. This
/// reader leaves out each notification (a JSON object without `id`) that
/// rmcp cannot decode; every other line, and any line longer than 1 MiB,
/// passes through unchanged, byte for byte. It holds at most one line (up
/// to 1 MiB) and one read of the inner reader (8 KiB) at a time.
#[derive(Debug)]
pub struct CheckedInput<R> {
    inner: R,
    /// The line being read, up to its newline.
    line: Vec<u8>,
    /// What is ready for the reader, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
    /// The current line grew past [`MAX_HELD_LINE`]: pass it through.
    passing: bool,
    eof: bool,
}

impl<R> CheckedInput<R> {
    /// Wraps `inner`, a server's input (a pipe, a socket, stdin).
    pub fn new(inner: R) -> Self {
        CheckedInput {
            inner,
            line: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
            passing: false,
            eof: false,
        }
    }

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
                if passes(&self.line) {
                    self.ready.extend_from_slice(&self.line);
                } else {
                    tracing::debug!(
                        line = %String::from_utf8_lossy(&self.line).trim_end(),
                        "a notification rmcp cannot decode: ignored rather than answered"
                    );
                }
                self.line.clear();
            }
        }
    }
}

/// Whether a whole line goes on to rmcp: all but a notification rmcp
/// cannot decode (one rmcp would skip unanswered, such as a method it does
/// not know, is left out just the same).
///
/// A line that does not name a `notifications/` method passes unread, and
/// so does a message with an id: requests and responses are rmcp's to
/// judge (a request it cannot decode is answered with its id). A
/// notification of the plain shape (`"jsonrpc": "2.0"`, a method, `params`
/// an object or none), which rmcp decodes (an unknown one as a custom
/// notification), passes after one light read; only another shape is
/// decoded as rmcp would, and left out if that fails.
fn passes(line: &[u8]) -> bool {
    /// The fields that decide; `params` only by its kind.
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        id: Option<IgnoredAny>,
        #[serde(borrow)]
        jsonrpc: Option<Cow<'a, str>>,
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        params: Option<Value>,
    }
    if memchr::memmem::find(line, b"notifications/").is_none() {
        return true;
    }
    let json = line.strip_suffix(b"\n").unwrap_or(line);
    let json = json.strip_suffix(b"\r").unwrap_or(json);
    let json = json.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(json);
    let notification = match serde_json::from_slice::<Shape<'_>>(json) {
        Ok(shape) if shape.id.is_some() => return true,
        Ok(shape)
            if shape.jsonrpc.as_deref() == Some("2.0")
                && shape.method.is_some()
                && shape.params.as_ref().is_none_or(Value::is_object) =>
        {
            return true
        }
        Ok(_) => true,
        // Not an object (a batch, not JSON), or a field of another type.
        Err(_) => json.trim_ascii_start().starts_with(b"{") && !has_id(json),
    };
    !notification || serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(json).is_ok()
}

/// Whether an object has an `id` member, whatever the other members hold.
fn has_id(json: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<IgnoredAny>,
    }
    // Unreadable as an object even so: not a notification rmcp could answer.
    serde_json::from_slice::<Id>(json).map_or(true, |m| m.id.is_some())
}

impl<R: AsyncRead + Unpin> AsyncRead for CheckedInput<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                if this.ready_at == this.ready.len() {
                    this.ready.clear();
                    this.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A trailing line without its newline: rmcp's to judge.
                if this.line.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.ready.append(&mut this.line);
                continue;
            }
            let mut chunk = [0u8; CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                this.take(read.filled());
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

    async fn through(input: &str, step: usize) -> String {
        let mut out = Vec::new();
        CheckedInput::new(Trickle(input.as_bytes().to_vec(), 0, step))
            .read_to_end(&mut out)
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    const KEPT: &str = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        "\r\n",
        r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
        "\n",
        "\n",
        "not json\n",
        r#"[{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1,2]}]"#,
        "\n",
        // A request that does not decode is rmcp's to answer (with its id).
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1,2]}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":4,"method":"notifications/cancelled","params":[1]}"#,
        "\n",
        // Unknown: rmcp skips it unanswered; plain, so it passes unread.
        r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{"a":[1]}}"#,
        "\n",
    );

    const DROPPED: [&str; 5] = [
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1,2]}"#,
        r#"{"jsonrpc":2,"method":"notifications/cancelled","params":{"requestId":1}}"#,
        r#"{"jsonrpc":"1.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":"x"}"#,
    ];

    #[tokio::test]
    async fn notifications_rmcp_cannot_decode_are_left_out_and_the_rest_is_unchanged() {
        let mut input = String::new();
        for (i, line) in KEPT.split_inclusive('\n').enumerate() {
            input.push_str(line);
            input.push_str(DROPPED[i % DROPPED.len()]);
            input.push('\n');
        }
        // A trailing line without its newline is passed on as it is.
        input.push_str(r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
        let expected = format!("{KEPT}{}", r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
        for step in [1, 3, 7, 64, CHUNK, 1 << 20] {
            assert_eq!(
                through(&input, step).await,
                expected,
                "read {step} at a time"
            );
        }
    }

    #[tokio::test]
    async fn a_line_over_the_held_limit_passes_through_whole_and_the_next_is_checked() {
        let long = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":"{}"}}"#,
            "x".repeat(MAX_HELD_LINE + 10)
        );
        let input = format!("{long}\n{}\n{}", DROPPED[0], r#"{"id":1}"#);
        let out = through(&input, CHUNK).await;
        assert_eq!(out, format!("{long}\n{}", r#"{"id":1}"#));
    }
}
