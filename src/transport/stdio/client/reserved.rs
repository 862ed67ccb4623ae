//! The ids of requests cancelled after they were written, reserved while
//! their late responses may still come, so that none answers a later
//! request.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::jsonrpc::RequestId;

/// Ids of requests cancelled after they were written, whose late responses
/// may still come: reserved until then, for at most `ttl`, at most `max`.
pub(super) struct Reserved {
    ttl: Duration,
    max: usize,
    until: HashMap<RequestId, Instant>,
    /// In reservation order, so expiry is in order too; an entry whose id
    /// was released or reserved again since is stale and skipped.
    order: VecDeque<(RequestId, Instant)>,
}

impl Reserved {
    pub(super) fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max,
            until: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub(super) fn reserve(&mut self, id: RequestId) {
        if self.ttl.is_zero() || self.max == 0 {
            return;
        }
        let now = Instant::now();
        self.expire(now);
        // A duration the clock cannot add is as good as a year.
        let until = now
            .checked_add(self.ttl)
            .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
            .unwrap_or(now);
        self.until.insert(id.clone(), until);
        self.order.push_back((id, until));
        while self.until.len() > self.max {
            self.pop_oldest();
        }
        // Released ids leave stale entries behind: drop them now and then,
        // so the queue stays within twice the bound.
        if self.order.len() > self.max.saturating_mul(2) {
            let until = &self.until;
            self.order.retain(|(id, u)| until.get(id) == Some(u));
        }
    }

    pub(super) fn pop_oldest(&mut self) {
        if let Some((id, until)) = self.order.pop_front() {
            if self.until.get(&id) == Some(&until) {
                self.until.remove(&id);
            }
        }
    }

    pub(super) fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, until)| *until <= now) {
            self.pop_oldest();
        }
    }

    /// Whether `id` is reserved (as of the last [`expire`](Self::expire)).
    pub(super) fn contains(&self, id: &RequestId) -> bool {
        self.until.contains_key(id)
    }

    /// Ends `id`'s reservation (its late response came); whether it had one.
    pub(super) fn release(&mut self, id: &RequestId) -> bool {
        self.until.remove(id).is_some()
    }

    pub(super) fn clear(&mut self) {
        self.until.clear();
        self.order.clear();
    }
}
