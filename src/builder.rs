//! [`ServiceBuilderExt`]: fluent stacking of this crate's layers.

use std::time::Duration;

use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::{CancelOnDisconnectLayer, ProgressResetLayer, TimeoutLayer};

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
///     .progress_reset(Duration::from_secs(10))
///     .service(service_fn(|_: McpRequest| async { Ok::<_, tower_mcp_cancel::BoxError>(serde_json::json!({})) }));
/// # let _ = svc;
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed {
    /// Adds a [`TimeoutLayer`] with `default` for every method.
    fn mcp_timeout(self, default: Duration) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a configured [`TimeoutLayer`].
    fn mcp_timeout_layer(self, layer: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a [`ProgressResetLayer`] with idle limit `idle` (hard maximum 10 × idle).
    fn progress_reset(self, idle: Duration) -> ServiceBuilder<Stack<ProgressResetLayer, L>>;
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
    fn progress_reset(self, idle: Duration) -> ServiceBuilder<Stack<ProgressResetLayer, L>> {
        self.layer(ProgressResetLayer::new(idle))
    }
    fn cancel_on_disconnect(self) -> ServiceBuilder<Stack<CancelOnDisconnectLayer, L>> {
        self.layer(CancelOnDisconnectLayer::new())
    }
}
