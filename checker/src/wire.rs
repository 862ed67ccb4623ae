//! What went over a stdio connection, both ways, with the time each line
//! passed: the checker's eyes. The client keeps what a caller should see (a
//! late response is dropped); the checks need everything the server sent.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::watch;
use tokio::time::Instant;

/// Which way a line went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// From the server.
    In,
    /// To the server.
    Out,
}

/// One JSON-RPC message seen on the wire.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// When the relay passed it on.
    pub(crate) at: Instant,
    /// Its direction.
    pub(crate) dir: Dir,
    /// The message (a line that is not JSON is kept as a string).
    pub(crate) msg: Value,
}

impl Entry {
    /// The `id` of a response from the server (a message with `result` or `error`).
    pub(crate) fn response_id(&self) -> Option<&Value> {
        let is_response = self.msg.get("result").is_some() || self.msg.get("error").is_some();
        (self.dir == Dir::In && is_response).then(|| self.msg.get("id").unwrap_or(&Value::Null))
    }

    /// The method of a notification or request.
    pub(crate) fn method(&self) -> Option<&str> {
        self.msg.get("method").and_then(Value::as_str)
    }

    /// The token and value of a `notifications/progress` from the server.
    pub(crate) fn progress(&self) -> Option<(&Value, Option<f64>)> {
        if self.dir != Dir::In || self.method() != Some("notifications/progress") {
            return None;
        }
        let p = self.msg.get("params")?;
        Some((
            p.get("progressToken")?,
            p.get("progress").and_then(Value::as_f64),
        ))
    }
}

/// The shared log of a connection.
#[derive(Clone, Debug)]
pub(crate) struct Log {
    entries: Arc<Mutex<Vec<Entry>>>,
    changed: watch::Sender<usize>,
}

impl Log {
    pub(crate) fn new() -> Self {
        Self {
            entries: Arc::default(),
            changed: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, dir: Dir, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let msg = serde_json::from_str(text).unwrap_or_else(|_| Value::from(text));
        let n = {
            let mut entries = self.lock();
            entries.push(Entry {
                at: Instant::now(),
                dir,
                msg,
            });
            entries.len()
        };
        self.changed.send_replace(n);
    }

    /// A copy of every entry so far.
    pub(crate) fn snapshot(&self) -> Vec<Entry> {
        self.lock().clone()
    }

    /// The first entry matching `pred`, waiting for it until `deadline`.
    pub(crate) async fn wait_for(
        &self,
        deadline: Instant,
        mut pred: impl FnMut(&Entry) -> bool,
    ) -> Option<Entry> {
        let mut rx = self.changed.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(e) = self.lock().iter().find(|e| pred(e)) {
                return Some(e.clone());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Copies lines from `from` to `to`, logging each as going `dir`; stops
    /// at the end of `from` or when `to` fails (then `to` is dropped, which
    /// closes it). Lines are bounded: a longer one is passed on and logged
    /// as a string of its first bytes.
    pub(crate) async fn relay(
        self,
        dir: Dir,
        from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
    ) {
        let mut from = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match from.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            self.push(dir, &line);
            if to.write_all(&line).await.is_err() || to.flush().await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[tokio::test]
    async fn relays_and_logs_each_line() {
        let log = Log::new();
        let (mut client, relay_in) = tokio::io::duplex(256);
        let (relay_out, mut server) = tokio::io::duplex(256);
        let task = tokio::spawn(log.clone().relay(Dir::Out, relay_in, relay_out));
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nnot json\n")
            .await
            .unwrap();
        drop(client);
        task.await.unwrap();
        let mut passed = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut server, &mut passed)
            .await
            .unwrap();
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nnot json\n"
        );
        let entries = log.snapshot();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].method(), Some("ping"));
        assert_eq!(entries[1].msg, json!("not json"));
    }

    #[tokio::test]
    async fn classifies_responses_and_progress() {
        let log = Log::new();
        log.push(
            Dir::In,
            br#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"x"}}"#,
        );
        log.push(
            Dir::In,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":2}}"#,
        );
        log.push(Dir::Out, br#"{"jsonrpc":"2.0","id":"b","result":{}}"#);
        let e = log.snapshot();
        assert_eq!(e[0].response_id(), Some(&json!("a")));
        assert_eq!(e[1].progress(), Some((&json!("t"), Some(2.0))));
        assert_eq!(
            e[2].response_id(),
            None,
            "only the server's responses count"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_sees_later_entries_and_gives_up_at_the_deadline() {
        let log = Log::new();
        let writer = log.clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        let waiting = tokio::spawn({
            let log = log.clone();
            async move { log.wait_for(deadline, |e| e.method() == Some("x")).await }
        });
        tokio::task::yield_now().await;
        writer.push(Dir::In, br#"{"method":"x"}"#);
        assert!(waiting.await.unwrap().is_some());
        assert!(log
            .wait_for(deadline, |e| e.method() == Some("y"))
            .await
            .is_none());
    }
}
