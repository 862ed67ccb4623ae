//! [`InFlight`]: the per-connection registry of in-flight requests.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::jsonrpc::{Method, RequestId};

use crate::cancel::Cancellation;
use crate::error::CancelReason;
use crate::state::RequestState;

/// The in-flight requests of one connection, by id.
///
/// A transport registers each request as it arrives, hands the returned
/// [`InFlightGuard`]'s [`Cancellation`] to the layers (with
/// [`RequestView::set_cancellation`](crate::RequestView::set_cancellation)), cancels by id when the peer says so, and lets the guard
/// unregister the request when it ends. Clones share the registry; create one
/// per connection, never one per process: ids are only meaningful within
/// their connection.
///
/// * Cancelling an unknown id (never seen, already completed, or not yet
///   arrived) is a no-op logged at debug level, and leaves no trace: a cancel
///   that overtakes its request does not affect a later request with that id.
/// * `"1"` and `1` are different ids.
///
/// ```
/// use tower_mcp_cancel::cancel::InFlight;
/// use tower_mcp_cancel::{CancelReason, jsonrpc::RequestId};
///
/// let in_flight = InFlight::new();
/// let guard = in_flight.register(RequestId::from(1), None).unwrap();
/// assert!(in_flight.register(RequestId::from(1), None).is_none()); // a duplicate
/// assert!(!in_flight.cancel(&RequestId::from("1"), CancelReason::peer(None)));
/// assert!(in_flight.cancel(&RequestId::from(1), CancelReason::peer(None)));
/// assert!(guard.cancellation().is_cancelled());
/// drop(guard);
/// assert!(in_flight.is_empty());
/// ```
#[derive(Clone, Default)]
pub struct InFlight {
    inner: Arc<Mutex<HashMap<RequestId, Entry>>>,
}

struct Entry {
    cancellation: Cancellation,
    method: Option<Method>,
}

impl InFlight {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RequestId, Entry>> {
        // A panic elsewhere while holding the lock leaves a map that is still
        // consistent (every operation is a single insert/remove).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a request; `None` if a request with the same id is in
    /// flight (a transport answers it with an error and never runs it).
    #[must_use = "dropping the guard unregisters the request at once"]
    pub fn register(&self, id: RequestId, method: Option<Method>) -> Option<InFlightGuard> {
        let cancellation = RequestState::start(Some(id.clone()), method.clone());
        self.register_with(id, method, cancellation)
    }

    /// Registers a request with a [`Cancellation`] it already has (one an
    /// outer layer made); `None` if a request with the same id is in flight.
    #[must_use = "dropping the guard unregisters the request at once"]
    pub fn register_with(
        &self,
        id: RequestId,
        method: Option<Method>,
        cancellation: Cancellation,
    ) -> Option<InFlightGuard> {
        let mut map = self.lock();
        if map.contains_key(&id) {
            return None;
        }
        map.insert(
            id.clone(),
            Entry {
                cancellation: cancellation.clone(),
                method,
            },
        );
        drop(map);
        Some(InFlightGuard {
            registry: self.clone(),
            id,
            cancellation,
        })
    }

    /// Cancels the in-flight request `id` with `reason`: `true` if it was
    /// running and is now cancelled, `false` if no request `id` is in flight
    /// or it already completed or was cancelled (nothing changed).
    pub fn cancel(&self, id: &RequestId, reason: CancelReason) -> bool {
        let entry = self
            .lock()
            .get(id)
            .map(|e| (e.cancellation.clone(), e.method.clone()));
        match entry {
            None => {
                tracing::debug!(request_id = %id, %reason, "cancel for unknown request id ignored");
                false
            }
            Some((c, method)) => {
                let method = method
                    .as_ref()
                    .map(|m| crate::sanitize::for_log(m.as_str()));
                let method = method.as_deref().unwrap_or("");
                if c.cancel(reason.clone()) {
                    tracing::debug!(request_id = %id, method, %reason, "request cancelled by id");
                    true
                } else {
                    tracing::debug!(request_id = %id, method, %reason, "cancel for finished request ignored");
                    false
                }
            }
        }
    }

    /// Cancels every in-flight request (transport closed, shutdown). Returns
    /// how many were cancelled.
    pub fn cancel_all(&self, reason: CancelReason) -> usize {
        let all: Vec<Cancellation> = self
            .lock()
            .values()
            .map(|e| e.cancellation.clone())
            .collect();
        all.into_iter().filter(|c| c.cancel(reason.clone())).count()
    }

    /// Cancels every in-flight request of `method` (a drain ends the listen
    /// streams). Returns how many were cancelled.
    #[cfg_attr(not(feature = "stdio"), allow(dead_code))]
    pub(crate) fn cancel_method(&self, method: &str, reason: CancelReason) -> usize {
        let matching: Vec<Cancellation> = self
            .lock()
            .values()
            .filter(|e| e.method.as_ref().map(Method::as_str) == Some(method))
            .map(|e| e.cancellation.clone())
            .collect();
        matching
            .into_iter()
            .filter(|c| c.cancel(reason.clone()))
            .count()
    }

    /// The cancellation of the in-flight request `id`.
    pub fn get(&self, id: &RequestId) -> Option<Cancellation> {
        self.lock().get(id).map(|e| e.cancellation.clone())
    }

    /// Whether `id` is in flight.
    pub fn contains(&self, id: &RequestId) -> bool {
        self.lock().contains_key(id)
    }

    /// How many requests are in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("len", &self.len())
            .finish()
    }
}

/// A registered request; dropping it unregisters the request.
#[must_use = "dropping the guard unregisters the request at once"]
pub struct InFlightGuard {
    registry: InFlight,
    id: RequestId,
    cancellation: Cancellation,
}

impl InFlightGuard {
    /// The request's cancellation, to set on the request.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// The request id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut map = self.registry.lock();
        // Remove only our own entry.
        if map
            .get(&self.id)
            .is_some_and(|e| e.cancellation.same_as(&self.cancellation))
        {
            map.remove(&self.id);
        }
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("id", &self.id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_and_reuse() {
        let r = InFlight::new();
        let g = r.register(RequestId::from(0), None).unwrap();
        assert!(r.register(RequestId::from(0), None).is_none());
        let s = r.register(RequestId::from("0"), None).unwrap();
        assert_eq!(r.len(), 2);
        drop(g);
        let g2 = r.register(RequestId::from(0), None).unwrap();
        assert!(!g2.cancellation().is_finished());
        drop((s, g2));
        assert!(r.is_empty());
    }

    #[test]
    fn cancel_before_register_does_not_poison() {
        let r = InFlight::new();
        assert!(!r.cancel(&RequestId::from(7), CancelReason::peer(Some("early"))));
        let g = r.register(RequestId::from(7), None).unwrap();
        assert!(!g.cancellation().is_cancelled());
    }

    #[test]
    fn duplicate_cancel_and_after_completion() {
        let r = InFlight::new();
        let g = r.register(RequestId::from(1), None).unwrap();
        assert!(r.cancel(&RequestId::from(1), CancelReason::peer(None)));
        // A second cancel changes nothing: the first reason stays.
        assert!(!r.cancel(&RequestId::from(1), CancelReason::Shutdown));
        assert_eq!(g.cancellation().reason(), Some(&CancelReason::Peer(None)));
        let g2 = r.register(RequestId::from(2), None).unwrap();
        g2.cancellation().complete();
        assert!(!r.cancel(&RequestId::from(2), CancelReason::Shutdown));
        assert!(!g2.cancellation().is_cancelled());
        drop(g2);
        assert!(!r.cancel(&RequestId::from(2), CancelReason::Shutdown));
        assert!(!r.contains(&RequestId::from(2)));
        assert_eq!(r.cancel_all(CancelReason::TransportClosed), 0);
        drop(g);
    }

    #[test]
    fn cancel_all() {
        let r = InFlight::new();
        let gs: Vec<_> = (0..5)
            .map(|i| r.register(RequestId::from(i), None).unwrap())
            .collect();
        gs[0].cancellation().complete();
        assert_eq!(r.cancel_all(CancelReason::TransportClosed), 4);
        assert!(gs[1..]
            .iter()
            .all(|g| g.cancellation().reason() == Some(&CancelReason::TransportClosed)));
    }
}
