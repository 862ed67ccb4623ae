//! The drain of the Streamable HTTP adapter: when its shutdown token fires,
//! new requests are refused with `503`, a `subscriptions/listen` stream is
//! ended at once (its graceful result), and any other request in flight may
//! go on for the [drain grace](super::StreamableHttpService::drain_grace)
//! before it is cancelled with [`CancelReason::Shutdown`](crate::CancelReason::Shutdown).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::config::Config;

/// Whether the shutdown token fired: a new request then gets `503`.
pub(crate) fn shutting_down(config: &Config) -> bool {
    config.shutdown.as_ref().is_some_and(|t| t.is_cancelled())
}

/// Ready when one request must be cancelled for the shutdown: when the
/// token fires for a listen stream (or without a grace), a grace later for
/// any other request.
///
/// It takes the token only when first polled: cloning a
/// `CancellationToken`, waiting on it and dropping the wait each lock the
/// token's node, which every request of the server shares — the worker
/// threads contended for that lock on every request, also for the calls
/// (most) that end in their first poll and never needed the wait.
pub(crate) struct ShutdownSignal {
    state: State,
    grace: Duration,
}

enum State {
    /// Not waited on yet: the adapter's settings, whose token it is.
    Idle(Arc<Config>),
    Running(Pin<Box<WaitForCancellationFutureOwned>>),
    Grace(Pin<Box<Sleep>>),
    Fired,
}

impl ShutdownSignal {
    /// The signal of a request under `config`'s shutdown token; `None`
    /// without one.
    pub(crate) fn new(config: &Arc<Config>, is_listen: bool) -> Option<Self> {
        config.shutdown.as_ref()?;
        Some(Self {
            grace: if is_listen {
                Duration::ZERO
            } else {
                config.drain_grace
            },
            state: State::Idle(Arc::clone(config)),
        })
    }

    /// `Ready` once, when the request must be cancelled.
    pub(crate) fn poll_fire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.state {
                State::Idle(config) => {
                    let Some(token) = config.shutdown.clone() else {
                        self.state = State::Fired;
                        return Poll::Pending;
                    };
                    self.state = State::Running(Box::pin(token.cancelled_owned()));
                }
                State::Running(token) => {
                    std::task::ready!(token.as_mut().poll(cx));
                    if self.grace.is_zero() {
                        self.state = State::Fired;
                        return Poll::Ready(());
                    }
                    self.state = State::Grace(Box::pin(tokio::time::sleep(self.grace)));
                }
                State::Grace(sleep) => {
                    std::task::ready!(sleep.as_mut().poll(cx));
                    self.state = State::Fired;
                    return Poll::Ready(());
                }
                State::Fired => return Poll::Pending,
            }
        }
    }
}
