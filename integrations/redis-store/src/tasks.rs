//! [`RedisStore`] as a [`TaskStore`]: creation, reads, atomic changes and
//! ends, signals to owners, the owners' leases.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redis::AsyncCommands;
use tower_mcp_cancel::tasks::{StoreError, TaskChange, TaskEnd, TaskRecord, TaskSignal, TaskStore};

use crate::conn::{bounded, millis};
use crate::store::{corrupt, RedisStore};

impl RedisStore {
    /// Writes `record` if its id is new; on one node in the same `MULTI`
    /// as the owner's lease, on a cluster (where the two keys are in
    /// different slots) after the lease. Either way the lease holds from
    /// the record's first moment on.
    async fn write_new(&self, record: &TaskRecord) -> Result<(), StoreError> {
        let settings = &self.shared.settings;
        let raw = serde_json::to_string(record).map_err(|e| corrupt(&record.id, e))?;
        let key = self.record_key(&record.id);
        let mut set = redis::cmd("SET");
        set.arg(&key).arg(raw).arg("NX");
        let px = self.live_px(record);
        if px > 0 {
            set.arg("PX").arg(px);
        }
        let mut lease = None;
        if let Some(owner) = &record.owner {
            // The creator is alive: its lease holds from the record's
            // first moment on.
            let key = self.lease_key(owner);
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg(1).arg("PX").arg(millis(settings.lease));
            lease = Some((key, cmd));
        }
        let mut conn = self.conn();
        let created: Option<String> = if settings.tagged {
            if let Some((key, lease)) = lease {
                bounded(settings.timeout, lease.exec_async(&mut conn)).await?;
                // On its own node: acknowledged there too, or a failover
                // of that node could leave the task without a live owner.
                conn.wait(&key, settings.acknowledged_by, settings.timeout)
                    .await?;
            }
            bounded(settings.timeout, set.query_async(&mut conn)).await?
        } else {
            let mut pipe = redis::pipe();
            pipe.atomic().add_command(set);
            if let Some((_, lease)) = lease {
                pipe.add_command(lease).ignore();
            }
            let (created,): (Option<String>,) =
                bounded(settings.timeout, pipe.query_async(&mut conn)).await?;
            created
        };
        if created.is_none() {
            return Err(StoreError::Unavailable(
                format!("task id {:?} exists already", record.id).into(),
            ));
        }
        conn.wait(&key, settings.acknowledged_by, settings.timeout)
            .await
    }
}

impl TaskStore for RedisStore {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.write_new(&record).await?;
            if let Some(owner) = record.owner {
                self.owned().entry(owner).or_default().insert(record.id);
            }
            Ok(())
        })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move { Ok(self.read(id).await?.map(|(_, r)| r)) })
    }

    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let ttl_changed = matches!(change, TaskChange::Ttl(_));
            let out = self
                .compare_and_set(id, |record| {
                    if !record.apply(&change) {
                        return None;
                    }
                    // A new TTL moves the backstop; else the expiry stays.
                    Some(if ttl_changed { self.live_px(record) } else { 0 })
                })
                .await?;
            Ok(out.map(|(r, _)| r))
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let settings = &self.shared.settings;
            let mut conn = self.conn();
            let out = self
                .compare_and_set_on(&mut conn, id, |record| {
                    record.end(&end).then(|| millis(retain))
                })
                .await?;
            let Some((record, ended)) = out else {
                return Ok(false);
            };
            // The end as written, or the one found (written by another
            // call, perhaps not yet acknowledged), acknowledged as asked.
            conn.wait(
                &self.record_key(id),
                settings.acknowledged_by,
                settings.timeout,
            )
            .await?;
            if let Some(owner) = &record.owner {
                if let Some(ids) = self.owned().get_mut(owner) {
                    ids.remove(id);
                }
            }
            if ended {
                // The inbox goes with the record's life; an error here only
                // leaves it to its own expiry.
                let _ = bounded(
                    settings.timeout,
                    conn.pexpire::<_, ()>(self.inbox_key(id), millis(retain).cast_signed()),
                )
                .await;
            }
            Ok(ended)
        })
    }

    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.signal(owner, signal))
    }

    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        Some(crate::signals::stream(self.clone(), owner.to_owned()))
    }

    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut conn = self.conn();
            bounded(
                self.shared.settings.timeout,
                conn.exists(self.lease_key(owner)),
            )
            .await
        })
    }
}
