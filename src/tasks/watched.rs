//! [`Watched`]: the store as the tasks layer uses it — each call bounded
//! and its panic caught, each change told to the listeners.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tokio::sync::broadcast;

use super::record::{TaskChange, TaskEnd, TaskRecord};
use super::store::{StoreError, TaskSignal, TaskStore};

/// The store as the layer uses it: every call bounded in time and a panic
/// in it caught (both become [`StoreError::Unavailable`]: a store that
/// hangs or panics never holds a task), and each change told to the
/// listeners.
pub(crate) struct Watched {
    inner: Arc<dyn TaskStore>,
    changes: broadcast::Sender<Arc<str>>,
    /// The most one store call may take.
    timeout: Duration,
}

impl Watched {
    pub(crate) fn new(inner: impl TaskStore, timeout: Duration) -> Self {
        // A listener that falls this far behind re-reads every task it
        // follows (see `listen`).
        let (changes, _) = broadcast::channel(256);
        Self {
            inner: Arc::new(inner),
            changes,
            timeout,
        }
    }

    /// The most one call may take.
    #[cfg(test)]
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same store and listeners, its calls bounded by `timeout`.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Self {
        Self {
            inner: self.inner.clone(),
            changes: self.changes.clone(),
            timeout,
        }
    }

    /// Runs one call of the inner store within the timeout, catching a
    /// panic.
    async fn bounded<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        use futures_util::FutureExt;
        let call = std::panic::AssertUnwindSafe(call).catch_unwind();
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(out)) => out,
            Ok(Err(_panic)) => Err(StoreError::Unavailable(
                format!("the task store panicked in {what}").into(),
            )),
            Err(_) => Err(StoreError::Unavailable(
                format!(
                    "the task store did not answer {what} within {:?}",
                    self.timeout
                )
                .into(),
            )),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    fn changed(&self, id: &str) {
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(id.into());
        }
    }
}

impl TaskStore for Watched {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.bounded("create", async move { self.inner.create(record).await }))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(self.bounded("get", async move { self.inner.get(id).await }))
    }

    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let out = self
                .bounded("update", async { self.inner.update(id, change).await })
                .await;
            if matches!(&out, Ok(Some(_))) {
                self.changed(id);
            }
            out
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let out = self
                .bounded("finish", async { self.inner.finish(id, end, retain).await })
                .await;
            if matches!(out, Ok(true)) {
                self.changed(id);
            }
            out
        })
    }

    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.bounded("signal_owner", async move {
            self.inner.signal_owner(owner, signal).await
        }))
    }

    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        self.inner.owner_signals(owner)
    }

    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.bounded(
            "owner_alive",
            async move { self.inner.owner_alive(owner).await },
        ))
    }
}
