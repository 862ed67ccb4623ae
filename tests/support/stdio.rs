//! Shared helpers of the stdio integration tests: a raw JSON-lines peer over
//! an in-memory pipe. Handlers record their events (started, dropped,
//! token) with `test_util::Recorder`, so tests order on them instead of
//! sleeping.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

/// The far end of a stdio connection, speaking raw JSON lines.
pub struct Peer {
    pub w: WriteHalf<DuplexStream>,
    pub r: Lines<BufReader<ReadHalf<DuplexStream>>>,
}

/// An in-memory connection: the peer, and the other end's reader and writer.
pub fn pipe(buf: usize) -> (Peer, ReadHalf<DuplexStream>, WriteHalf<DuplexStream>) {
    let (a, b) = tokio::io::duplex(buf);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    (
        Peer {
            w: aw,
            r: BufReader::new(ar).lines(),
        },
        br,
        bw,
    )
}

/// A guard against hangs: far longer than any test needs, also under a
/// paused clock (which jumps to it only when nothing else can run).
pub const BOUND: Duration = Duration::from_secs(3600);

impl Peer {
    pub async fn send(&mut self, v: Value) {
        self.send_raw(v.to_string().as_bytes()).await;
    }

    pub async fn send_raw(&mut self, line: &[u8]) {
        self.w.write_all(line).await.unwrap();
        self.w.write_all(b"\n").await.unwrap();
        self.w.flush().await.unwrap();
    }

    /// The next line, parsed; `None` at end of stream.
    pub async fn recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(BOUND, self.r.next_line())
            .await
            .expect("peer waited too long for a line")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Lines up to and including the response with `id`.
    pub async fn until_response(&mut self, id: Value) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let v = self.recv().await.expect("stream ended before the response");
            let done = v.get("id") == Some(&id) && v.get("method").is_none();
            seen.push(v);
            if done {
                return seen;
            }
        }
    }

    /// Sends a `ping` with `id` and returns every line up to its response:
    /// the writer is one ordered queue, so whatever the server queued before
    /// it has been written by then.
    pub async fn sync(&mut self, id: Value) -> Vec<Value> {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .await;
        self.until_response(id).await
    }

    pub async fn cancel(&mut self, id: Value, reason: &str) {
        self.send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason}
        }))
        .await;
    }

    pub async fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// Closes the peer's writing side (the other end sees EOF) and returns
    /// every line until the other end closed its output.
    pub async fn close(mut self) -> Vec<Value> {
        self.w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        while let Some(v) = self.recv().await {
            rest.push(v);
        }
        rest
    }
}

/// Whether a message mentions `id` as its id, cancelled request id, or the
/// progress token `tok`.
pub fn mentions(v: &Value, id: &Value) -> bool {
    v.get("id") == Some(id)
        || v["params"].get("requestId") == Some(id)
        || v["params"]["_meta"].get("io.modelcontextprotocol/subscriptionId") == Some(id)
}

pub use tower_mcp_cancel::test_util::settle;
