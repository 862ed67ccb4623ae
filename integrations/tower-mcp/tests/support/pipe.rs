//! The client's end of a stdio server over an in-memory pipe: lines out,
//! lines in, each wait bounded.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

/// How long a test waits for a line before it calls the server silent (a
/// paused clock jumps there once nothing else can run).
pub(crate) const BOUND: Duration = Duration::from_secs(60);

/// One end of a duplex pipe whose other end a server reads and writes.
pub(crate) struct Pipe {
    w: WriteHalf<DuplexStream>,
    r: Lines<BufReader<ReadHalf<DuplexStream>>>,
}

impl Pipe {
    /// A pipe whose other end is the returned stream, for the server.
    pub(crate) fn new() -> (Pipe, DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let (r, w) = tokio::io::split(ours);
        let pipe = Pipe {
            w,
            r: BufReader::new(r).lines(),
        };
        (pipe, theirs)
    }

    /// The 2025 handshake: `initialize`, then `notifications/initialized`.
    pub(crate) async fn handshake(&mut self) {
        let init = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        });
        self.send(&[
            json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": init}),
        ])
        .await;
        self.until_response("init").await;
        self.send(&[json!({"jsonrpc": "2.0", "method": "notifications/initialized"})])
            .await;
    }

    /// Writes `messages` as lines, in one write.
    pub(crate) async fn send(&mut self, messages: &[Value]) {
        let text: String = messages.iter().map(|m| format!("{m}\n")).collect();
        self.w.write_all(text.as_bytes()).await.unwrap();
        self.w.flush().await.unwrap();
    }

    /// Every line up to and including the response with `id`.
    pub(crate) async fn until_response(&mut self, id: &str) -> Vec<Value> {
        self.answered(id)
            .await
            .unwrap_or_else(|| panic!("no response for {id}"))
    }

    /// Every line up to and including the response with `id`; `None` if
    /// the server writes nothing for [`BOUND`].
    pub(crate) async fn answered(&mut self, id: &str) -> Option<Vec<Value>> {
        let mut seen = Vec::new();
        loop {
            let line = tokio::time::timeout(BOUND, self.r.next_line())
                .await
                .ok()?
                .unwrap()
                .expect("the server closed its output");
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = v["id"] == id && v.get("method").is_none();
            seen.push(v);
            if done {
                return Some(seen);
            }
        }
    }
}
