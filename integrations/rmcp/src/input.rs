//! A server's input with the notifications rmcp would answer taken out
//! ([`CheckedInput`]).

use std::borrow::Cow;

use ::rmcp::service::RxJsonRpcMessage;
use ::rmcp::RoleServer;
use serde::de::IgnoredAny;
use serde_json::Value;
use tower_mcp_cancel::transport::stdio::{process_streams, ProcessStdin, ProcessStdout};
use tower_mcp_cancel::transport::{LineCheck, LineFilter};

/// This process's stdin and stdout, the input read through
/// [`CheckedInput`]: serve them with
/// [`Cancellable::serve`](crate::Cancellable::serve) in place of
/// `rmcp::transport::stdio()`.
///
/// They are the middleware's [`process_streams`]: pipes and Unix sockets
/// (what an MCP host gives its server) are read and written through the
/// runtime's reactor, not on tokio's blocking thread pool as
/// `rmcp::transport::stdio()`'s are (no thread hand-off per read and per
/// write, and a pending read does not hold the runtime's shutdown); call
/// it within the runtime.
///
/// [`process_streams`]: tower_mcp_cancel::transport::stdio::process_streams
pub fn stdio() -> (CheckedInput<ProcessStdin>, ProcessStdout) {
    let (stdin, stdout) = process_streams();
    (CheckedInput::new(stdin), stdout)
}

/// A reader of newline-delimited JSON-RPC for an rmcp server that leaves
/// out each notification rmcp would answer with an error.
///
/// rmcp's line transport answers a line it cannot decode with a `-32600`
/// error without an id, a notification included (a `notifications/cancelled`
/// whose `params` are not an object): JSON-RPC answers no notification, and
/// the cancellation page has a server ignore a cancel it cannot use. This
/// reader leaves out each notification (a JSON object without `id`) that
/// rmcp cannot decode ([`NotificationCheck`]); every other line, and any
/// line longer than 1 MiB, passes through unchanged, byte for byte. It is
/// the middleware's [`LineFilter`] with that check, and holds what that
/// holds (at most one line, up to 1 MiB, and one read of the inner reader,
/// 8 KiB). `CheckedInput::new(reader)` wraps a server's input (a pipe, a
/// socket, stdin).
pub type CheckedInput<R> = LineFilter<R, NotificationCheck>;

/// The check of [`CheckedInput`]: a line passes unless it is a
/// notification rmcp cannot decode.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct NotificationCheck;

impl LineCheck for NotificationCheck {
    const LEFT_OUT: &'static str =
        "a notification rmcp cannot decode: ignored rather than answered";

    /// All but a notification rmcp cannot decode (one rmcp would skip
    /// unanswered, such as a method it does not know, is left out just the
    /// same).
    ///
    /// A line that does not name a `notifications/` method passes unread, and
    /// so does a message with an id: requests and responses are rmcp's to
    /// judge (a request it cannot decode is answered with its id). A
    /// notification of the plain shape (`"jsonrpc": "2.0"`, a method, `params`
    /// an object or none), which rmcp decodes (an unknown one as a custom
    /// notification), passes after one light read; only another shape is
    /// decoded as rmcp would, and left out if that fails.
    fn passes(&mut self, json: &[u8]) -> bool {
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
        if memchr::memmem::find(json, b"notifications/").is_none() {
            return true;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: &str) -> String {
        let mut out = Vec::new();
        CheckedInput::new(input.as_bytes())
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
        // How lines that span reads are put together is LineFilter's (its
        // tests read the same way 1 to 1 MiB at a time).
        assert_eq!(through(&input).await, expected);
    }
}
