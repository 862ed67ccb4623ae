//! A server over in-memory pipes whose output passes through a relay that
//! records every line before the client reads it.

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::task::JoinHandle;

/// The client's ends of the pipes, and what the server wrote.
pub(crate) struct Relayed {
    /// What the client reads: the server's lines, relayed.
    pub(crate) client_r: DuplexStream,
    /// What the client writes: the server's input.
    pub(crate) client_w: DuplexStream,
    /// Every line the server wrote, in order.
    pub(crate) written: Arc<Mutex<Vec<Value>>>,
}

/// Spawns `serve(input, output)` and the relay between its output and the
/// client; the relay's task ends when the server's output or the client's
/// input closes.
pub(crate) fn relayed<F, Fut>(serve: F) -> (Relayed, JoinHandle<()>)
where
    F: FnOnce(DuplexStream, DuplexStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (client_w, server_r) = tokio::io::duplex(64 * 1024);
    let (server_w, relay_r) = tokio::io::duplex(64 * 1024);
    let (mut relay_w, client_r) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve(server_r, server_w));
    let written = Arc::new(Mutex::new(Vec::new()));
    let log = written.clone();
    let relay = tokio::spawn(async move {
        let mut lines = BufReader::new(relay_r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            log.lock()
                .unwrap()
                .push(serde_json::from_str(&line).unwrap());
            if relay_w
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let pipes = Relayed {
        client_r,
        client_w,
        written,
    };
    (pipes, relay)
}
