//! [`ProgressResetLayer`]: an idle limit that progress restarts, and a hard
//! maximum that nothing extends.
//!
//! The layer gives each request a [`ProgressTap`]
//! ([`RequestView::set_progress_tap`](crate::RequestView::set_progress_tap)). Whoever sees
//! progress for the request records it there: a client transport receiving
//! `notifications/progress`, or a server handler reporting its own progress.
//! Only a value strictly greater than the last one counts (the spec says
//! progress MUST increase); repeats and decreases are ignored and logged at
//! debug level, so a peer cannot keep a request alive by repeating itself.
//!
//! A request without a progress token is given one, unique among the
//! requests of that layer, so that a client transport can route progress to
//! it without the caller having to ask.
//!
//! The tap shares the request's allocation with its
//! [`Cancellation`](crate::Cancellation); a request that has none is given
//! one, so that the handler's token fires when a limit does. The layer runs one timer for the idle limit, the
//! maximum, and a [`TimeoutLayer`](crate::TimeoutLayer) deadline above it
//! (see [`timeout`](crate::timeout#one-timer-per-request)). Progress does
//! not wake the layer: the idle deadline only moves later, so the timer is
//! re-armed when it fires before it.
//!
//! A layer inside another leaves the request the outer layer's tap: the
//! progress recorded there restarts the idle limit of both, and each
//! enforces its own limits.
//!
//! Which limits a request gets follows a `MethodPolicy<ProgressLimits>` —
//! the same [`MethodPolicy`](crate::MethodPolicy) type as [`TimeoutLayer`](crate::TimeoutLayer)'s,
//! with the same rules: [`ProgressLimits`] in the request's extensions, else
//! for a `tools/call` its tool's entry ([`ProgressResetLayer::tool`]), else
//! the method's entry, else the default. `subscriptions/listen` is exempt
//! by default (a listen stream is quiet by design: it still gets its tap,
//! but no timer); a method only claimed by an unchecked `Mcp-Method` header
//! can tighten the limits, never loosen or lift them. `Duration::MAX` means
//! no such limit.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_mcp_cancel::{McpRequest, ProgressResetLayer, ProgressTap};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let mut svc = ServiceBuilder::new()
//!     .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(60)))
//!     .service(service_fn(|req: McpRequest| async move {
//!         let tap: ProgressTap = req.progress_tap().unwrap().clone();
//!         // 5 s of work, reporting progress every 500 ms: never idle for 1 s.
//!         for step in 1..=10 {
//!             tokio::time::sleep(Duration::from_millis(500)).await;
//!             tap.record(step as f64, Some(10.0), None);
//!         }
//!         Ok::<_, tower::BoxError>(serde_json::json!({"done": true}))
//!     }));
//! let res = svc.ready().await.unwrap().call(McpRequest::new(1, "tools/call")).await.unwrap();
//! assert_eq!(res["done"], true);
//! # }
//! ```

pub mod future;
mod layer;
mod limits;

pub use layer::{ProgressReset, ProgressResetLayer};
pub use limits::ProgressLimits;
// Defined with the per-request state the tap is a handle to, below `request`.
pub use crate::state::{Progress, ProgressObserver, ProgressTap};
