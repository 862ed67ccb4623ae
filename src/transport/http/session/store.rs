//! The session store: minting, looking up, expiring and ending sessions,
//! and registering a session's calls in its [`InFlight`] registry.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use super::SessionLimits;
use crate::cancel::{InFlight, InFlightGuard};
use crate::jsonrpc::{Method, RequestId};
use crate::{CancelReason, Cancellation};

/// Why a session could not be created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// As many live sessions as allowed.
    Full(usize),
    /// The operating system's random source failed.
    Random(getrandom::Error),
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::Full(max) => write!(
                f,
                "Service Unavailable: the server has its maximum of {max} legacy sessions in use; try again later"
            ),
            CreateError::Random(e) => {
                write!(f, "Internal error: no session id could be generated ({e})")
            }
        }
    }
}

/// Why a call could not join its session.
#[derive(Debug)]
pub(crate) enum JoinError {
    /// The session ended (DELETE, expiry) since it was looked up.
    Ended,
    /// A request with that id is in flight in the session.
    Duplicate,
}

/// The sessions of one adapter (shared by its clones).
pub(crate) struct Sessions {
    limits: SessionLimits,
    map: Mutex<HashMap<Arc<str>, Arc<Session>>>,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("limits", &self.limits)
            .field("len", &self.lock().len())
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(limits: SessionLimits) -> Self {
        Self {
            limits,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Session>>> {
        // Every operation under the lock is a single insert/remove/lookup:
        // a panic elsewhere cannot leave the map inconsistent.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mints a session. At the bound, expired sessions are swept first; if
    /// none has expired, the bound is the answer (no live session is evicted).
    pub(crate) fn create(&self) -> Result<Arc<Session>, CreateError> {
        let id = mint_id().map_err(CreateError::Random)?;
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= self.limits.max_sessions {
            let idle = self.limits.idle_timeout;
            map.retain(|_, s| !s.expired(now, idle));
        }
        if map.len() >= self.limits.max_sessions {
            return Err(CreateError::Full(self.limits.max_sessions));
        }
        let session = Arc::new(Session {
            id: id.clone(),
            in_flight: InFlight::new(),
            state: Mutex::new(State {
                last_seen: now,
                ended: false,
            }),
        });
        map.insert(id, session.clone());
        Ok(session)
    }

    /// The live session `id`, marked as used now; `None` for an unknown,
    /// ended or expired one (an expired one is removed).
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session>> {
        let now = Instant::now();
        let mut map = self.lock();
        let session = map.get(id)?.clone();
        if session.expired(now, self.limits.idle_timeout) {
            map.remove(id);
            session.end(CancelReason::TransportClosed);
            tracing::debug!(session = %session.id, "legacy session expired");
            return None;
        }
        session.touch(now);
        Some(session)
    }

    /// Ends session `id` (`DELETE`): removed, and what it has in flight
    /// cancelled. Returns how many calls were cancelled, `None` for an
    /// unknown session.
    pub(crate) fn end(&self, id: &str) -> Option<usize> {
        let session = self.lock().remove(id)?;
        Some(session.end(CancelReason::TransportClosed))
    }
}

/// Mints a session id: 256 bits from the operating system's random
/// source, as 64 lowercase hex digits (visible ASCII, as the spec asks).
fn mint_id() -> Result<Arc<str>, getrandom::Error> {
    crate::random::hex_id::<32>().map(Arc::from)
}

struct State {
    last_seen: Instant,
    ended: bool,
}

/// One 2025-era session: its id, its in-flight requests, when it was last
/// used.
pub(crate) struct Session {
    id: Arc<str>,
    in_flight: InFlight,
    state: Mutex<State>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl Session {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session id, as sent in `Mcp-Session-Id`.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Whether the session was ended (`DELETE`, expiry, a refused
    /// handshake).
    pub(crate) fn is_ended(&self) -> bool {
        self.state().ended
    }

    fn touch(&self, now: Instant) {
        let mut state = self.state();
        if now > state.last_seen {
            state.last_seen = now;
        }
    }

    fn expired(&self, now: Instant, idle: std::time::Duration) -> bool {
        let state = self.state();
        state.ended
            || (self.in_flight.is_empty() && now.saturating_duration_since(state.last_seen) >= idle)
    }

    /// Ends the session: no call joins it any more, and those in flight are
    /// cancelled with `reason`. Returns how many were. The store drops it at
    /// its next lookup, or when it needs the room.
    pub(crate) fn end(&self, reason: CancelReason) -> usize {
        self.state().ended = true;
        // Joining happens under the state lock, so every call that joined
        // before `ended` was set is in the registry now.
        self.in_flight.cancel_all(reason)
    }

    /// Registers request `id` of this session with its `cancellation`; the
    /// returned [`SessionCall`] keeps it registered until dropped.
    pub(crate) fn join(
        self: &Arc<Self>,
        id: RequestId,
        method: Option<Method>,
        cancellation: Cancellation,
    ) -> Result<SessionCall, JoinError> {
        let state = self.state();
        if state.ended {
            return Err(JoinError::Ended);
        }
        let guard = self
            .in_flight
            .register_with(id, method, cancellation)
            .ok_or(JoinError::Duplicate)?;
        drop(state);
        Ok(SessionCall {
            session: self.clone(),
            _guard: guard,
        })
    }

    /// The client's `notifications/cancelled` for request `id` of this
    /// session: whether it was running and is now cancelled.
    pub(crate) fn cancel(&self, id: &RequestId, reason: CancelReason) -> bool {
        self.in_flight.cancel(id, reason)
    }
}

/// A call registered in its session; dropping it (the call ended or was
/// dropped) unregisters it and counts as the session's last use.
pub(crate) struct SessionCall {
    session: Arc<Session>,
    _guard: InFlightGuard,
}

impl fmt::Debug for SessionCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionCall").finish_non_exhaustive()
    }
}

impl Drop for SessionCall {
    fn drop(&mut self) {
        self.session.touch(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(max: usize, idle_secs: u64) -> SessionLimits {
        SessionLimits::new()
            .max_sessions(max)
            .idle_timeout(Duration::from_secs(idle_secs))
    }

    #[test]
    fn ids_are_64_visible_ascii_hex_digits_and_distinct() {
        let a = mint_id().unwrap();
        let b = mint_id().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && (0x21..=0x7e).contains(&c)));
        assert_ne!(a, b);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_refuses_and_never_evicts_a_live_session() {
        let store = Sessions::new(limits(1, 60));
        let s = store.create().unwrap();
        assert!(matches!(store.create(), Err(CreateError::Full(1))));
        assert!(store.get(s.id()).is_some(), "the live session was kept");
        tokio::time::advance(Duration::from_secs(61)).await;
        let t = store.create().expect("the expired one was swept");
        assert!(store.get(s.id()).is_none());
        assert!(store.get(t.id()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_with_work_in_flight_does_not_expire() {
        let store = Sessions::new(limits(4, 60));
        let s = store.create().unwrap();
        let call = s
            .join(RequestId::from(1), None, Cancellation::new())
            .unwrap();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(store.get(s.id()).is_some());
        drop(call);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(store.get(s.id()).is_some(), "the call's end was a use");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(store.get(s.id()).is_none());
    }

    #[test]
    fn ending_cancels_and_later_joins_fail() {
        let store = Sessions::new(limits(4, 60));
        let s = store.create().unwrap();
        let c = Cancellation::new();
        let _call = s.join(RequestId::from(1), None, c.clone()).unwrap();
        assert_eq!(store.end(s.id()), Some(1));
        assert_eq!(c.reason(), Some(&CancelReason::TransportClosed));
        assert!(matches!(
            s.join(RequestId::from(2), None, Cancellation::new()),
            Err(JoinError::Ended)
        ));
        assert_eq!(store.end(s.id()), None);
    }
}
