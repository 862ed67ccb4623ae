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

use super::Shared;
use crate::jsonrpc::{self, Message, RawNotification, RawResponse, RequestId};
use crate::timeout::{WireBudget, WireRequest};
use crate::transport::call::client::route_progress;
use crate::transport::stdio::framing::{write_line, Frame, LineReader};
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
            Ok(Some(Frame::TooLong { len })) => {
                tracing::warn!(len, "oversize line from the server skipped");
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
    let (p, late) = {
        let mut st = shared.lock();
        match st.pending.take(&id) {
            Some(p) => (Some(p), false),
            // The late answer came: the id is free again.
            None => (None, st.reserved.release(&id)),
        }
    };
    match p {
        Some(p) => {
            let _ = p.tx.send(Ok(r.outcome));
        }
        None if late => {
            tracing::debug!(request_id = %id, "late response to a cancelled request ignored");
        }
        None => {
            tracing::debug!(request_id = %id, "response for no request in flight ignored");
        }
    }
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
