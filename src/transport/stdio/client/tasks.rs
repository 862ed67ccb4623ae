//! The stdio client's two tasks: the writer (cancellations and
//! notifications first, never blocked; requests from a bounded queue, each
//! skipped when its call was dropped before it was written) and the reader
//! (responses to their pending calls, progress to its route, a server's
//! cancellation of a `subscriptions/listen`).

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use super::{Shared, Waiter};
use crate::error::BoxError;
use crate::jsonrpc::{self, Message, RawNotification, RawResponse, RequestId};
use crate::timeout::{WireBudget, WireRequest};
use crate::transport::call::client::route_progress;
use crate::transport::stdio::framing::{write_line, Envelope, Frame, Id, LineReader, MAX_ID_BYTES};
use crate::Cancelled;

pub(super) enum Control {
    /// A notification line (a cancellation, or one the caller sends):
    /// written before any request queued after it, never blocked.
    Line(Vec<u8>),
    Close,
}

pub(super) const QUEUED: u8 = 0;
pub(super) const WRITTEN: u8 = 1;
pub(super) const ABANDONED: u8 = 2;

pub(super) struct Queued {
    pub(super) line: Line,
    pub(super) state: Arc<AtomicU8>,
}

/// A request's line: its bytes, or, when it carries a budget, the request,
/// encoded when the writer takes it — a call that waited for room in the
/// queue, or in it, never tells the server more time than is left.
pub(super) enum Line {
    Ready(Vec<u8>),
    Budgeted(WireRequest),
}

impl Line {
    /// The line of request `id`, encoded once here, so that a request that
    /// cannot be encoded fails its call (the writer's encoding cannot fail
    /// then); with a budget, encoded again when written.
    pub(super) fn of(
        id: RequestId,
        method: &str,
        params: Option<Box<RawValue>>,
        budget: Option<WireBudget>,
    ) -> Result<Self, serde_json::Error> {
        let budgeted = budget.is_some();
        let request = WireRequest::new(id, method, params, budget);
        let bytes = request.encode()?;
        Ok(if budgeted {
            Self::Budgeted(request)
        } else {
            Self::Ready(bytes)
        })
    }

    fn bytes(self) -> Option<Vec<u8>> {
        match self {
            Self::Ready(bytes) => Some(bytes),
            Self::Budgeted(request) => match request.encode() {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    tracing::warn!(error = %e, "request not written: it no longer encodes");
                    None
                }
            },
        }
    }
}

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut requests: mpsc::Receiver<Queued>,
    mut ctl: mpsc::UnboundedReceiver<Control>,
) {
    let mut w = BufWriter::new(writer);
    let res: io::Result<()> = async {
        loop {
            tokio::select! {
                biased;
                c = ctl.recv() => match c {
                    Some(Control::Line(line)) => write_line(&mut w, &line).await?,
                    Some(Control::Close) | None => break,
                },
                r = requests.recv() => match r {
                    Some(q) => {
                        if q.state.compare_exchange(QUEUED, WRITTEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                            if let Some(bytes) = q.line.bytes() {
                                write_line(&mut w, &bytes).await?;
                            }
                        }
                    }
                    None => break,
                },
            }
            if ctl.is_empty() && requests.is_empty() {
                w.flush().await?;
            }
        }
        // Cancellations are never lost: write what is left of them.
        while let Ok(c) = ctl.try_recv() {
            if let Control::Line(line) = c {
                write_line(&mut w, &line).await?;
            }
        }
        w.flush().await?;
        w.shutdown().await
    }
    .await;
    if let Err(e) = res {
        tracing::debug!(error = %e, "stdio client writer stopped");
    }
}

pub(super) async fn read_loop<R: tokio::io::AsyncBufRead + Unpin>(
    mut lines: LineReader<R>,
    shared: Arc<Shared>,
) {
    let why = loop {
        match lines.next().await {
            Ok(Some(Frame::Line(line))) => on_message(&shared, &line),
            Ok(Some(Frame::TooLong { len, envelope })) => {
                on_too_long(&shared, len, lines.max(), envelope);
            }
            Ok(None) => break "server closed its output".to_owned(),
            Err(e) => break format!("read error: {e}"),
        }
    };
    shared.close(&why);
}

fn on_message(shared: &Shared, line: &[u8]) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match Message::decode(line) {
        Ok(Message::Response(r)) => on_response(shared, r),
        Ok(Message::Notification(n)) if n.method == jsonrpc::PROGRESS => {
            route_progress(n.params.as_deref(), |t| shared.lock().pending.tap(t));
        }
        Ok(Message::Notification(n)) if n.method == jsonrpc::CANCELLED => on_cancelled(shared, &n),
        Ok(Message::Notification(n)) => match &shared.sink {
            Some(sink) => sink(n.method.as_str(), n.params.as_deref()),
            None => tracing::debug!(method = ?n.method, "server notification ignored"),
        },
        Ok(Message::Request(r)) => {
            tracing::warn!(request_id = %r.id, method = ?r.method, "request from the server ignored (stdio servers send none)");
        }
        Err(e) => tracing::warn!(error = %e, "malformed line from the server ignored"),
    }
}

/// A response: to its pending call; a late one frees its reserved id.
fn on_response(shared: &Shared, r: RawResponse) {
    let Some(id) = r.id else {
        match r.outcome {
            Err(e) => {
                tracing::warn!(code = e.code, message = %crate::sanitize::for_log(&e.message), "server reported an error about a message it could not read")
            }
            Ok(_) => tracing::debug!("result without id ignored"),
        }
        return;
    };
    match answered(shared, &id) {
        Some(p) => {
            let _ = p.tx.send(Ok(r.outcome));
        }
        None => {
            if let Ok(result) = &r.outcome {
                cancel_orphan_task(shared, &id, result);
            }
        }
    }
}

/// A late answer that created a task (the tasks extension's
/// `CreateTaskResult`) for a call given up before it came: nobody will
/// poll that task, and the server learned of the cancel only after it
/// answered. The task is the client's from the moment its bytes arrive:
/// `tasks/cancel` it, under an id kept reserved until its own answer
/// (ignored) comes.
fn cancel_orphan_task(shared: &Shared, call: &RequestId, result: &serde_json::value::RawValue) {
    #[derive(serde::Deserialize)]
    struct Created<'a> {
        #[serde(rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "taskId", borrow)]
        task_id: Option<std::borrow::Cow<'a, str>>,
    }
    let Ok(created) = serde_json::from_str::<Created<'_>>(result.get()) else {
        return;
    };
    let (Some("task"), Some(task)) = (created.result_type.as_deref(), created.task_id) else {
        return;
    };
    let id = {
        let mut st = shared.lock();
        let id = shared
            .outbound
            .next_id(|id| st.pending.contains(id) || st.reserved.contains(id));
        st.reserved.reserve(id.clone());
        id
    };
    let params = serde_json::json!({
        "taskId": task,
        "_meta": {
            jsonrpc::PROTOCOL_VERSION_META: crate::protocol::PROTOCOL_VERSION,
            jsonrpc::CLIENT_CAPABILITIES_META: {
                "extensions": {crate::protocol::TASKS_EXTENSION: {}}
            }
        }
    });
    let Ok(params) = serde_json::value::to_raw_value(&params) else {
        return;
    };
    let Ok(line) = jsonrpc::encode_request(&id, "tasks/cancel", Some(&params)) else {
        return;
    };
    tracing::debug!(request_id = %call, task_id = %crate::sanitize::for_log(&task), "a task created for a call given up: sending tasks/cancel");
    let _ = shared.ctl.send(Control::Line(line));
}

/// The call an answer with `id` ends, if one is in flight; a late answer to
/// a cancelled one frees its reserved id.
fn answered(shared: &Shared, id: &RequestId) -> Option<Waiter> {
    let (p, late) = {
        let mut st = shared.lock();
        match st.pending.take(id) {
            Some(p) => (Some(p), false),
            // The late answer came: the id is free again.
            None => (None, st.reserved.release(id)),
        }
    };
    if p.is_none() {
        match late {
            true => {
                tracing::debug!(request_id = %id, "late response to a cancelled request ignored")
            }
            false => tracing::debug!(request_id = %id, "response for no request in flight ignored"),
        }
    }
    p
}

/// A line over the limit, skipped: the call it answered, told by the id read
/// from it as it went by, fails with an error naming the limit (the rule is
/// on [`StdioClient`](super::StdioClient)).
fn on_too_long(shared: &Shared, len: usize, max: usize, envelope: Envelope) {
    let ids = match envelope.id {
        _ if envelope.method => {
            tracing::warn!(
                len,
                max,
                "oversize message from the server skipped (not a response)"
            );
            return;
        }
        Id::Found(id) => vec![id],
        // Not to be told apart within the bound: every call with an id that
        // long (normally none).
        Id::Overlong => shared
            .lock()
            .pending
            .ids()
            .filter(|id| encoded_len(id) > MAX_ID_BYTES)
            .cloned()
            .collect(),
        Id::Absent => Vec::new(),
    };
    let mut ended = 0;
    for id in ids {
        if let Some(p) = answered(shared, &id) {
            let _ = p.tx.send(Err(too_large(&id, len, max)));
            ended += 1;
        }
    }
    match ended {
        0 => tracing::warn!(
            len,
            max,
            in_flight = shared.lock().pending.len(),
            "oversize line from the server skipped; its id could not be read or is not in flight, so it ends no call (those in flight end by their deadlines)"
        ),
        _ => tracing::warn!(
            len,
            max,
            calls = ended,
            "answer over the line limit skipped; its call fails"
        ),
    }
}

/// The length of `id` as JSON text.
fn encoded_len(id: &RequestId) -> usize {
    serde_json::to_vec(id).map_or(0, |v| v.len())
}

/// The error of a call whose answer was over the line limit.
fn too_large(id: &RequestId, len: usize, max: usize) -> BoxError {
    Box::new(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the answer to request {id} is {len} bytes, over the stdio client's line limit of {max} bytes (StdioClientBuilder::max_line_bytes); it was skipped"
        ),
    ))
}

/// The server's `notifications/cancelled`: ends a `subscriptions/listen`
/// (the one request the spec lets a server cancel), and nothing else.
fn on_cancelled(shared: &Shared, n: &RawNotification) {
    let Some((id, reason)) = n.cancel_request() else {
        return;
    };
    let taken = {
        let mut st = shared.lock();
        match st.pending.get(&id).map(|p| p.listen) {
            Some(true) => Ok(st.pending.take(&id)),
            Some(false) => Err(()),
            None => Ok(None),
        }
    };
    match taken {
        Ok(Some(p)) => {
            tracing::debug!(request_id = %id, %reason, "server ended the request (subscription torn down)");
            let _ = p.tx.send(Err(Box::new(Cancelled::new(reason))));
        }
        Err(()) => {
            tracing::warn!(request_id = %id, %reason, "server sent notifications/cancelled for a request that is not a subscriptions/listen; ignored (the call goes on)");
        }
        Ok(None) => {
            tracing::debug!(request_id = %id, "notifications/cancelled for no request in flight ignored")
        }
    }
}
