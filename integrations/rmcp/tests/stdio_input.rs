//! What an rmcp server served through `Cancellable::serve` does with the
//! notifications rmcp's own loop and line reader mishandle: a cancel before
//! the lifecycle is chosen (rmcp would end the connection) and a cancel it
//! cannot decode (rmcp would answer it).

use std::time::Duration;

use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::ServerHandler;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tower_mcp_cancel_rmcp::{Cancellable, CheckedInput};

#[derive(Clone)]
struct Empty;

impl ServerHandler for Empty {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

struct Peer {
    input: DuplexStream,
    output: Lines<BufReader<DuplexStream>>,
}

impl Peer {
    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    async fn send_line(&mut self, line: &str) {
        self.input
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The next line the server writes; `None` once its output ended.
    async fn next(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(Duration::from_secs(10), self.output.next_line())
            .await
            .expect("the server neither answered nor ended its output")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap())
    }
}

/// `Cancellable::new(Empty)` served over pipes, its input read through
/// `CheckedInput` when `checked`.
fn serve(checked: bool) -> Peer {
    let (input, server_r) = tokio::io::duplex(64 * 1024);
    let (server_w, output) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let server = Cancellable::new(Empty);
        let running = if checked {
            server.serve((CheckedInput::new(server_r), server_w)).await
        } else {
            server.serve((server_r, server_w)).await
        };
        if let Ok(running) = running {
            let _ = running.waiting().await;
        }
    });
    Peer {
        input,
        output: BufReader::new(output).lines(),
    }
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

#[tokio::test]
async fn a_cancel_before_the_lifecycle_is_chosen_does_not_end_the_connection() {
    for checked in [false, true] {
        let mut peer = serve(checked);
        peer.send(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}))
            .await;
        assert_eq!(peer.next().await.unwrap()["id"], json!(1));
        // The client gave up on its discover call before the answer came.
        peer.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}))
            .await;
        peer.send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta()}}),
        )
        .await;
        let answer = peer
            .next()
            .await
            .expect("the connection ended at the cancel");
        assert_eq!(answer["id"], json!(2), "{answer}");
        assert!(answer["result"]["tools"].is_array(), "{answer}");
        // After the lifecycle: a cancel for an unknown id is ignored too.
        peer.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}}))
            .await;
        peer.send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": meta()}}),
        )
        .await;
        assert_eq!(peer.next().await.unwrap()["id"], json!(3));
    }
}

#[tokio::test]
async fn a_cancel_rmcp_cannot_decode_is_ignored_not_answered_when_the_input_is_checked() {
    for checked in [false, true] {
        let mut peer = serve(checked);
        peer.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        )
        .await;
        assert_eq!(peer.next().await.unwrap()["id"], json!(0));
        peer.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        // The same malformed cancel, plainly written and with JSON's
        // escapes in its method's name.
        for (n, line) in [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications\/cancelled","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","\u006dethod":"notifications\u002Fcancelled","params":[1,2]}"#,
        ]
        .into_iter()
        .enumerate()
        {
            peer.send_line(line).await;
            peer.send(json!({"jsonrpc": "2.0", "id": n, "method": "ping"}))
                .await;
            let first = peer.next().await.unwrap();
            if checked {
                assert_eq!(
                    first["id"],
                    json!(n),
                    "only the ping is answered: {line} {first}"
                );
            } else {
                // rmcp's own reader answers the notification (pinned: when
                // this fails, rmcp stopped doing it and CheckedInput can go).
                assert_eq!(first["error"]["code"], json!(-32600), "{line} {first}");
                assert_eq!(peer.next().await.unwrap()["id"], json!(n));
            }
        }
    }
}
