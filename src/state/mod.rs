//! The per-request state: what one request's handles share, in one
//! allocation.
//!
//! A request in flight carries two handles, both public: its
//! [`Cancellation`] (the cancel signal) and, under a `ProgressResetLayer`,
//! its [`ProgressTap`] (where progress is recorded). Each is one concept;
//! both point to one [`RequestState`], which also holds what the layers keep
//! per request and show nobody: the request's log labels and the one-timer
//! hand-off between `TimeoutLayer` and `ProgressResetLayer`. One allocation
//! per request, made by whoever starts the request (a transport's registry,
//! `CancelOnDisconnectLayer`, or the first timer layer).
//!
//! This module sits below the request types and the layers: it imports
//! only the wire types and the outcomes, so that `request` (whose
//! [`RequestView`](crate::RequestView) hands the two handles around) and
//! every layer can import it.

mod cancellation;
mod deadline;
mod sync;
mod tap;

pub use cancellation::Cancellation;
pub(crate) use deadline::{DeadlineHandOff, Stamp};
pub(crate) use tap::TapRequest;
pub use tap::{Progress, ProgressObserver, ProgressTap};

use self::cancellation::CancelState;
use self::sync::Arc;
use self::tap::ProgressState;
use crate::jsonrpc::{Method, RequestId};

/// One request's shared state, behind its [`Cancellation`] and its
/// [`ProgressTap`].
pub(crate) struct RequestState {
    /// The cancel state machine: what [`Cancellation`] exposes.
    cancel: CancelState,
    /// The request's id and method, for the layers' log events (read only
    /// when one is written, so the futures need not carry copies).
    label: RequestLabel,
    /// The request's progress, once a tap is made here.
    progress: ProgressState,
    /// The one-timer hand-off between the request's timer layers.
    deadlines: DeadlineHandOff,
}

/// Who a request is, for log events.
#[derive(Clone, Default)]
struct RequestLabel {
    id: Option<RequestId>,
    method: Option<Method>,
}

impl RequestState {
    #[inline]
    fn new(label: RequestLabel) -> Arc<Self> {
        Arc::new(Self {
            cancel: CancelState::new(),
            label,
            progress: ProgressState::new(),
            deadlines: DeadlineHandOff::new(),
        })
    }

    /// Starts the state of the request `id` / `method` (which the layers'
    /// log events then name), and returns its [`Cancellation`], the handle
    /// the request carries.
    #[inline]
    pub(crate) fn start(id: Option<RequestId>, method: Option<Method>) -> Cancellation {
        Cancellation::from_state(Self::new(RequestLabel { id, method }))
    }

    /// The id of the request, when it was started for one.
    pub(crate) fn request_id(&self) -> Option<&RequestId> {
        self.label.id.as_ref()
    }

    /// The method of the request, when it was started for one.
    pub(crate) fn method(&self) -> Option<&Method> {
        self.label.method.as_ref()
    }

    /// The one-timer hand-off (see [`DeadlineHandOff`]).
    #[inline]
    pub(crate) fn deadlines(&self) -> &DeadlineHandOff {
        &self.deadlines
    }

    /// Whether the progress tap made here is closed: its request ended, or
    /// at least the layer that made it did.
    #[inline]
    pub(crate) fn progress_closed(&self) -> bool {
        self.progress.is_closed()
    }
}
