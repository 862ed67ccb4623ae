//! For authors of transports and of adapters to other MCP SDKs: the pieces
//! of this crate's own transports and integrations that an adapter outside
//! the crate needs to behave the same way. Applications do not need this
//! module.
//!
//! This crate's SDK integrations are separate packages built only on this
//! module and the crate's public API:
//!
//! * `tower-mcp-cancel-rmcp`: an rmcp `ServerHandler` under this crate's
//!   layers (stdio and rmcp's `StreamableHttpService`), and rmcp's client as
//!   a tower service;
//! * `tower-mcp-cancel-tower-mcp`: tower-mcp's `McpRouter` under the same
//!   layers, as a layer for tower-mcp's transports.
//!
//! Each item is public for one reason, given in its docs; nothing here is
//! needed to use the layers or the transports.

mod progress;

pub use self::progress::{ProgressRegistry, Registration};

/// Runs an SDK's call under this crate's layers while `cause` waits for the
/// SDK's own cancel signal (its token, a transport's): the reason `cause`
/// gives cancels `cancellation` (a no-op when a layer cancelled first), and
/// the [`CancelOnDisconnectLayer`](crate::CancelOnDisconnectLayer) inside
/// `call` then drops the handler and ends `call` with
/// [`Cancelled`](crate::Cancelled). `call` is polled first, so an answer
/// that is ready wins over a cancel that arrives with it.
///
/// Public because an SDK that signals cancellation by a token of its own
/// (rmcp's `ct`, tower-mcp's `CancellationToken`) needs exactly this bridge
/// to turn that signal into a drop of the handler's future.
pub async fn run_cancellable<F, C>(
    call: F,
    cause: C,
    cancellation: &crate::Cancellation,
) -> F::Output
where
    F: std::future::Future,
    C: std::future::Future<Output = crate::CancelReason>,
{
    use std::future::Future;
    use std::task::Poll;
    let forward = async {
        cancellation.cancel(cause.await);
        // Parked for good: `call` ends now, with `Cancelled`.
        std::future::pending::<()>().await
    };
    tokio::pin!(call, forward);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = call.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        let _ = forward.as_mut().poll(cx);
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::{CancelReason, Cancellation};

    fn sdk_cancelled() -> CancelReason {
        CancelReason::Other(Cow::Borrowed("the SDK cancelled"))
    }

    #[tokio::test]
    async fn the_sdks_signal_cancels_the_cancellation_with_its_reason() {
        let cancellation = Cancellation::new();
        let token = cancellation.token();
        // Stands in for the layer inside `call`: it ends when the token fires.
        let call = async move {
            token.cancelled().await;
            "ended by the cancel"
        };
        let (fire, fired) = tokio::sync::oneshot::channel::<()>();
        let cause = async move {
            let _ = fired.await;
            sdk_cancelled()
        };
        fire.send(()).unwrap();
        let out = run_cancellable(call, cause, &cancellation).await;
        assert_eq!(out, "ended by the cancel");
        assert_eq!(cancellation.reason(), Some(&sdk_cancelled()));
    }

    #[tokio::test]
    async fn a_ready_answer_wins_over_a_cancel_that_arrives_with_it() {
        let cancellation = Cancellation::new();
        let out = run_cancellable(async { 7 }, async { sdk_cancelled() }, &cancellation).await;
        assert_eq!(out, 7);
        assert!(
            !cancellation.is_cancelled(),
            "the cause was not even polled"
        );
    }
}
