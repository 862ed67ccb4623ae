//! [`Recorder`]: a handler's life as [`Event`]s on a channel, so a test
//! orders on what happened to a request instead of sleeping.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::event::Event;
use super::probe::DropGuard;
use super::WAIT_BOUND;
use crate::jsonrpc::RequestId;
use crate::{CancelReason, McpRequest};

/// The sending side: clone it into a `service_fn` and call
/// [`start`](Self::start) at the top of each handler (and
/// [`watch_token`](Self::watch_token) to see its token fire); in a handler
/// that is not an [`McpRequest`] service, [`start_as`](Self::start_as) and
/// [`watch_token_as`](Self::watch_token_as).
///
/// ```
/// use tower::{service_fn, BoxError, ServiceExt};
/// use tower_mcp_cancel::test_util::{Event, Recorder};
/// use tower_mcp_cancel::McpRequest;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (recorder, mut events) = Recorder::new();
/// let svc = service_fn(move |req: McpRequest| {
///     let recording = recorder.start(&req);
///     async move {
///         recording.finish();
///         Ok::<_, BoxError>(serde_json::json!({}))
///     }
/// });
/// svc.oneshot(McpRequest::new(1, "ping")).await.unwrap();
/// assert_eq!(events.next().await, Event::Started(1.into()));
/// assert_eq!(events.next().await, Event::Done(1.into()));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: mpsc::UnboundedSender<Event>,
}

/// The receiving side of a [`Recorder`]'s events.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::UnboundedReceiver<Event>,
    bound: Duration,
}

impl Recorder {
    /// A recorder and the receiving end of its events.
    pub fn new() -> (Recorder, Events) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Recorder { tx }, Events::new(rx))
    }

    /// Records the start of `req` ([`Event::Started`]; a request without an
    /// id records as id `0`) and returns the guard to keep in the handler's
    /// future: it reports [`Event::Dropped`] when dropped before
    /// [`finish`](DropGuard::finish), [`Event::Done`] after.
    pub fn start(&self, req: &McpRequest) -> DropGuard {
        self.start_as(id_of(req))
    }

    /// [`start`](Self::start) for any handler (an SDK's, a plain future):
    /// records [`Event::Started`] under `id` — the request's id as the
    /// handler sees it, or a name of the test's (`"slow"`) — and returns the
    /// guard that reports [`Event::Dropped`] or [`Event::Done`] under it.
    ///
    /// ```
    /// use tokio_util::sync::CancellationToken;
    /// use tower_mcp_cancel::test_util::{Event, Recorder};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let (recorder, mut events) = Recorder::new();
    /// // A handler as an SDK calls it: its own id type, its own token.
    /// async fn tool(recorder: Recorder, id: String, ct: CancellationToken) {
    ///     let _guard = recorder.start_as(id.as_str());
    ///     recorder.watch_token_as(id.as_str(), ct);
    ///     std::future::pending::<()>().await // never finishes by itself
    /// }
    /// let ct = CancellationToken::new();
    /// let call = tokio::spawn(tool(recorder, "req-7".into(), ct.clone()));
    /// assert_eq!(events.next().await, Event::Started("req-7".into()));
    /// ct.cancel(); // what the SDK does at a cancel; then it drops the call
    /// assert_eq!(events.next().await, Event::Token("req-7".into(), None));
    /// call.abort();
    /// assert_eq!(events.next().await, Event::Dropped("req-7".into()));
    /// # }
    /// ```
    pub fn start_as(&self, id: impl Into<RequestId>) -> DropGuard {
        let id = id.into();
        self.record(Event::Started(id.clone()));
        DropGuard::recording(self.tx.clone(), id)
    }

    /// When `req` carries a cancellation, spawns a task (call it inside a
    /// tokio runtime) that reports [`Event::Token`] once its token fires:
    /// what spawned work of the handler would see.
    pub fn watch_token(&self, req: &McpRequest) {
        let Some(c) = req.cancellation() else {
            return;
        };
        let c = c.clone();
        self.spawn_watch(id_of(req), c.token(), move || c.reason().cloned());
    }

    /// [`watch_token`](Self::watch_token) for any handler's token (an SDK's
    /// `CancellationToken`): spawns a task (call it inside a tokio runtime)
    /// that reports `Event::Token(id, None)` once `token` fires.
    pub fn watch_token_as(&self, id: impl Into<RequestId>, token: CancellationToken) {
        self.spawn_watch(id.into(), token, || None);
    }

    /// The watch both forms share: `reason` is read when the token fired.
    fn spawn_watch(
        &self,
        id: RequestId,
        token: CancellationToken,
        reason: impl FnOnce() -> Option<CancelReason> + Send + 'static,
    ) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            let _ = tx.send(Event::Token(id, reason()));
        });
    }

    /// Records an event of the test's own.
    pub fn note(&self, note: &'static str) {
        self.record(Event::Note(note));
    }

    /// Records `event` (nobody listening is not an error).
    pub fn record(&self, event: Event) {
        let _ = self.tx.send(event);
    }
}

fn id_of(req: &McpRequest) -> RequestId {
    req.id().cloned().unwrap_or_else(|| RequestId::from(0))
}

impl Events {
    fn new(rx: mpsc::UnboundedReceiver<Event>) -> Self {
        Events {
            rx,
            bound: WAIT_BOUND,
        }
    }

    /// Sets how long [`next`](Self::next) waits before it panics (a guard
    /// against hangs, never a synchronisation; default one hour, far longer
    /// than any test needs, also under a paused clock).
    #[must_use]
    pub fn with_bound(mut self, bound: Duration) -> Self {
        self.bound = bound;
        self
    }

    /// The next event; panics after the bound or once every recorder is gone.
    pub async fn next(&mut self) -> Event {
        tokio::time::timeout(self.bound, self.rx.recv())
            .await
            .expect("timed out waiting for an event")
            .expect("event channel closed")
    }

    /// Waits for an event matching `f`; returns it last, after the ones
    /// skipped on the way.
    pub async fn until(&mut self, f: impl Fn(&Event) -> bool) -> Vec<Event> {
        let mut seen = Vec::new();
        loop {
            let e = self.next().await;
            let done = f(&e);
            seen.push(e);
            if done {
                return seen;
            }
        }
    }

    /// The next event if one is queued, without waiting.
    pub fn try_next(&mut self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// The events already queued, without waiting.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut v = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            v.push(e);
        }
        v
    }
}
