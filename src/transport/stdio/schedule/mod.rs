//! When the stdio server's work runs and its answers are written: the
//! heuristics that spare tasks, thread hand-offs and writes on a pipelined
//! load, each constant named once here with the figure of BENCHMARKS.md
//! that set it.
//!
//! * [`HandlerLoad`]: the reader polls each new request once itself
//!   (unless [`StdioServer::first_poll_on_reader`] is off) and, from how
//!   long such polls take, decides when to stop (handlers that compute run
//!   in parallel in their own tasks) and tells the writer whether answers
//!   are coming one after another.
//! * [`Batch`]: the answers of requests that ended at that first poll,
//!   queued to the writer together.
//! * [`Hold`], [`hold_for_more`]: the writer holds an answer for a few
//!   more, for at most [`HOLD_MAX`], while handlers compute briefly.
//! * [`ReaderTurn`], [`give_way`]: the reader, reading on, gives the writer
//!   its turn once something has waited [`HOLD_MAX`] in its queue.
//!
//! [`StdioServer::first_poll_on_reader`]: super::StdioServer::first_poll_on_reader

use std::time::Duration;

mod batch;
mod first_poll;
mod hold;
mod reader_turn;

pub(crate) use batch::Batch;
pub(crate) use first_poll::{HandlerLoad, Running};
pub(crate) use hold::{hold_for_more, Hold};
pub(crate) use reader_turn::{give_way, ReaderTurn};

/// A first poll on the reader longer than this marks handlers that compute
/// before their first `.await`: the next [`BACK_OFF`] requests get their
/// own tasks at once, to run in parallel.
// Figure 3: above the echo stack's first poll (a few µs), below `spin`'s 50 µs.
pub(crate) const SLOW_FIRST_POLL: Duration = Duration::from_micros(20);

/// Requests spawned without a first poll on the reader after a slow one.
// Figure 3: one window of the benchmark's 64 requests in flight.
pub(crate) const BACK_OFF: u32 = 64;

/// Spawned requests running from which, while handlers compute briefly,
/// more answers are taken to be on their way (the writer may hold one).
// Figure 3 `spin` (two workers, window 64): holding from 4 running took 2.1 to 6.4 requests per write.
pub(crate) const BACKLOG: usize = 4;

/// Handlers whose first poll computes longer than this are answered at
/// once: holding an answer for the next would cost up to a handler's run.
// Figure 3 `spin`: its 50 µs handlers are well within it; longer ones gain little from sharing a write.
pub(crate) const SHORT_FIRST_POLL: Duration = Duration::from_millis(1);

/// The most messages one hold gathers.
// Figure 3 `spin`: four of its answers come within HOLD_MAX on two workers.
pub(crate) const HOLD_MESSAGES: usize = 4;

/// The longest an answer waits, held by the writer for company or queued
/// while the reader reads on: a tenth of [`SHORT_FIRST_POLL`], so holding
/// costs a briefly computing handler's answer at most a tenth of its run.
// Figure 3 `spin`: 50 µs handlers on two workers, four answers within it.
pub(crate) const HOLD_MAX: Duration = Duration::from_micros(100);

/// The most answers one [`Batch`] queues as one message.
// Figure 3 (echo): one window of 64 requests in flight shares a write.
pub(crate) const BATCH_MAX_ANSWERS: usize = 64;

/// The most bytes one [`Batch`] gathers before it is queued.
// Figure 3 (echo): 64 answers of the benchmark's size fit, with room to spare.
pub(crate) const BATCH_MAX_BYTES: usize = 64 * 1024;
