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

    /// The request a `notifications/cancelled` from the server names.
    pub(crate) fn server_cancel(&self) -> Option<&Value> {
        (self.dir == Dir::In && self.method() == Some("notifications/cancelled"))
            .then(|| &self.msg["params"]["requestId"])
    }

    /// The token and value of a `notifications/progress` from the server
    /// (`None`: a value that is no number).
    pub(crate) fn progress(&self) -> Option<(&Value, Option<f64>)> {
        if self.dir != Dir::In || self.method() != Some("notifications/progress") {
            return None;
        }
        let p = self.msg.get("params")?;
        Some((
            p.get("progressToken")?,
            p.get("progress")
                .and_then(|v| crate::number::read::<f64>(v).ok()),
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
    /// at the end of `from` or when `to` fails (then `to` is shut down,
    /// which closes it). Bytes are passed on as they come; a line longer
    /// than [`MAX_LOGGED_LINE`] is passed on whole but logged as a note of
    /// its length, so that a peer cannot make the log grow without bound.
    pub(crate) async fn relay(
        self,
        dir: Dir,
        from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
    ) {
        let mut from = BufReader::new(from);
        let mut line = Vec::new();
        let mut length = 0usize;
        loop {
            let buf = match from.fill_buf().await {
                Ok([]) | Err(_) => break,
                Ok(buf) => buf,
            };
            let (n, line_end) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let room = MAX_LOGGED_LINE.saturating_sub(line.len()).min(n);
            line.extend_from_slice(&buf[..room]);
            length += n;
            // A line is logged before its end is passed on: its time is
            // then before anything the peer does in answer to it.
            if line_end {
                if length > MAX_LOGGED_LINE {
                    let note = format!("\"(a line of {length} bytes, not logged)\"");
                    self.push(dir, note.as_bytes());
                } else {
                    self.push(dir, &line);
                }
                line.clear();
                length = 0;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                break;
            }
            from.consume(n);
            if line_end && to.flush().await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    }
}

/// The longest line the log keeps (longer ones are passed on, not logged).
pub(crate) const MAX_LOGGED_LINE: usize = 4 << 20;

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

    /// A writer that notes, at each line's end, how many lines the log holds.
    struct Witness {
        log: Log,
        seen: Arc<Mutex<Vec<usize>>>,
    }

    impl AsyncWrite for Witness {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            if buf.ends_with(b"\n") {
                let n = self.log.snapshot().len();
                self.seen.lock().unwrap().push(n);
            }
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_line_is_logged_before_it_is_passed_on() {
        // Else an answer to it could be logged before it, and a response
        // to a cancel would look like one that came before the cancel.
        let log = Log::new();
        let seen = Arc::default();
        let to = Witness {
            log: log.clone(),
            seen: Arc::clone(&seen),
        };
        let from: &[u8] = b"{\"a\":1}\n{\"b\":2}\n";
        log.clone().relay(Dir::Out, from, to).await;
        assert_eq!(*seen.lock().unwrap(), [1, 2]);
    }

    #[tokio::test]
    async fn a_huge_line_is_passed_on_but_not_logged() {
        let log = Log::new();
        let (mut client, relay_in) = tokio::io::duplex(1 << 16);
        let (relay_out, mut server) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(log.clone().relay(Dir::In, relay_in, relay_out));
        let huge = vec![b'x'; MAX_LOGGED_LINE + 10];
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut server, &mut all)
                .await
                .unwrap();
            all
        });
        let tail = b"\n{\"id\":1,\"result\":{}}\n";
        client.write_all(&huge).await.unwrap();
        client.write_all(tail).await.unwrap();
        drop(client);
        task.await.unwrap();
        let passed = reader.await.unwrap();
        assert_eq!(passed.len(), huge.len() + tail.len());
        let entries = log.snapshot();
        assert_eq!(entries.len(), 2);
        assert!(entries[0].msg.as_str().unwrap().contains("not logged"));
        assert_eq!(entries[1].response_id(), Some(&json!(1)));
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

    #[test]
    fn a_progress_value_is_any_number() {
        let log = Log::new();
        for value in ["2.5", "3.0", "4e0", "\"5\""] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{value}}}}}"#
            );
            log.push(Dir::In, line.as_bytes());
        }
        let values: Vec<_> = log
            .snapshot()
            .iter()
            .map(|e| e.progress().unwrap().1)
            .collect();
        assert_eq!(values, [Some(2.5), Some(3.0), Some(4.0), None]);
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
