//! A Redis [`TaskStore`] for `tower-mcp-cancel`'s tasks: several replicas
//! of one MCP server behind a load balancer, with no stickiness, behave as
//! one server for tasks. A task created through one replica is read,
//! updated and cancelled through any; a `tasks/cancel` (or `tasks/update`)
//! served by another replica reaches the replica that runs the work, which
//! drops it; a replica that goes away leaves its tasks `failed` once its
//! lease lapses, not `working` forever.
//!
//! ```no_run
//! use std::time::Duration;
//! use tower_mcp_cancel::tasks::{TaskPolicy, TasksLayer};
//! use tower_mcp_cancel_redis::RedisStore;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder("redis://127.0.0.1:6379/")
//!     .reread(Duration::from_secs(1))
//!     .connect()
//!     .await?;
//! let tasks = TasksLayer::with_store(store).tool("export", TaskPolicy::required());
//! # let _ = tasks; Ok(()) }
//! ```
//!
//! # Topologies
//!
//! | your Redis | the call | what the store does |
//! | --- | --- | --- |
//! | one node (or a managed primary endpoint that follows failovers by DNS) | [`RedisStore::builder`]`("redis://host:6379/")` | one multiplexed connection, re-made when lost; keys and channels as in 0.1.0 |
//! | Redis Cluster, Valkey cluster, a managed service in cluster mode | [`RedisStore::cluster`]`(["redis://a:6379", "redis://b:6379"])` (some nodes; the rest is found) | redis-rs's cluster client (follows `MOVED`/`ASK`, one connection per node); hash-tagged keys, so that every operation's keys share one slot; owners' signals by sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`, Redis 7+, Valkey) |
//! | a primary and replicas under Sentinel | [`RedisStore::sentinel`]`(["redis://s1:26379", "redis://s2:26379"], "mymaster")` | asks the Sentinels for the primary (and checks its `ROLE`); asks again when they announce a failover (`+switch-master`) and after a call finds it gone, read-only, or silent past the timeout |
//!
//! ```no_run
//! # use std::time::Duration;
//! # use tower_mcp_cancel_redis::RedisStore;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let on_a_cluster = RedisStore::cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"])
//!     .acknowledged_by(1)
//!     .connect()
//!     .await?;
//! let through_sentinel = RedisStore::sentinel(["redis://10.0.0.9:26379"], "mymaster")
//!     .acknowledged_by(1)
//!     .connect()
//!     .await?;
//! # let _ = (on_a_cluster, through_sentinel); Ok(()) }
//! ```
//!
//! **Passwords and TLS.** On one node and on a cluster the URLs carry the
//! credentials (`redis://user:password@host:6379/`). Through Sentinel each
//! Sentinel's URL carries its own, and the primary's (and its replicas')
//! are given once with
//! [`primary_auth`](RedisStoreBuilder::primary_auth); given for another
//! topology, [`connect`](RedisStoreBuilder::connect) fails rather than
//! ignore it. A primary that refuses the credentials, or asks for some
//! that were not given, makes `connect` fail with an error naming
//! `primary_auth`. This build enables none of the redis crate's TLS
//! features: a `rediss://` URL (of a node, a seed or a Sentinel) fails
//! at `connect`, and TLS to a primary found through Sentinel is not
//! served. No `Debug` output shows a password.
//!
//! ```no_run
//! # use tower_mcp_cancel_redis::RedisStore;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let secured = RedisStore::sentinel(["redis://:sentinel-secret@10.0.0.9:26379"], "mymaster")
//!     .primary_auth(None, "primary-secret") // `requirepass`; Some("user") for an ACL user
//!     .connect()
//!     .await?;
//! # let _ = secured; Ok(()) }
//! ```
//!
//! During a failover every call fails within the
//! [`timeout`](RedisStoreBuilder::timeout) with [`StoreError::Unavailable`]
//! (it never hangs), and calls succeed again once the new primary serves:
//! on a cluster when the cluster has promoted a replica (about twice its
//! `cluster-node-timeout`; 1.3 s with 1 s in the tests), through Sentinel
//! when the Sentinels have (their `down-after-milliseconds` plus the
//! election; 1.7 s with 500 ms in the tests), plus at most one timeout.
//!
//! # Durability
//!
//! Redis replicates asynchronously: a write its primary acknowledged can be
//! lost if the primary dies before a replica has it.
//! [`acknowledged_by(n)`](RedisStoreBuilder::acknowledged_by) makes a
//! creation (before its `CreateTaskResult` is sent) and a task's end wait
//! (`WAIT n`) until `n` replicas have them; what a failover keeps:
//!
//! | setting | a primary killed (`kill -9`), a replica promoted | a planned failover (`CLUSTER FAILOVER`, `SENTINEL FAILOVER`) | fewer than `n` replicas answer |
//! | --- | --- | --- | --- |
//! | `acknowledged_by(0)` (the default) | an acknowledged task **may be lost** (acknowledged before a replica had it) | `CLUSTER FAILOVER`: every acknowledged task **survives** (Redis holds the primary's clients until its replica has caught up). `SENTINEL FAILOVER`: every task the replica had when the failover began **survives**; a task acknowledged by the old primary between the replica's promotion and the Sentinels' announcement of it (`+switch-master`, which the store listens for: up to about a second) **may be lost** (in the tests, 8 to 74 of some 650 creations, over 0.1 to 1.1 s): it reads unknown on every replica of the server, and its owner drops its work at its next re-read. | — |
//! | `acknowledged_by(n)`, `n` ≥ 1 | every acknowledged task **survives** (and its end, once written) | every acknowledged task **survives** | a creation **fails** (the client gets an error, the work does not run); an end is written again until acknowledged |
//!
//! "Survives" holds when the promoted replica is one that acknowledged:
//! with `n` equal to the replicas of each primary, any of them. The
//! package's `tests/cluster.rs` and `tests/sentinel.rs` prove each cell
//! against real `redis-server` and `redis-sentinel` processes. A `WAIT`
//! counts the acknowledgements of the connection that wrote: through
//! Sentinel it goes over that very connection; on one node and on a
//! cluster (to the primary of the key's slot) a reconnection or a failover
//! in the microseconds between a write and its `WAIT` is not covered.
//!
//! # How it keeps the store's rules
//!
//! * **Creation** is a `SET NX` acknowledged by Redis (and, with
//!   [`acknowledged_by`](RedisStoreBuilder::acknowledged_by), by replicas)
//!   before [`create`](TaskStore::create) resolves, so a `tasks/get` on any
//!   replica finds the task once its `CreateTaskResult` is sent. The
//!   owner's lease is written with it (in the same `MULTI` on one node;
//!   just before it on a cluster, where the two keys live in different
//!   slots).
//! * **Changes and ends** are read, applied by the crate's
//!   [`TaskRecord::apply`](tower_mcp_cancel::tasks::TaskRecord::apply) /
//!   [`end`](tower_mcp_cancel::tasks::TaskRecord::end), and written back by
//!   a compare-and-set Lua script (the write happens only if the record is
//!   still the one read; otherwise it is read again). Of two racing ends
//!   the first to write wins; the other reads a terminal record and
//!   returns `false`.
//! * **Expiry** is Redis's own: an ended record gets `PX` = the
//!   retention; a live record `PX` = its TTL plus
//!   [`backstop`](RedisStoreBuilder::backstop) (a task without a TTL has
//!   no expiry while it runs).
//! * **Signals to the owner**: a `tasks/cancel` records the end, then
//!   publishes to the owner's channel (`PUBLISH`; `SPUBLISH` on a
//!   cluster); `tasks/update` answers go to a hash
//!   (the task's inbox) before the `PUBLISH`. Pub/sub is at most once, so the
//!   owner also re-reads its own live tasks every
//!   [`reread`](RedisStoreBuilder::reread) period: an ended record, or a
//!   non-empty inbox, is delivered then. A lost message costs at most one
//!   period.
//! * **The owner lease** is a key with `PX` =
//!   [`lease`](RedisStoreBuilder::lease), set with each task's creation
//!   and refreshed by the owner while its executor polls its signals.
//!
//! # Commands
//!
//! The store sends `GET`, `MGET`, `SET` (`NX`, `PX`, `KEEPTTL`), `EXISTS`,
//! `HSET`, `HGETALL`, `DEL`, `PEXPIRE`, `MULTI`/`EXEC`, `EVALSHA` (`EVAL`,
//! `SCRIPT LOAD` when the script is not cached; the script calls `GET` and
//! `SET`), `PUBLISH`/`SUBSCRIBE` (one node, Sentinel),
//! `SPUBLISH`/`SSUBSCRIBE` (cluster) and `WAIT` (with `acknowledged_by`);
//! through Sentinel it subscribes to the Sentinels' `+switch-master`;
//! the client library adds `CLUSTER SLOTS` and `HELLO 3` (cluster),
//! `SENTINEL MASTERS`, `ROLE` (Sentinel), and `CLIENT SETINFO` (its name,
//! an error ignored). Valkey 8 serves every one of them, as do managed
//! services in cluster mode: no administrative command (`CONFIG`, `DEBUG`,
//! `KEYS`, cluster changes) is used.
//!
//! When Redis cannot be reached, every call fails within the
//! [`timeout`](RedisStoreBuilder::timeout) with
//! [`StoreError::Unavailable`]; the connection is re-established when
//! Redis is back.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod conn;
mod sentinel;
mod signals;
mod store;
mod tasks;

pub use store::{RedisStore, RedisStoreBuilder};

#[doc(no_inline)]
pub use tower_mcp_cancel::tasks::{StoreError, TaskStore};
