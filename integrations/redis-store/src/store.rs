//! [`RedisStore`]: the records, their atomic changes and ends, and their
//! expiry, in Redis.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Client, RedisError, Script};
use tower_mcp_cancel::tasks::{StoreError, TaskChange, TaskEnd, TaskRecord, TaskSignal, TaskStore};

/// Writes `ARGV[2]` to `KEYS[1]` only if it still holds `ARGV[1]` (the
/// record as read), with `PX ARGV[3]` (or its current expiry kept when
/// `ARGV[3]` is 0). 1 when written, 0 when the record changed meanwhile.
const COMPARE_AND_SET: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
";

/// The longest lease, re-read period and timeout (a longer setting is
/// taken as this).
const DAY: Duration = Duration::from_secs(24 * 3600);

/// How many times a change is read again when another writer changed the
/// record first, before the call fails.
const MAX_RETRIES: usize = 64;

/// A [`TaskStore`] in Redis, shared by the replicas of one server. Clones
/// share the connection. See the [crate docs](crate).
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    /// For the owners' pub/sub connections.
    pub(crate) client: Client,
    /// Every other command: one multiplexed connection, re-established
    /// when lost.
    pub(crate) conn: ConnectionManager,
    pub(crate) settings: Settings,
    cas: Script,
    /// The live tasks each owner of this store created, by owner: what the
    /// owner re-reads.
    pub(crate) owned: Mutex<HashMap<String, HashSet<String>>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) prefix: String,
    pub(crate) lease: Duration,
    pub(crate) reread: Duration,
    pub(crate) timeout: Duration,
    pub(crate) backstop: Duration,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

/// The settings of a [`RedisStore`], then [`connect`](Self::connect).
#[derive(Clone, Debug)]
pub struct RedisStoreBuilder {
    url: String,
    settings: Settings,
}

impl RedisStoreBuilder {
    /// The prefix of every key and channel (default `mcp:tasks:`): several
    /// servers may share one Redis under different prefixes.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// How long an owner's lease lasts without a refresh (default 10 s):
    /// this long after a replica went away, its unfinished tasks read
    /// `failed`. The owner refreshes it every third of it (or every
    /// [`reread`](Self::reread) period, if shorter). Taken between 3 ms and
    /// a day.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease.clamp(Duration::from_millis(3), DAY);
        self
    }

    /// How often an owner re-reads its live tasks (default 1 s): the bound
    /// on delivering a cancel or an input answer whose pub/sub message was
    /// lost. Taken between 1 ms and a day.
    #[must_use]
    pub fn reread(mut self, period: Duration) -> Self {
        self.settings.reread = period.clamp(Duration::from_millis(1), DAY);
        self
    }

    /// The most one Redis command, or connecting, may take (default 2 s):
    /// past it the call fails with [`StoreError::Unavailable`]. Taken
    /// between 1 ms and a day.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout.clamp(Duration::from_millis(1), DAY);
        self
    }

    /// How long past its TTL the record of a task that has not ended is
    /// kept (default 5 minutes): a backstop for a task whose owner went
    /// away and that nobody read since.
    #[must_use]
    pub fn backstop(mut self, backstop: Duration) -> Self {
        self.settings.backstop = backstop;
        self
    }

    /// Connects (within the [`timeout`](Self::timeout)). Fails when the URL
    /// is invalid or Redis cannot be reached.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let client = Client::open(self.url.as_str()).map_err(unavailable)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.settings.timeout))
            .set_response_timeout(Some(self.settings.timeout))
            .set_number_of_retries(2)
            .set_max_delay(self.settings.timeout);
        let conn = bounded(
            self.settings.timeout,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await?;
        Ok(RedisStore {
            shared: Arc::new(Shared {
                client,
                conn,
                settings: self.settings,
                cas: Script::new(COMPARE_AND_SET),
                owned: Mutex::default(),
            }),
        })
    }
}

/// A Redis error as the store's.
pub(crate) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

/// Runs `f` within `timeout`: a command never hangs on a Redis that went
/// away.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    f: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, f).await {
        Ok(out) => out.map_err(unavailable),
        Err(_) => Err(StoreError::Unavailable(
            format!("Redis did not answer within {timeout:?}").into(),
        )),
    }
}

fn corrupt(id: &str, e: serde_json::Error) -> StoreError {
    StoreError::Unavailable(format!("the record of task {id:?} is not readable: {e}").into())
}

/// The longest expiry this store asks of Redis (100 years): a longer
/// setting (`Duration::MAX` for "forever") is taken as this, where Redis
/// would refuse it.
const MAX_PX: u64 = 100 * 365 * 24 * 3600 * 1000;

/// `d` in milliseconds for `PX`: at least 1, at most [`MAX_PX`].
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_PX)
}

impl RedisStore {
    /// The settings for a store at `url` (`redis://host:port/db`,
    /// `rediss://` needs a TLS feature of the redis crate).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            settings: Settings {
                prefix: "mcp:tasks:".into(),
                lease: Duration::from_secs(10),
                reread: Duration::from_secs(1),
                timeout: Duration::from_secs(2),
                backstop: Duration::from_secs(300),
            },
        }
    }

    /// A store at `url` with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    pub(crate) fn record_key(&self, id: &str) -> String {
        format!("{}task:{id}", self.shared.settings.prefix)
    }

    pub(crate) fn lease_key(&self, owner: &str) -> String {
        format!("{}lease:{owner}", self.shared.settings.prefix)
    }

    pub(crate) fn inbox_key(&self, id: &str) -> String {
        format!("{}inbox:{id}", self.shared.settings.prefix)
    }

    pub(crate) fn channel(&self, owner: &str) -> String {
        format!("{}owner:{owner}", self.shared.settings.prefix)
    }

    pub(crate) fn conn(&self) -> ConnectionManager {
        self.shared.conn.clone()
    }

    pub(crate) fn owned(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.shared
            .owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How long the record of a live task is kept: its TTL plus the
    /// backstop from its creation (0: no expiry).
    fn live_px(&self, record: &TaskRecord) -> u64 {
        record.ttl_ms.map_or(0, |ttl| {
            let end = record
                .created_at_ms
                .saturating_add(ttl)
                .saturating_add(millis(self.shared.settings.backstop));
            end.saturating_sub(now_ms()).clamp(1, MAX_PX)
        })
    }

    async fn read(&self, id: &str) -> Result<Option<(String, TaskRecord)>, StoreError> {
        let mut conn = self.conn();
        let key = self.record_key(id);
        let raw: Option<String> = bounded(self.shared.settings.timeout, conn.get(&key)).await?;
        match raw {
            Some(raw) => {
                let record = serde_json::from_str(&raw).map_err(|e| corrupt(id, e))?;
                Ok(Some((raw, record)))
            }
            None => Ok(None),
        }
    }

    /// Reads task `id`, lets `change` decide what to write (`None`: nothing),
    /// and writes it only if the record is still the one read, else reads
    /// again. Returns the record as written or as read.
    async fn compare_and_set(
        &self,
        id: &str,
        mut change: impl FnMut(&mut TaskRecord) -> Option<u64>,
    ) -> Result<Option<(TaskRecord, bool)>, StoreError> {
        let key = self.record_key(id);
        for _ in 0..MAX_RETRIES {
            let Some((raw, mut record)) = self.read(id).await? else {
                return Ok(None);
            };
            let Some(px) = change(&mut record) else {
                return Ok(Some((record, false)));
            };
            let new = serde_json::to_string(&record).map_err(|e| corrupt(id, e))?;
            let mut conn = self.conn();
            let mut invocation = self.shared.cas.key(&key);
            invocation.arg(&raw).arg(&new).arg(px);
            let written: i64 = bounded(
                self.shared.settings.timeout,
                invocation.invoke_async(&mut conn),
            )
            .await?;
            if written == 1 {
                return Ok(Some((record, true)));
            }
        }
        Err(StoreError::Unavailable(
            format!("task {id:?} changed {MAX_RETRIES} times while being written").into(),
        ))
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl TaskStore for RedisStore {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let settings = &self.shared.settings;
            let raw = serde_json::to_string(&record).map_err(|e| corrupt(&record.id, e))?;
            let mut set = redis::cmd("SET");
            set.arg(self.record_key(&record.id)).arg(raw).arg("NX");
            let px = self.live_px(&record);
            if px > 0 {
                set.arg("PX").arg(px);
            }
            let mut pipe = redis::pipe();
            pipe.atomic().add_command(set);
            if let Some(owner) = &record.owner {
                // The creator is alive: its lease holds from the record's
                // first moment on.
                pipe.cmd("SET")
                    .arg(self.lease_key(owner))
                    .arg(1)
                    .arg("PX")
                    .arg(millis(settings.lease))
                    .ignore();
            }
            let mut conn = self.conn();
            let (created,): (Option<String>,) =
                bounded(settings.timeout, pipe.query_async(&mut conn)).await?;
            if created.is_none() {
                return Err(StoreError::Unavailable(
                    format!("task id {:?} exists already", record.id).into(),
                ));
            }
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
            let out = self
                .compare_and_set(id, |record| record.end(&end).then(|| millis(retain)))
                .await?;
            let Some((record, ended)) = out else {
                return Ok(false);
            };
            if let Some(owner) = &record.owner {
                if let Some(ids) = self.owned().get_mut(owner) {
                    ids.remove(id);
                }
            }
            if ended {
                // The inbox goes with the record's life; an error here only
                // leaves it to its own expiry.
                let mut conn = self.conn();
                let _ = bounded(
                    self.shared.settings.timeout,
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
