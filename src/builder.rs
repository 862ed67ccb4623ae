//! [`ServiceBuilderExt`]: fluent stacking of this crate's layers.

use std::time::Duration;

use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::cancel::CancelOnDisconnectLayer;
use crate::progress::ProgressResetLayer;
use crate::timeout::TimeoutLayer;

/// Adds this crate's layers to a [`tower::ServiceBuilder`].
///
/// ```
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder};
/// use tower_mcp_cancel::{McpRequest, ServiceBuilderExt};
///
/// let svc = ServiceBuilder::new()
///     .cancel_on_disconnect()
///     .mcp_timeout(Duration::from_secs(60))
///     // idle 10 s, hard maximum 10 min
///     .progress_reset(Duration::from_secs(10), Duration::from_secs(600))
///     .service(service_fn(|_: McpRequest| async { Ok::<_, tower_mcp_cancel::BoxError>(serde_json::json!({})) }));
/// # let _ = svc;
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed {
    /// Adds a [`TimeoutLayer`] with `default` for every method.
    fn mcp_timeout(self, default: Duration) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a configured [`TimeoutLayer`].
    fn mcp_timeout_layer(self, layer: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a [`ProgressResetLayer`] with idle limit `idle`, restarted by
    /// progress, and hard maximum `max`, which nothing extends. Pass
    /// `Duration::MAX` as `max` to leave the cap to a [`TimeoutLayer`]
    /// outside (its per-method deadlines then hold as configured).
    fn progress_reset(
        self,
        idle: Duration,
        max: Duration,
    ) -> ServiceBuilder<Stack<ProgressResetLayer, L>>;
    /// Adds a configured [`ProgressResetLayer`].
    fn progress_reset_layer(
        self,
        layer: ProgressResetLayer,
    ) -> ServiceBuilder<Stack<ProgressResetLayer, L>>;
    /// Adds a [`CancelOnDisconnectLayer`].
    fn cancel_on_disconnect(self) -> ServiceBuilder<Stack<CancelOnDisconnectLayer, L>>;
}

mod sealed {
    pub trait Sealed {}
    impl<L> Sealed for tower::ServiceBuilder<L> {}
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn mcp_timeout(self, default: Duration) -> ServiceBuilder<Stack<TimeoutLayer, L>> {
        self.layer(TimeoutLayer::new(default))
    }
    fn mcp_timeout_layer(self, layer: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>> {
        self.layer(layer)
    }
    fn progress_reset(
        self,
        idle: Duration,
        max: Duration,
    ) -> ServiceBuilder<Stack<ProgressResetLayer, L>> {
        self.layer(ProgressResetLayer::new(idle).max(max))
    }
    fn progress_reset_layer(
        self,
        layer: ProgressResetLayer,
    ) -> ServiceBuilder<Stack<ProgressResetLayer, L>> {
        self.layer(layer)
    }
    fn cancel_on_disconnect(self) -> ServiceBuilder<Stack<CancelOnDisconnectLayer, L>> {
        self.layer(CancelOnDisconnectLayer::new())
    }
}
