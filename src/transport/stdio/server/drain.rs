//! The drain: what the server does between a shutdown (or the end of
//! input) and its end, when a [`drain_grace`](super::StdioServer::drain_grace)
//! is set.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{flatten, Connection, End};
use crate::jsonrpc;
use crate::transport::call::server::McpService;
use crate::transport::stdio::framing::{Frame, LineReader};
use crate::transport::stdio::schedule::ReaderTurn;
use crate::CancelReason;

/// How a drain goes: its grace, what ends it early (a shutdown after the
/// end of input), whether the input is still read.
pub(super) struct DrainPlan<'a> {
    pub(super) grace: Duration,
    pub(super) stop: Option<&'a CancellationToken>,
    pub(super) reading: bool,
}

/// What the drain loop saw.
enum DrainStep {
    Writer(io::Result<()>),
    GraceOver,
    TaskEnded,
    Frame(io::Result<Option<Frame>>),
}

impl Connection {
    /// The drain: listen streams get their graceful result, the others may
    /// finish within `grace`; meanwhile (when `reading`) the input is read
    /// on, new requests refused. Returns the end of the writer, if it ended.
    pub(super) async fn drain<S, R>(
        &self,
        plan: DrainPlan<'_>,
        lines: &mut LineReader<R>,
        service: &mut S,
        tasks: &mut JoinSet<()>,
        writer_task: &mut tokio::task::JoinHandle<io::Result<()>>,
    ) -> Option<End>
    where
        S: McpService,
        R: tokio::io::AsyncBufRead + Unpin,
    {
        let DrainPlan {
            grace,
            stop,
            mut reading,
        } = plan;
        self.draining.store(true, Ordering::Release);
        let mut turn = ReaderTurn::default();
        let listens = self
            .in_flight
            .cancel_method(jsonrpc::SUBSCRIPTIONS_LISTEN, CancelReason::Shutdown);
        tracing::info!(
            in_flight = self.in_flight.len(),
            listen_streams_ended = listens,
            grace_ms = grace.as_millis() as u64,
            "stdio server draining: requests in flight may finish within the grace"
        );
        let over = tokio::time::sleep(grace);
        tokio::pin!(over);
        let stop = async {
            match stop {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stop);
        loop {
            while tasks.try_join_next().is_some() {}
            if tasks.is_empty() {
                return None;
            }
            let step = tokio::select! {
                biased;
                res = &mut *writer_task => DrainStep::Writer(flatten(res)),
                () = &mut over => DrainStep::GraceOver,
                () = &mut stop => DrainStep::GraceOver,
                Some(_) = tasks.join_next() => DrainStep::TaskEnded,
                frame = lines.next(), if reading => DrainStep::Frame(frame),
            };
            match step {
                DrainStep::Writer(res) => return Some(End::Writer(res)),
                DrainStep::GraceOver => return None,
                DrainStep::TaskEnded => {}
                DrainStep::Frame(Ok(Some(Frame::Line(line)))) => {
                    self.on_line(&line, service, tasks).await;
                    // No read-ahead to wait for: the batch goes at once.
                    self.after_line(&mut turn, false).await;
                }
                // Answered as before the drain: its call must end too.
                DrainStep::Frame(Ok(Some(Frame::TooLong { len, envelope }))) => {
                    self.on_too_long(len, &envelope, lines.max()).await;
                }
                DrainStep::Frame(Ok(None) | Err(_)) => reading = false,
            }
        }
    }
}
