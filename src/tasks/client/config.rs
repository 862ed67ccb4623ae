//! What every service of one [`TaskCallLayer`](super::TaskCallLayer) shares: its settings.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio_util::task::TaskTracker;

/// Answers a task's input requests: given the new outstanding requests (by
/// key), resolves to the answers to send with `tasks/update`.
pub(super) type InputHandler =
    Arc<dyn Fn(Map<String, Value>) -> BoxFuture<'static, Map<String, Value>> + Send + Sync>;

/// The settings of a [`TaskCallLayer`](super::TaskCallLayer).
#[derive(Clone)]
pub(super) struct Config {
    pub(super) min_poll: Duration,
    pub(super) max_poll: Duration,
    pub(super) cancel_timeout: Duration,
    pub(super) retries: u32,
    pub(super) input: Option<InputHandler>,
    /// The background `tasks/cancel`s, for [`TaskCallLayer::cancels_sent`](super::TaskCallLayer::cancels_sent).
    pub(super) cancels: TaskTracker,
}

impl Config {
    /// The wait between polls for a task that suggests `suggested` ms:
    /// within the bounds; the upper one without a suggestion.
    pub(super) fn interval(&self, suggested: Option<u64>) -> Duration {
        // The bounds are ordered (`poll_bounds`): `clamp` cannot panic.
        suggested
            .map_or(self.max_poll, Duration::from_millis)
            .clamp(self.min_poll, self.max_poll)
    }
}
