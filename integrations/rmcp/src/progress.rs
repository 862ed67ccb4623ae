//! Progress the rmcp handler reports, checked and fed to its request's
//! [`ProgressTap`].
//!
//! A handler reports progress with `context.peer.notify_progress(..)`; the
//! `Peer` hands the notification to rmcp's serve loop, which writes it to
//! the transport. Nothing on the way is open to a wrapper except the
//! transport, so [`ObserveProgress`] wraps it and asks the progress
//! registry about each outgoing `notifications/progress`: every request
//! with a progress token is registered there (with its tap, under a
//! [`ProgressResetLayer`](tower_mcp_cancel::ProgressResetLayer)) for as long as its
//! handler runs, and a notification for no request in flight, or whose
//! value does not increase, is not written.
//!
//! On the way in it drops the notifications rmcp would end the connection
//! on before the lifecycle is chosen (see [`Lifecycle`]).

use std::future::Future;

use futures_util::future::Either;

use ::rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage, ServerNotification};
use ::rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use ::rmcp::transport::Transport;
use ::rmcp::RoleServer;

use tower_mcp_cancel::integration::ProgressRegistry;

use crate::lifecycle::Lifecycle;

/// An rmcp server transport that feeds the progress notifications the
/// handler sends to the requests' progress limits, and holds back a
/// notification that comes before the connection's lifecycle is chosen (a
/// 2026-era client's cancel of its dropped `server/discover`), which
/// rmcp's server would end the connection on. Made by
/// [`Cancellable::serve`](super::Cancellable::serve) and
/// [`Cancellable::observe`](super::Cancellable::observe).
pub struct ObserveProgress<T> {
    inner: T,
    registry: ProgressRegistry,
    lifecycle: Lifecycle,
}

impl<T> ObserveProgress<T> {
    pub(super) fn new(inner: T, registry: ProgressRegistry, lifecycle: Lifecycle) -> Self {
        Self {
            inner,
            registry,
            lifecycle,
        }
    }

    /// Whether `message` may be written: anything but a progress
    /// notification the registry refuses.
    fn admit(&self, message: &ServerJsonRpcMessage) -> bool {
        if let JsonRpcMessage::Notification(n) = message {
            if let ServerNotification::ProgressNotification(p) = &n.notification {
                let p = &p.params;
                let token = super::request::convert(&p.progress_token.0);
                return self
                    .registry
                    .admit(&token, p.progress, p.total, p.message.as_deref());
            }
        }
        true
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ObserveProgress<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserveProgress")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for ObserveProgress<T> {
    type Error = T::Error;

    fn name() -> std::borrow::Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Decided when the handler hands it over: the serve loop has taken
        // it, whatever the write's fate. One refused is reported sent, as a
        // write to a peer that then drops it would be.
        if self.admit(&item) {
            Either::Left(self.inner.send(item))
        } else {
            Either::Right(std::future::ready(Ok(())))
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let message = self.inner.receive().await?;
            if self.lifecycle.admit(&message) {
                return Some(message);
            }
            tracing::debug!(
                ?message,
                "notification before the lifecycle was chosen: dropped (rmcp would end the connection on it)"
            );
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
