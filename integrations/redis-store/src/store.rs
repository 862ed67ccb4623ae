//! [`RedisStore`] and its settings: the key layout, a record's read and
//! its compare-and-set write, its expiry.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{AsyncCommands, Script};
use tower_mcp_cancel::tasks::{StoreError, TaskRecord};

use crate::conn::{bounded, connect, millis, Conn, PrimaryAuth, Subscriber, Topology, MAX_PX};

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

/// A [`TaskStore`](crate::TaskStore) in Redis, shared by the replicas of one server. Clones
/// share the connection. See the [crate docs](crate).
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    /// For the owners' subscriptions.
    pub(crate) subscriber: Subscriber,
    /// Every other command: multiplexed, re-established when lost (on a
    /// cluster, one per node; through Sentinel, to the current primary).
    pub(crate) conn: Conn,
    pub(crate) settings: Settings,
    pub(crate) cas: Script,
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
    /// How many replicas acknowledge a creation and an end (`WAIT`).
    pub(crate) acknowledged_by: usize,
    /// Hash-tagged keys (a cluster): a task's keys share its id's slot,
    /// an owner's lease and channel its name's.
    pub(crate) tagged: bool,
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
    topology: Topology,
    settings: Settings,
    primary_auth: Option<PrimaryAuth>,
}

impl RedisStoreBuilder {
    fn new(topology: Topology) -> Self {
        Self {
            topology,
            settings: Settings {
                prefix: "mcp:tasks:".into(),
                lease: Duration::from_secs(10),
                reread: Duration::from_secs(1),
                timeout: Duration::from_secs(2),
                backstop: Duration::from_secs(300),
                acknowledged_by: 0,
                tagged: false,
            },
            primary_auth: None,
        }
    }

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

    /// How many Redis replicas must acknowledge (`WAIT`) a task's creation
    /// before [`create`](crate::TaskStore::create) succeeds (so before its
    /// `CreateTaskResult` is sent), and a task's end before
    /// [`finish`](crate::TaskStore::finish) does (default 0: Redis's answer is
    /// enough). Fewer acknowledgements within the
    /// [`timeout`](Self::timeout) fail the call with
    /// [`StoreError::Unavailable`]. What each setting keeps through a
    /// failover: the [crate docs](crate#durability).
    #[must_use]
    pub fn acknowledged_by(mut self, replicas: usize) -> Self {
        self.settings.acknowledged_by = replicas;
        self
    }

    /// The credentials of the primary that the Sentinels name, for a
    /// [`sentinel`](RedisStore::sentinel) store whose Redis has
    /// `requirepass` or ACL users: `username` `None` for `requirepass`
    /// (the `default` user). The same credentials serve the replica
    /// promoted by a failover, so every node of the set needs them. The Sentinels' own credentials
    /// stay in their URLs (`redis://:password@host:26379`). On one node or
    /// a cluster the URLs carry the credentials, and this call makes
    /// [`connect`](Self::connect) fail. Without it, a primary that asks
    /// for a password makes `connect` fail.
    #[must_use]
    pub fn primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary_auth = Some(PrimaryAuth {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        });
        self
    }

    /// Connects (within the [`timeout`](Self::timeout)). Fails when a URL
    /// is invalid or Redis cannot be reached (through Sentinel: when no
    /// Sentinel names a reachable primary, or the primary refuses the
    /// credentials), and when [`primary_auth`](Self::primary_auth) is
    /// given for a topology other than Sentinel.
    pub async fn connect(mut self) -> Result<RedisStore, StoreError> {
        let (conn, subscriber) = connect(
            &self.topology,
            self.primary_auth.as_ref(),
            self.settings.timeout,
        )
        .await?;
        self.settings.tagged = matches!(self.topology, Topology::Cluster(_));
        Ok(RedisStore {
            shared: Arc::new(Shared {
                subscriber,
                conn,
                settings: self.settings,
                cas: Script::new(COMPARE_AND_SET),
                owned: Mutex::default(),
            }),
        })
    }
}

pub(crate) fn corrupt(id: &str, e: serde_json::Error) -> StoreError {
    StoreError::Unavailable(format!("the record of task {id:?} is not readable: {e}").into())
}

impl RedisStore {
    /// The settings for a store on one Redis node at `url`
    /// (`redis://host:port/db`; `rediss://` needs a TLS feature of the
    /// redis crate).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Topology::Node(url.into()))
    }

    /// The settings for a store on a Redis Cluster (or a managed service
    /// in cluster mode), found from `seeds`: the URLs of some of its
    /// nodes (`redis://host:port`). Every operation's keys share one hash
    /// slot; owners hear their signals by sharded pub/sub (Redis 7 or
    /// later, Valkey).
    pub fn cluster(seeds: impl IntoIterator<Item = impl Into<String>>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Topology::Cluster(
            seeds.into_iter().map(Into::into).collect(),
        ))
    }

    /// The settings for a store on the primary that the Sentinels at
    /// `sentinels` (`redis://host:port` each) name `master`. After a
    /// failover the store asks them again: when they announce it (it
    /// listens for their `+switch-master` while it lives), or at the first
    /// call that finds the old primary gone or read-only. The primary's
    /// password: [`primary_auth`](RedisStoreBuilder::primary_auth).
    pub fn sentinel(
        sentinels: impl IntoIterator<Item = impl Into<String>>,
        master: impl Into<String>,
    ) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Topology::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
        })
    }

    /// A store at `url` with the default settings.
    pub async fn connect(url: impl Into<String>) -> Result<Self, StoreError> {
        Self::builder(url).connect().await
    }

    /// `{kind}:{name}`, with `name` as the hash tag on a cluster.
    fn key(&self, kind: &str, name: &str) -> String {
        let settings = &self.shared.settings;
        if settings.tagged {
            format!("{}{kind}:{{{name}}}", settings.prefix)
        } else {
            format!("{}{kind}:{name}", settings.prefix)
        }
    }

    pub(crate) fn record_key(&self, id: &str) -> String {
        self.key("task", id)
    }

    pub(crate) fn lease_key(&self, owner: &str) -> String {
        self.key("lease", owner)
    }

    pub(crate) fn inbox_key(&self, id: &str) -> String {
        self.key("inbox", id)
    }

    pub(crate) fn channel(&self, owner: &str) -> String {
        self.key("owner", owner)
    }

    pub(crate) fn conn(&self) -> Conn {
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
    pub(crate) fn live_px(&self, record: &TaskRecord) -> u64 {
        record.ttl_ms.map_or(0, |ttl| {
            let end = record
                .created_at_ms
                .saturating_add(ttl)
                .saturating_add(millis(self.shared.settings.backstop));
            end.saturating_sub(now_ms()).clamp(1, MAX_PX)
        })
    }

    pub(crate) async fn read(&self, id: &str) -> Result<Option<(String, TaskRecord)>, StoreError> {
        self.read_on(&mut self.conn(), id).await
    }

    async fn read_on(
        &self,
        conn: &mut Conn,
        id: &str,
    ) -> Result<Option<(String, TaskRecord)>, StoreError> {
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
    pub(crate) async fn compare_and_set(
        &self,
        id: &str,
        change: impl FnMut(&mut TaskRecord) -> Option<u64>,
    ) -> Result<Option<(TaskRecord, bool)>, StoreError> {
        self.compare_and_set_on(&mut self.conn(), id, change).await
    }

    /// [`compare_and_set`](Self::compare_and_set) on `conn` (through
    /// Sentinel: on one primary, the one a `WAIT` after it asks).
    pub(crate) async fn compare_and_set_on(
        &self,
        conn: &mut Conn,
        id: &str,
        mut change: impl FnMut(&mut TaskRecord) -> Option<u64>,
    ) -> Result<Option<(TaskRecord, bool)>, StoreError> {
        let key = self.record_key(id);
        for _ in 0..MAX_RETRIES {
            let Some((raw, mut record)) = self.read_on(conn, id).await? else {
                return Ok(None);
            };
            let Some(px) = change(&mut record) else {
                return Ok(Some((record, false)));
            };
            let new = serde_json::to_string(&record).map_err(|e| corrupt(id, e))?;
            let mut invocation = self.shared.cas.key(&key);
            invocation.arg(&raw).arg(&new).arg(px);
            let written: i64 =
                bounded(self.shared.settings.timeout, invocation.invoke_async(conn)).await?;
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
