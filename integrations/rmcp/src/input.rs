//! A server's input with the notifications rmcp would answer taken out
//! ([`CheckedInput`]).

use ::rmcp::service::RxJsonRpcMessage;
use ::rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use ::rmcp::RoleServer;
use serde_json::error::Category;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;
use tower_mcp_cancel::transport::stdio::{process_streams, ProcessStdin, ProcessStdout};
use tower_mcp_cancel::transport::{id_member, IdMember, LineCheck, LineFilter};

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
/// rmcp's line transport answers a line it reads as JSON but cannot decode
/// as a message with a `-32600` error without an id, a notification
/// included (a `notifications/cancelled` whose `params` are not an object):
/// JSON-RPC answers no notification, and the cancellation page has a server
/// ignore a cancel it cannot use. This reader leaves out each line whose
/// JSON value is an object without an `id` member and which rmcp would
/// answer so ([`NotificationCheck`]), whatever the spelling (escapes, white
/// space, member order, duplicate members: the verdict is rmcp's own
/// decoder's). Every other line, and any line longer than 1 MiB, passes
/// through unchanged, byte for byte. It is the middleware's [`LineFilter`]
/// with that check, and holds what that holds (at most one line, up to
/// 1 MiB, and one read of the inner reader, 8 KiB).
/// `CheckedInput::new(reader)` wraps a server's input (a pipe, a socket,
/// stdin).
pub type CheckedInput<R> = LineFilter<R, NotificationCheck>;

/// The check of [`CheckedInput`]: a line passes unless it is an object
/// without `id` that rmcp would answer with an error.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct NotificationCheck;

impl LineCheck for NotificationCheck {
    const LEFT_OUT: &'static str = "a notification rmcp would answer: ignored rather than answered";

    /// All but a line rmcp's reader would answer with an error (its decoder
    /// fails on the line with a data error, not a syntax one) whose value
    /// is an object without a member named `id`.
    ///
    /// The verdict is rmcp's: the line is decoded with rmcp's public line
    /// codec (`rmcp::transport::async_rw::JsonRpcMessageCodec`, which
    /// parses a line with the same function as rmcp's reader, compatibility
    /// rules included). Only the members of the object are read first, up
    /// to an `id`: a message with an `id` (a request or a response, its
    /// `id` among its first members as peers write it) passes after a few
    /// bytes, undecoded, as the decision is the same for it whatever rmcp
    /// makes of it. Requests rmcp cannot decode are rmcp's to answer;
    /// arrays, other values and lines that are not JSON pass as well (rmcp
    /// ignores what is not JSON).
    fn passes(&mut self, json: &[u8]) -> bool {
        // The filter took one byte-order mark off, as rmcp's reader does; a
        // second one is not JSON to rmcp (which would take it off too).
        if json.starts_with(UTF8_BOM) {
            return true;
        }
        match id_member(json) {
            IdMember::Absent => !answered(json),
            _ => true,
        }
    }
}

/// A UTF-8 byte-order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether rmcp's reader, given `line` (without its line ending and
/// byte-order mark), would answer it with an error.
fn answered(line: &[u8]) -> bool {
    let mut buf = BytesMut::with_capacity(line.len() + 1);
    buf.extend_from_slice(line);
    buf.extend_from_slice(b"\n");
    let mut codec = JsonRpcMessageCodec::<RxJsonRpcMessage<RoleServer>>::default();
    match codec.decode(&mut buf) {
        // rmcp's reader answers a data error (JSON, but not a message it
        // decodes) and ignores a syntax error (not JSON).
        Err(JsonRpcMessageCodecError::Serde(e)) => {
            matches!(e.classify(), Category::Data | Category::Io)
        }
        // Decoded, or skipped as rmcp skips a notification it does not know.
        Ok(_) => false,
        // Nothing else comes of a whole line; rmcp would not answer it.
        Err(_) => false,
    }
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

    /// The same malformed cancel (its `params` an array) and the same good
    /// one, spelled as JSON allows: each spelling of the first is left out,
    /// each of the second passes.
    #[test]
    fn every_spelling_of_a_notification_gets_the_same_verdict() {
        let spellings = [
            // Escaped solidus, as some JSON writers put it.
            r#"{"jsonrpc":"2.0","method":"notifications\/cancelled","params":PARAMS}"#,
            r#"{"jsonrpc":"2.0","method":"notifications\u002fcancelled","params":PARAMS}"#,
            r#"{"jsonrpc":"2\u002e0","\u006dethod":"notifications/cancelled","params":PARAMS}"#,
            r#" { "params" : PARAMS ,	"method" : "notifications/cancelled" , "jsonrpc" : "2.0" } "#,
            // An `id` not at the top level does not make it a request.
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":PARAMS,"x":{"id":1}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":PARAMS}\r",
        ];
        for spelling in spellings {
            let bad = spelling.replace("PARAMS", "[1,2]");
            let good = spelling.replace("PARAMS", r#"{"requestId":1}"#);
            let line = |text: &str| {
                let text = text.strip_prefix('\u{feff}').unwrap_or(text);
                NotificationCheck.passes(text.strip_suffix('\r').unwrap_or(text).as_bytes())
            };
            assert!(!line(&bad), "{bad}");
            assert!(line(&good), "{good}");
        }
        // rmcp refuses a member named twice (serde's derived decoding), and
        // answers the line: left out, however well-formed the rest.
        let twice = r#"{"jsonrpc":"2.0","method":"ping","method":"notifications/cancelled","params":{"requestId":1}}"#;
        assert!(!NotificationCheck.passes(twice.as_bytes()));
        // With an `id` member, however spelled, it is a request: rmcp's.
        for request in [
            r#"{"jsonrpc":"2.0","\u0069d":3,"method":"notifications/cancelled","params":[1]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1],"id":3}"#,
            r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"notifications\/cancelled","params":[1]}"#,
        ] {
            assert!(NotificationCheck.passes(request.as_bytes()), "{request}");
        }
    }

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
