//! [`ProgressLimits`] and the layer's policy over them: what `ProgressResetLayer`
//! enforces, per request and per method.

use std::time::Duration;

/// The two limits of [`ProgressResetLayer`](super::ProgressResetLayer); also a per-request override the
/// caller can put in the request's extensions. A duration past what an
/// `Instant` can hold (`Duration::MAX`) means no such limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgressLimits {
    /// How long the request may go without (increasing) progress.
    pub idle: Duration,
    /// The hard maximum from `call`, which progress does not extend.
    /// `None` disables it (the spec says implementations SHOULD keep one).
    pub max: Option<Duration>,
}

impl ProgressLimits {
    /// No limit at all (an exempt request).
    pub(super) const NONE: ProgressLimits = ProgressLimits {
        idle: Duration::MAX,
        max: None,
    };

    /// The tighter of two: the shorter idle limit and the shorter maximum
    /// (no maximum being the longest).
    pub(super) fn tighter(a: Self, b: Self) -> Self {
        ProgressLimits {
            idle: a.idle.min(b.idle),
            max: match (a.max, b.max) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            },
        }
    }
}
