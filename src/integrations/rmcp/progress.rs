//! Progress the rmcp handler reports, fed to its request's [`ProgressTap`].
//!
//! A handler reports progress with `context.peer.notify_progress(..)`; the
//! `Peer` hands the notification to rmcp's serve loop, which writes it to
//! the transport. Nothing on the way is open to a wrapper except the
//! transport, so [`ObserveProgress`] wraps it and records each outgoing
//! `notifications/progress` in the progress registry, where every
//! request under a [`ProgressResetLayer`](crate::ProgressResetLayer) has its
//! tap registered by its token for as long as its handler runs.

use std::future::Future;

use ::rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage, ServerNotification};
use ::rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use ::rmcp::transport::Transport;
use ::rmcp::RoleServer;

use crate::integrations::progress::ProgressRegistry;

/// An rmcp server transport that feeds the progress notifications the
/// handler sends to the requests' progress limits. Made by
/// [`Cancellable::serve`](super::Cancellable::serve) and
/// [`Cancellable::observe`](super::Cancellable::observe).
pub struct ObserveProgress<T> {
    inner: T,
    registry: ProgressRegistry,
}

impl<T> ObserveProgress<T> {
    pub(super) fn new(inner: T, registry: ProgressRegistry) -> Self {
        Self { inner, registry }
    }

    fn observe(&self, message: &ServerJsonRpcMessage) {
        if let JsonRpcMessage::Notification(n) = message {
            if let ServerNotification::ProgressNotification(p) = &n.notification {
                let p = &p.params;
                let token = super::request::convert(&p.progress_token.0);
                self.registry
                    .record(&token, p.progress, p.total, p.message.as_deref());
            }
        }
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
        // Recorded when the handler hands it over: the serve loop has taken
        // it, whatever the write's fate.
        self.observe(&item);
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
