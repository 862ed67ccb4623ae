//! Helpers for testing your own handlers and stacks (feature `test-util`).
//!
//! * [`DropProbe`]: hands out [`DropGuard`]s you move into futures; the
//!   probe tells whether and when (on tokio's clock, so paused time works)
//!   one was dropped, and whether before being marked finished;
//!   [`DropProbe::dropped`] waits for the drop.
//! * [`Recorder`]: a handler's life (started, token fired, dropped, done) as
//!   [`Event`]s on a channel ([`Events`]), so a test orders on what happened
//!   instead of sleeping; [`Recorder::start`] hands out the handler's
//!   [`DropGuard`]. Neither needs an [`McpRequest`](crate::McpRequest): a
//!   guard is a value to move into any future, and
//!   [`Recorder::start_as`] / [`Recorder::watch_token_as`] key a handler's
//!   events by an id or name of your choice (an SDK handler's request id).
//! * [`settle`]: lets spawned tasks and woken futures run, without sleeping.
//! * `FaultyStore` (with the `tasks` feature): a task store wrapper that
//!   fails, delays, hangs or holds (at a `Gate` the test opens) the store
//!   calls a test schedules, and counts them.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Layer, Service, ServiceExt};
//! use tower_mcp_cancel::{test_util::DropProbe, McpRequest, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A layer over a `tower_test` mock: the handle answers each request (or not).
//! let (mock, mut handle) = tower_test::mock::pair::<McpRequest, serde_json::Value>();
//! let mut svc = TimeoutLayer::new(Duration::from_secs(1)).layer(mock);
//! let (probe, guard) = DropProbe::new();
//! let call = tokio::spawn(async move {
//!     let _guard = guard; // dropped when the call's future is
//!     svc.ready().await.unwrap().call(McpRequest::new(1, "ping")).await
//! });
//! let (_req, _respond) = handle.next_request().await.unwrap();
//! tokio::time::advance(Duration::from_secs(2)).await;
//! assert!(call.await.unwrap().is_err());
//! assert!(probe.is_dropped());
//! # }
//! ```

mod event;
#[cfg(feature = "tasks")]
mod faulty_store;
mod probe;
mod recorder;
#[cfg(test)]
mod tests;

pub use event::Event;
#[cfg(feature = "tasks")]
#[cfg_attr(docsrs, doc(cfg(all(feature = "test-util", feature = "tasks"))))]
pub use faulty_store::{Fault, FaultyStore, Gate, Op};
pub use probe::{DropGuard, DropProbe};
pub use recorder::{Events, Recorder};

/// How long the helpers' waits ([`DropProbe::dropped`], [`Events::next`])
/// last before they panic: a guard against hangs, never a synchronisation;
/// far longer than any test needs, also under a paused clock (which jumps
/// to it only when nothing else can run).
const WAIT_BOUND: std::time::Duration = std::time::Duration::from_secs(3600);

/// Yields to the scheduler until spawned tasks and woken futures have run
/// (200 rounds), without advancing time.
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}
