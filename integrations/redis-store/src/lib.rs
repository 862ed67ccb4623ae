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
//! # How it keeps the store's rules
//!
//! * **Creation** is a `SET NX` acknowledged by Redis before
//!   [`create`](TaskStore::create) resolves (in the same `MULTI` as the
//!   owner's lease), so a `tasks/get` on any replica finds the task once
//!   its `CreateTaskResult` is sent. With Redis replicas of its own, add
//!   `WAIT` to your deployment's durability needs: this store does not.
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
//!   `PUBLISH`es to the owner's channel; `tasks/update` answers go to a hash
//!   (the task's inbox) before the `PUBLISH`. Pub/sub is at most once, so the
//!   owner also re-reads its own live tasks every
//!   [`reread`](RedisStoreBuilder::reread) period: an ended record, or a
//!   non-empty inbox, is delivered then. A lost message costs at most one
//!   period.
//! * **The owner lease** is a key with `PX` =
//!   [`lease`](RedisStoreBuilder::lease), set with each task's creation
//!   and refreshed by the owner while its executor polls its signals.
//!
//! When Redis cannot be reached, every call fails within the
//! [`timeout`](RedisStoreBuilder::timeout) with
//! [`StoreError::Unavailable`]; the connection is re-established when
//! Redis is back.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod conn;
mod signals;
mod store;
mod tasks;

pub use store::{RedisStore, RedisStoreBuilder};

#[doc(no_inline)]
pub use tower_mcp_cancel::tasks::{StoreError, TaskStore};
