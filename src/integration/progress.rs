//! Progress an SDK's handler reports, checked and fed to its request's
//! [`ProgressTap`]: the integrations register each request that carries a
//! progress token here while its handler runs, and ask before each
//! progress notification the handler sends goes out.
//!
//! progress.md: a progress notification MUST only reference the token of
//! an active request, and its value MUST increase. The SDKs send whatever
//! the handler (or a task it spawned, holding a clone of its peer or
//! context) gives them, so the check is made here, on the one path every
//! such notification takes: one for a request that ended, or with a value
//! that does not increase, is not sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::jsonrpc::ProgressToken;
use crate::ProgressTap;

/// The requests in flight, by progress token. Shared by an integration's
/// wrapper, its clones, and what watches the handler's outgoing progress
/// (rmcp's transport, tower-mcp's notification channel).
///
/// Public because an SDK adapter sees its handler's progress notifications
/// on the SDK's outgoing path, outside this crate's
/// [`RequestContext`](crate::RequestContext): this is where it checks them
/// against progress.md and feeds them to the request's [`ProgressTap`].
#[derive(Clone, Default)]
pub struct ProgressRegistry {
    inner: Arc<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    requests: Mutex<HashMap<ProgressToken, Entry>>,
    next: AtomicU64,
}

/// One request in flight.
struct Entry {
    /// Tells this registration from a later one of the same token.
    serial: u64,
    /// The last value sent.
    last: Option<f64>,
    /// The request's tap, under a `ProgressResetLayer`.
    tap: Option<ProgressTap>,
}

impl ProgressRegistry {
    /// Registers the request with progress token `token` (and its `tap`, if
    /// it has one) until the returned guard drops. A client that reuses a
    /// token in flight gets the newer request's entry.
    pub fn register(&self, token: ProgressToken, tap: Option<ProgressTap>) -> Registration {
        let serial = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            serial,
            last: None,
            tap,
        };
        self.lock().insert(token.clone(), entry);
        Registration {
            registry: self.clone(),
            token,
            serial,
        }
    }

    /// Whether a progress notification the handler sent may go out: its
    /// token is that of a request in flight and its value is greater than
    /// every value sent for it before. If so, it is recorded (and in the
    /// request's tap, which restarts its idle limit).
    pub fn admit(
        &self,
        token: &ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> bool {
        let mut requests = self.lock();
        let Some(entry) = requests.get_mut(token) else {
            tracing::debug!(progress_token = %token, progress, "progress for no request in flight not sent");
            return false;
        };
        let increases = progress.is_finite() && entry.last.is_none_or(|last| progress > last);
        if !increases {
            tracing::debug!(progress_token = %token, progress, last = entry.last, "progress that does not increase not sent");
            return false;
        }
        entry.last = Some(progress);
        let tap = entry.tap.clone();
        drop(requests);
        // A tap the layer closed: the request ended, the handler's
        // registration is on its way out.
        tap.is_none_or(|tap| tap.record(progress, total, message.map(str::to_owned)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Entry>> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// Removes a request from the [`ProgressRegistry`] when its handler ends or
/// is dropped: from then on, nothing of its progress is sent.
///
/// Public as what [`ProgressRegistry::register`] returns: the adapter holds
/// it for as long as the handler runs.
#[must_use = "the request is unregistered when this is dropped"]
pub struct Registration {
    registry: ProgressRegistry,
    token: ProgressToken,
    serial: u64,
}

impl std::fmt::Debug for ProgressRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressRegistry")
            .field("in_flight", &self.lock().len())
            .finish()
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut requests = self.registry.lock();
        if requests
            .get(&self.token)
            .is_some_and(|e| e.serial == self.serial)
        {
            requests.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_increasing_progress_of_a_request_in_flight_is_admitted() {
        let registry = ProgressRegistry::default();
        let token = ProgressToken::from("t");
        let tap = ProgressTap::new(token.clone(), None);
        assert!(
            !registry.admit(&token, 1.0, None, None),
            "not yet in flight"
        );
        let registration = registry.register(token.clone(), Some(tap.clone()));
        assert!(registry.admit(&token, 5.0, None, None));
        assert!(!registry.admit(&token, 3.0, None, None));
        assert!(!registry.admit(&token, 5.0, None, None));
        assert!(!registry.admit(&token, f64::NAN, None, None));
        assert!(registry.admit(&token, 6.0, None, None));
        assert_eq!(tap.last(), Some(6.0));
        drop(registration);
        assert!(!registry.admit(&token, 7.0, None, None), "ended");
        assert_eq!(tap.last(), Some(6.0));
    }
}
