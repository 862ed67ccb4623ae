//! The drain of the Streamable HTTP adapter: when its shutdown token fires,
//! new requests are refused with `503`, a `subscriptions/listen` stream is
//! ended at once (its graceful result), and any other request in flight may
//! go on for the [drain grace](super::StreamableHttpService::drain_grace)
//! before it is cancelled with [`CancelReason::Shutdown`](crate::CancelReason::Shutdown).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::config::Config;

/// Whether the shutdown token fired: a new request then gets `503`.
pub(crate) fn shutting_down(config: &Config) -> bool {
    config.shutdown.as_ref().is_some_and(|t| t.is_cancelled())
}

/// Ready when one request must be cancelled for the shutdown: when the
/// token fires for a listen stream (or without a grace), a grace later for
/// any other request.
pub(crate) struct ShutdownSignal {
    state: State,
    grace: Duration,
}

enum State {
    Running(Pin<Box<WaitForCancellationFutureOwned>>),
    Grace(Pin<Box<Sleep>>),
    Fired,
}

impl ShutdownSignal {
    pub(crate) fn new(token: CancellationToken, grace: Duration, is_listen: bool) -> Self {
        Self {
            state: State::Running(Box::pin(token.cancelled_owned())),
            grace: if is_listen { Duration::ZERO } else { grace },
        }
    }

    /// `Ready` once, when the request must be cancelled.
    pub(crate) fn poll_fire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.state {
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
