//! [`TaskPolicy`]: whether a tool call becomes a task.

use std::time::Duration;

/// Whether a `tools/call` becomes a task, set per tool on the
/// [`TasksLayer`](super::TasksLayer).
///
/// A call becomes a task only when its request declared the tasks
/// extension in its `_meta` capabilities (the spec's MUST), and only once
/// it has run for the policy's [`after`](Self::after) without ending: a
/// call that ends sooner is answered as usual, so a tool that asks for
/// input first (a multi round-trip exchange) or answers at once never
/// makes a task. With `after` zero (the default) the call becomes a task
/// as soon as its handler, polled once, is not done.
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::tasks::TaskPolicy;
///
/// let search = TaskPolicy::optional().after(Duration::from_secs(2)); // promoted past 2 s
/// let export = TaskPolicy::required(); // -32021 for a client without the extension
/// # let _ = (search, export);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskPolicy {
    mode: Mode,
    after: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Never,
    Optional,
    Required,
}

impl TaskPolicy {
    /// Never a task: the call is passed through untouched (the default for
    /// a tool without a policy).
    pub const fn never() -> Self {
        Self {
            mode: Mode::Never,
            after: Duration::ZERO,
        }
    }

    /// A task when the request declared the extension; answered as a plain
    /// call otherwise.
    pub const fn optional() -> Self {
        Self {
            mode: Mode::Optional,
            after: Duration::ZERO,
        }
    }

    /// Only as a task: a request that did not declare the extension is
    /// answered `-32021` (missing required client capability) with
    /// `data.requiredCapabilities` naming it, without calling the handler.
    pub const fn required() -> Self {
        Self {
            mode: Mode::Required,
            after: Duration::ZERO,
        }
    }

    /// Becomes a task only once the call has run this long without ending
    /// (promotion): the handler runs from the start, and its future is
    /// handed to the task when the time comes, with nothing lost.
    #[must_use]
    pub const fn after(mut self, after: Duration) -> Self {
        self.after = after;
        self
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn delay(&self) -> Duration {
        self.after
    }
}

impl Default for TaskPolicy {
    fn default() -> Self {
        Self::never()
    }
}
