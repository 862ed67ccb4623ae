//! The connection to Redis, whatever its topology: one node (reconnected
//! when lost), a Redis Cluster (redis-rs's cluster client, which follows
//! `MOVED`/`ASK`), or a primary found through Sentinel (asked again after
//! each lost connection, which is how a failover is followed); the owners'
//! subscriptions on each; the bound on every call; `WAIT`.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection, PubSubStream};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, ProtocolVersion, PushKind,
    RedisConnectionInfo, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};
use tokio::sync::mpsc;
use tower_mcp_cancel::tasks::StoreError;

use crate::sentinel::{follow_switches, OnSwitch};

/// Where the store's Redis is (its `Debug` hides the URLs' passwords).
#[derive(Clone)]
pub(crate) enum Topology {
    /// One node, by URL.
    Node(String),
    /// The seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
    /// The Sentinels, and the name of the primary they watch.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |urls: &[String]| urls.iter().map(|u| redacted(u)).collect::<Vec<_>>();
        match self {
            Self::Node(url) => f.debug_tuple("Node").field(&redacted(url)).finish(),
            Self::Cluster(seeds) => f.debug_tuple("Cluster").field(&urls(seeds)).finish(),
            Self::Sentinel { sentinels, master } => f
                .debug_struct("Sentinel")
                .field("sentinels", &urls(sentinels))
                .field("master", master)
                .finish(),
        }
    }
}

/// `url` with the password of its user information (`user:password@`),
/// if any, replaced.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let Some((user, _)) = userinfo.split_once(':') else {
        return url.to_owned();
    };
    format!(
        "{scheme}://{user}:<redacted>@{}",
        &rest[userinfo.len() + 1..]
    )
}

/// The credentials of the primary (and replicas) the Sentinels name.
#[derive(Clone)]
pub(crate) struct PrimaryAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: String,
}

impl std::fmt::Debug for PrimaryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimaryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The commands' connection (cheap to clone; clones share it).
#[derive(Clone)]
pub(crate) enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Pinned),
}

/// What the owners' subscriptions are made from.
#[derive(Clone)]
pub(crate) enum Subscriber {
    Node(Client, Duration),
    Cluster(Vec<String>, Duration),
    Sentinel(Arc<Followed>),
}

/// Connects to `topology` within `timeout`; `auth` is for the primary
/// Sentinels name (elsewhere the URLs carry the credentials: an error).
pub(crate) async fn connect(
    topology: &Topology,
    auth: Option<&PrimaryAuth>,
    timeout: Duration,
) -> Result<(Conn, Subscriber), StoreError> {
    if auth.is_some() && !matches!(topology, Topology::Sentinel { .. }) {
        return Err(StoreError::Unavailable(
            "primary_auth is for a primary found through Sentinel; \
             on one node or a cluster the credentials go in the URLs (redis://user:password@host:port)"
                .into(),
        ));
    }
    match topology {
        Topology::Node(url) => {
            let client = Client::open(url.as_str()).map_err(unavailable)?;
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(2)
                .set_max_delay(timeout);
            let conn = bounded(
                timeout,
                ConnectionManager::new_with_config(client.clone(), config),
            )
            .await?;
            Ok((Conn::Node(conn), Subscriber::Node(client, timeout)))
        }
        Topology::Cluster(seeds) => {
            let client = cluster_client(seeds, timeout, None)?;
            let conn = bounded(timeout, client.get_async_connection()).await?;
            Ok((
                Conn::Cluster(conn),
                Subscriber::Cluster(seeds.clone(), timeout),
            ))
        }
        Topology::Sentinel { sentinels, master } => {
            let nodes = auth.map(|auth| {
                let mut info = RedisConnectionInfo::default().set_password(&auth.password);
                if let Some(username) = &auth.username {
                    info = info.set_username(username);
                }
                SentinelNodeConnectionInfo::default().set_redis_connection_info(info)
            });
            let sentinel = SentinelClient::build(
                sentinels.clone(),
                master.clone(),
                nodes,
                SentinelServerType::Master,
            )
            .map_err(unavailable)?;
            let (stop, listening) = tokio::sync::watch::channel(());
            let followed = Arc::new(Followed {
                sentinel: tokio::sync::Mutex::new(sentinel),
                current: Mutex::default(),
                timeout,
                _stop: stop,
            });
            let weak = Arc::downgrade(&followed);
            let on_switch: OnSwitch = Arc::new(move || {
                if let Some(followed) = weak.upgrade() {
                    *followed.current() = None;
                }
            });
            follow_switches(sentinels, master, timeout, &listening, &on_switch);
            // The primary found once now: a wrong name or no Sentinel
            // fails here, not at the first task.
            match tokio::time::timeout(timeout, followed.primary()).await {
                Ok(found) => drop(found.map_err(refused)?),
                Err(_) => return Err(timed_out(timeout)),
            }
            Ok((
                Conn::Sentinel(Pinned {
                    followed: followed.clone(),
                    conn: None,
                }),
                Subscriber::Sentinel(followed),
            ))
        }
    }
}

fn cluster_client(
    seeds: &[String],
    timeout: Duration,
    push: Option<mpsc::UnboundedSender<redis::PushInfo>>,
) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClient::builder(seeds.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3);
    if let Some(push) = push {
        // Pushes (the sharded channel's messages) come only over RESP3.
        builder = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(push);
    }
    builder.build().map_err(unavailable)
}

/// The primary a set of Sentinels names: the connection to it, kept until
/// it fails (a failover closes it, or turns its node read-only) or the
/// Sentinels announce a failover, then the Sentinels are asked again.
pub(crate) struct Followed {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    timeout: Duration,
    /// Dropped with the last clone of the store: its listeners for the
    /// Sentinels' announcements end.
    _stop: tokio::sync::watch::Sender<()>,
}

impl Followed {
    fn current(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client for the primary the Sentinels name now.
    async fn client(&self) -> RedisResult<Client> {
        self.sentinel.lock().await.async_get_client().await
    }

    /// The connection to the current primary, made if there is none.
    async fn primary(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.current().clone() {
            return Ok(conn);
        }
        let client = self.client().await?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.current() = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after an error that says it is no longer to
    /// the primary (or no longer there).
    fn failed(&self, e: &RedisError) {
        let lost = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || matches!(
                e.kind(),
                ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            );
        if lost {
            *self.current() = None;
        }
    }
}

/// One operation's connection to the Sentinels' primary: the first command
/// picks it, the next ones (a `WAIT` after its write) use the same, so
/// that a `WAIT` never counts the acknowledgements of another node.
#[derive(Clone)]
pub(crate) struct Pinned {
    followed: Arc<Followed>,
    conn: Option<MultiplexedConnection>,
}

/// Forgets the primary's connection if a command on it was dropped before
/// its answer (its time ran out).
struct Unanswered<'a>(Option<&'a Followed>);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(followed) = self.0 {
            *followed.current() = None;
        }
    }
}

impl Pinned {
    /// This operation's connection: the first call picks the primary's.
    async fn conn(&mut self) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = &self.conn {
            return Ok(conn.clone());
        }
        let conn = self.followed.primary().await?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// After an answer: an error that says the primary moved forgets it.
    fn answered<T>(&self, mut unanswered: Unanswered<'_>, out: &RedisResult<T>) {
        unanswered.0 = None;
        if let Err(e) = out {
            self.followed.failed(e);
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(p) => Box::pin(async move {
                let mut conn = p.conn().await?;
                let unanswered = Unanswered(Some(&*p.followed));
                let out = conn.req_packed_command(cmd).await;
                p.answered(unanswered, &out);
                out
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(p) => Box::pin(async move {
                let mut conn = p.conn().await?;
                let unanswered = Unanswered(Some(&*p.followed));
                let out = conn.req_packed_commands(pipeline, offset, count).await;
                p.answered(unanswered, &out);
                out
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}

impl Conn {
    /// Publishes `message` on `channel`: sharded (`SPUBLISH`) on a
    /// cluster, where the channel lives on the node of its slot; `PUBLISH`
    /// on one node.
    pub(crate) async fn publish(&mut self, channel: &str, message: String) -> RedisResult<()> {
        let command = match self {
            Self::Cluster(_) => "SPUBLISH",
            Self::Node(_) | Self::Sentinel(_) => "PUBLISH",
        };
        redis::cmd(command)
            .arg(channel)
            .arg(message)
            .exec_async(self)
            .await
    }

    /// Waits until `replicas` replicas acknowledged this connection's
    /// writes (the one to `key` included), for at most most of `timeout`:
    /// fewer is an error. On a cluster the `WAIT` goes to the primary of
    /// `key`'s slot.
    pub(crate) async fn wait(
        &mut self,
        key: &str,
        replicas: usize,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        if replicas == 0 {
            return Ok(());
        }
        // Redis answers before the call's own bound runs out.
        let ms = (millis(timeout) * 3 / 4).max(1);
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ms);
        let acked: i64 = match self {
            Self::Cluster(c) => {
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                let value = bounded(timeout, c.route_command(wait, to)).await?;
                redis::from_redis_value(value).map_err(|e| unavailable(e.into()))?
            }
            _ => bounded(timeout, wait.query_async(self)).await?,
        };
        if usize::try_from(acked).unwrap_or(0) < replicas {
            return Err(StoreError::Unavailable(
                format!("the write was acknowledged by {acked} of the {replicas} replicas asked")
                    .into(),
            ));
        }
        Ok(())
    }
}

/// An owner's subscription to its channel.
pub(crate) enum Subscription {
    Node(PubSubStream),
    /// The cluster connection is kept: dropping it ends the subscription
    /// (redis-rs subscribes again after a reconnection to the slot's node).
    Cluster {
        _conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
    },
}

impl Subscriber {
    /// Subscribes to `channel` (sharded, `SSUBSCRIBE`, on a cluster).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<Subscription, StoreError> {
        match self {
            Self::Node(client, timeout) => node_subscription(client, channel, *timeout).await,
            Self::Sentinel(followed) => {
                let timeout = followed.timeout;
                let client = bounded(timeout, followed.client()).await?;
                node_subscription(&client, channel, timeout).await
            }
            Self::Cluster(seeds, timeout) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let client = cluster_client(seeds, *timeout, Some(tx))?;
                let mut conn = bounded(*timeout, client.get_async_connection()).await?;
                bounded(*timeout, conn.ssubscribe(channel)).await?;
                Ok(Subscription::Cluster {
                    _conn: conn,
                    pushes: rx,
                })
            }
        }
    }
}

async fn node_subscription(
    client: &Client,
    channel: &str,
    timeout: Duration,
) -> Result<Subscription, StoreError> {
    let mut pubsub = bounded(timeout, client.get_async_pubsub()).await?;
    bounded(timeout, pubsub.subscribe(channel)).await?;
    Ok(Subscription::Node(pubsub.into_on_message()))
}

impl Subscription {
    /// The next message's payload; `None` when the subscription is gone.
    pub(crate) async fn next(&mut self) -> Option<String> {
        loop {
            match self {
                Self::Node(stream) => {
                    if let Ok(payload) = stream.next().await?.get_payload::<String>() {
                        return Some(payload);
                    }
                }
                Self::Cluster { pushes, .. } => {
                    let push = pushes.recv().await?;
                    if push.kind != PushKind::SMessage {
                        continue;
                    }
                    let payload = push.data.into_iter().nth(1);
                    if let Some(Ok(payload)) = payload.map(redis::from_redis_value::<String>) {
                        return Some(payload);
                    }
                }
            }
        }
    }
}

/// An error finding the primary through the Sentinels; a refused
/// password says where each password goes.
fn refused(e: RedisError) -> StoreError {
    let auth = e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
    if !auth {
        return unavailable(e);
    }
    StoreError::Unavailable(
        format!(
            "{e} (the primary's credentials are set with RedisStoreBuilder::primary_auth, \
             a Sentinel's go in its URL: redis://:password@host:port)"
        )
        .into(),
    )
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
        Err(_) => Err(timed_out(timeout)),
    }
}

fn timed_out(timeout: Duration) -> StoreError {
    StoreError::Unavailable(format!("Redis did not answer within {timeout:?}").into())
}

/// The longest expiry this store asks of Redis (100 years): a longer
/// setting (`Duration::MAX` for "forever") is taken as this, where Redis
/// would refuse it.
pub(crate) const MAX_PX: u64 = 100 * 365 * 24 * 3600 * 1000;

/// `d` in milliseconds for `PX`: at least 1, at most [`MAX_PX`].
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_PX)
}
