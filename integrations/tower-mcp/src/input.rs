//! A server's input with the notifications tower-mcp would answer taken
//! out ([`CheckedInput`]).

use serde_json::Value;
use tower_mcp::inspection::{McpDirection, McpInspector, MCP_INSPECTION_PROFILES};
use tower_mcp_cancel::transport::stdio::{process_streams, ProcessStdin, ProcessStdout};
use tower_mcp_cancel::transport::{id_member, IdMember, LineCheck, LineFilter};

/// The check of [`CheckedInput`]: a line passes unless it is a
/// notification tower-mcp's inspection rejects.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct NotificationCheck;

impl LineCheck for NotificationCheck {
    const LEFT_OUT: &'static str =
        "a notification tower-mcp would answer: ignored rather than answered";

    /// All but a notification tower-mcp would answer. Only the top level of
    /// an object is read, and only up to an `id` member: a request (its
    /// `id` among its first members, as clients write it) passes after a
    /// few bytes, and nothing but an object without `id` is parsed whole
    /// and inspected.
    fn passes(&mut self, json: &[u8]) -> bool {
        // The white space tower-mcp trims (`str::trim`: Unicode's, vertical
        // tab included); the decision is `rejected`'s, this only skips it
        // where it cannot reject: a line that does not start with `{` once
        // trimmed is not an object, and an object whose members include
        // `id` is not a notification.
        let blank = |b: &u8| b.is_ascii() && char::from(*b).is_whitespace();
        let start = match json.iter().position(|b| !blank(b)) {
            Some(i) => &json[i..],
            None => return true,
        };
        let judged = match start.first() {
            Some(b'{') => id_member(start) != IdMember::Present,
            // Unicode white space (or not) before the first character.
            Some(&b) => b >= 0x80,
            None => false,
        };
        !(judged && rejected(json))
    }
}

/// A reader of newline-delimited JSON-RPC for a tower-mcp stdio server
/// that leaves out each notification tower-mcp would answer with an error.
///
/// tower-mcp 0.25's stdio transport, once given a layer
/// (`StdioTransport::layer`, which every user of [`RouterLayer`] calls),
/// inspects each message before it tells notifications from requests, and
/// answers a notification that fails the inspection (a
/// `notifications/cancelled` without its `requestId`, or whose `params` are
/// an array) with a `-32602` error with a null id: JSON-RPC answers no
/// notification, and the cancellation page has a server ignore a cancel it
/// cannot use.
///
/// This reader leaves out each line that is a JSON object without an `id`
/// member which tower-mcp's own inspection
/// (`tower_mcp::inspection::McpInspector`, for a message from the client)
/// rejects under the revision the message declares in its `_meta`, or,
/// declaring none, under every revision tower-mcp knows: a notification
/// tower-mcp accepts under any revision it may have negotiated is never
/// lost. Everything else passes through unchanged, byte for byte, for
/// tower-mcp to answer or not as it does: requests (a malformed one is
/// answered with its id), responses, batches, lines that are not JSON, and
/// any line longer than 1 MiB. It is the middleware's [`LineFilter`] with
/// that rule, and holds what it holds (at most one line, up to 1 MiB, and
/// one read of the inner reader, 8 KiB). `CheckedInput::new(reader)` wraps
/// a server's input (a pipe, a socket, stdin).
///
/// A notification that declares a revision tower-mcp knows but the server
/// does not enable is passed on (the reader cannot see the server's
/// configuration): tower-mcp answers it.
///
/// ```no_run
/// # use tower_mcp::{McpRouter, StdioTransport};
/// # use tower_mcp_cancel_tower_mcp::{CheckedInput, RouterLayer};
/// # async fn serve(router: McpRouter) -> Result<(), Box<dyn std::error::Error>> {
/// // A server whose client connects over TCP rather than stdio.
/// let socket = tokio::net::TcpStream::connect("127.0.0.1:9000").await?;
/// let (input, output) = tokio::io::split(socket);
/// StdioTransport::new(router)
///     .layer(RouterLayer::new())
///     .run_with_streams(CheckedInput::new(input), output)
///     .await?;
/// # Ok(())
/// # }
/// ```
///
/// [`RouterLayer`]: crate::RouterLayer
pub type CheckedInput<R> = LineFilter<R, NotificationCheck>;

/// This process's stdin and stdout, the input read through
/// [`CheckedInput`]: hand them to `StdioTransport::run_with_streams` in
/// place of `run()`.
///
/// They are the middleware's [`process_streams`]: pipes and Unix sockets
/// (what an MCP host gives its server) are read and written through the
/// runtime's reactor (as tower-mcp's `run()` does with Linux pipes), not
/// on tokio's blocking thread pool (no thread hand-off per read and
/// per write, and a pending read does not hold the runtime's shutdown);
/// call it within the runtime.
///
/// [`process_streams`]: tower_mcp_cancel::transport::stdio::process_streams
///
/// ```no_run
/// # use tower_mcp::{McpRouter, StdioTransport};
/// # use tower_mcp_cancel_tower_mcp::RouterLayer;
/// # async fn serve(router: McpRouter) -> Result<(), tower_mcp::Error> {
/// let (input, output) = tower_mcp_cancel_tower_mcp::stdio();
/// StdioTransport::new(router)
///     .layer(RouterLayer::new())
///     .run_with_streams(input, output)
///     .await
/// # }
/// ```
pub fn stdio() -> (CheckedInput<ProcessStdin>, ProcessStdout) {
    let (stdin, stdout) = process_streams();
    (CheckedInput::new(stdin), stdout)
}

/// Whether `json` is an object without `id` that tower-mcp's inspection of
/// a client's message rejects: under the revision it declares (as
/// tower-mcp picks it), else under every revision tower-mcp knows.
fn rejected(json: &[u8]) -> bool {
    // Read as tower-mcp reads a line; what it cannot read is its to answer.
    let Ok(text) = std::str::from_utf8(json) else {
        return false;
    };
    let Ok(value) = serde_json::from_str::<Value>(text.trim()) else {
        return false;
    };
    if !value.is_object() || value.get("id").is_some() {
        return false;
    }
    let inspect = |revision: &str| {
        // An unknown revision: tower-mcp refuses the message as well.
        McpInspector::new(revision).is_ok_and(|inspector| {
            inspector
                .inspect(&value, Some(McpDirection::ClientToServer))
                .is_ok()
        })
    };
    match value
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
    {
        Some(declared) => !inspect(declared),
        None => !MCP_INSPECTION_PROFILES.iter().any(|r| inspect(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn passes(line: &[u8]) -> bool {
        NotificationCheck.passes(line)
    }

    fn line(v: &Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn cancel(params: Value) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
    }

    #[test]
    fn a_cancel_tower_mcp_accepts_passes() {
        for params in [
            json!({"requestId": 1}),
            json!({"requestId": "call", "reason": "the user's"}),
            json!({"requestId": 1, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        ] {
            assert!(passes(&line(&cancel(params.clone()))), "{params}");
        }
    }

    #[test]
    fn a_cancel_tower_mcp_rejects_is_left_out() {
        for params in [
            json!({}),
            json!([1, 2]),
            json!({"requestId": null}),
            json!({"requestId": 1, "_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}}),
        ] {
            let message = cancel(params);
            assert!(!passes(&line(&message)), "{message}");
            // With white space around it, Unicode's too (a vertical tab is
            // white space to tower-mcp's `trim`, not to JSON): the same.
            for spaced in [
                format!("\u{a0} {message} "),
                format!("\u{b}{message}"),
                format!("\u{c}\u{b} {message}\u{b}"),
            ] {
                assert!(!passes(spaced.as_bytes()), "{spaced:?}");
            }
            // And with JSON's escapes in its names and method.
            let escaped = line(&message)
                .iter()
                .map(|&b| char::from(b))
                .collect::<String>()
                .replace("method", "\\u006dethod")
                .replace('/', "\\/");
            assert!(!passes(escaped.as_bytes()), "{escaped}");
        }
        for message in [
            json!({"jsonrpc": "1.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
            json!({"method": "notifications/cancelled", "params": {"requestId": 1}}),
            json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": 7}),
            // A server's notification, from the client.
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}),
            json!({"jsonrpc": "2.0", "method": 5}),
            json!({"jsonrpc": "2.0"}),
        ] {
            assert!(!passes(&line(&message)), "{message}");
        }
    }

    #[test]
    fn an_unknown_notification_passes_as_tower_mcp_accepts_it() {
        // tower-mcp's inspection classifies an unknown method as an
        // extension and accepts it, whatever its params' members.
        for message in [
            json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"a": [1]}}),
            json!({"jsonrpc": "2.0", "method": "vendor/ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": [1, 2]}),
        ] {
            assert!(McpInspector::new("2026-07-28")
                .unwrap()
                .inspect(&message, Some(McpDirection::ClientToServer))
                .is_ok());
            assert!(passes(&line(&message)), "{message}");
        }
        // But not params JSON-RPC itself refuses.
        let scalar = json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": 7});
        assert!(!passes(&line(&scalar)));
    }

    #[test]
    fn requests_responses_batches_and_other_lines_pass_unjudged() {
        for text in [
            // A malformed request is tower-mcp's to answer, with its id.
            r#"{"jsonrpc":"2.0","id":3,"method":"notifications/cancelled","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1]}"#,
            r#"{"id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // The rest of an object with an id is not read.
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"#,
            r#"[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}]"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}} trailing"#,
            "not json",
            "",
            "\u{a0}",
        ] {
            assert!(passes(text.as_bytes()), "{text}");
        }
        assert!(passes(b"\xff{\"method\":5}"));
    }
}
