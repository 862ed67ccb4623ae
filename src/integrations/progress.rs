//! Progress an SDK's handler reports, fed to its request's [`ProgressTap`]:
//! the integrations register each request's tap here by its progress token
//! while its handler runs, and record what they see the handler send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::jsonrpc::ProgressToken;
use crate::ProgressTap;

/// The taps of the requests in flight, by progress token. Shared by an
/// integration's wrapper, its clones, and what watches the handler's
/// outgoing progress (rmcp's transport, tower-mcp's notification channel).
#[derive(Clone, Default)]
pub(crate) struct ProgressRegistry {
    inner: Arc<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    taps: Mutex<HashMap<ProgressToken, (u64, ProgressTap)>>,
    next: AtomicU64,
}

impl ProgressRegistry {
    /// Registers `tap` under its token until the returned guard drops. A
    /// client that reuses a token in flight gets the newer request's tap.
    pub(crate) fn register(&self, tap: ProgressTap) -> Registration {
        let serial = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let token = tap.token();
        self.lock().insert(token.clone(), (serial, tap));
        Registration {
            registry: self.clone(),
            token,
            serial,
        }
    }

    /// Records a progress notification the handler sent.
    pub(crate) fn record(
        &self,
        token: &ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) {
        let tap = self.lock().get(token).map(|(_, tap)| tap.clone());
        if let Some(tap) = tap {
            tap.record(progress, total, message.map(str::to_owned));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, (u64, ProgressTap)>> {
        self.inner.taps.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Removes a tap from the [`ProgressRegistry`] when its handler ends or is
/// dropped.
pub(crate) struct Registration {
    registry: ProgressRegistry,
    token: ProgressToken,
    serial: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut taps = self.registry.lock();
        if taps
            .get(&self.token)
            .is_some_and(|(s, _)| *s == self.serial)
        {
            taps.remove(&self.token);
        }
    }
}
