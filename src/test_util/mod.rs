//! Helpers for testing your own handlers and stacks (feature `test-util`).
//!
//! * [`DropProbe`]: hands out [`DropGuard`]s you move into futures; the
//!   probe tells whether and when (on tokio's clock, so paused time works)
//!   one was dropped, and whether before being marked finished.
//! * [`Recorder`]: a handler's life (started, token fired, dropped, done) as
//!   [`Event`]s on a channel ([`Events`]), so a test orders on what happened
//!   instead of sleeping; [`Recorder::start`] hands out the handler's
//!   [`DropGuard`].
//! * [`mock_stack`]: a layer stack over a [`tower_test::mock`] service, for
//!   driving a stack under `tokio::time::pause()`.
//! * [`settle`]: lets spawned tasks and woken futures run, without sleeping.
//!
//! ```
//! use std::time::Duration;
//! use tower::{Service, ServiceExt};
//! use tower_mcp_cancel::{test_util::{mock_stack, DropProbe}, McpRequest, TimeoutLayer};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let (mut svc, mut handle) = mock_stack::<McpRequest, serde_json::Value, _>(TimeoutLayer::new(Duration::from_secs(1)));
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

use tower::{Layer, ServiceBuilder};
use tower_test::mock;

mod probe;
mod recorder;

pub use probe::{DropGuard, DropProbe};
pub use recorder::{Event, Events, Recorder};

/// `layer` over a [`tower_test::mock`] service taking requests `R` (an
/// [`McpRequest`](crate::McpRequest), an `http::Request`, ...) and answering
/// with `T`; the handle receives each request and answers it (or not).
pub fn mock_stack<R, T, L>(layer: L) -> (L::Service, mock::Handle<R, T>)
where
    L: Layer<mock::Mock<R, T>>,
{
    let (service, handle) = mock::pair::<R, T>();
    (ServiceBuilder::new().layer(layer).service(service), handle)
}

/// Yields to the scheduler until spawned tasks and woken futures have run
/// (200 rounds), without advancing time.
pub async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}
