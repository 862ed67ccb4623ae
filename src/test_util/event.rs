//! [`Event`]: what happened to a recorded handler — what a
//! [`Recorder`](super::Recorder) reports and the [`DropGuard`](super::DropGuard)s
//! it hands out send. A module of its own, which both use, so that the
//! probe and the recorder do not import each other.

use crate::jsonrpc::RequestId;
use crate::CancelReason;

/// What happened to a recorded handler.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handler started ([`Recorder::start`](super::Recorder::start),
    /// [`Recorder::start_as`](super::Recorder::start_as)).
    Started(RequestId),
    /// The request's cancellation token fired, with the reason it carried
    /// then (seen by the task [`Recorder::watch_token`](super::Recorder::watch_token) spawned;
    /// `None` from [`Recorder::watch_token_as`](super::Recorder::watch_token_as), whose token
    /// carries none).
    Token(RequestId, Option<CancelReason>),
    /// The handler's [`DropGuard`](super::DropGuard) was dropped before
    /// [`DropGuard::finish`](super::DropGuard::finish): its future was
    /// dropped.
    Dropped(RequestId),
    /// The handler finished ([`DropGuard::finish`](super::DropGuard::finish), then dropped).
    Done(RequestId),
    /// An event of the test's own ([`Recorder::note`](super::Recorder::note)), e.g. a connection
    /// that ended.
    Note(&'static str),
}
