//! Tasks (the `io.modelcontextprotocol/tasks` extension, feature `tasks`):
//! long-running `tools/call`s that outlive their request, and **cancelling
//! a task is dropping its future**, as for any request.
//!
//! [`TasksLayer`] wraps any MCP request service. A `tools/call` whose tool
//! has a [`TaskPolicy`] and whose request declared the extension runs as
//! usual; if it has not ended after the policy's delay, its future is taken
//! out of the request and handed to the layer's executor, and the request
//! is answered with a `CreateTaskResult` once the task's record is in the
//! [`TaskStore`] (a `tasks/get` for it then finds it). From then on:
//!
//! * the work runs under a [`Cancellation`](crate::Cancellation) of its
//!   own: the creating request's stream no longer reaches it, and nothing
//!   is written on that stream (its progress messages become the task's
//!   `statusMessage`, see [`RequestContext::progress`](crate::RequestContext::progress));
//! * `tasks/cancel` records the task `cancelled` at once, fires the work's
//!   token, runs the [grace](TasksLayer::grace) and drops the future; a
//!   result that comes later is dropped (a terminal status never changes);
//! * the TTL is a hard maximum, enforced by a timer: at `createdAt +
//!   ttlMs` the token fires, the grace runs, the future is dropped and the
//!   task is `failed` with an error that says its TTL elapsed; its record
//!   is kept for the [retention](TasksLayer::retention), then gone;
//! * `tasks/get` is answered from the store, without calling the inner
//!   service; `tasks/update` delivers the client's answers to the
//!   handler's [input requests](TaskContext::input);
//! * a `subscriptions/listen` that asks for `taskIds` (and nothing else)
//!   is acknowledged with those the caller may see, and each of their
//!   changes is sent as `notifications/tasks`;
//! * the [shutdown](TasksLayer::shutdown) token stops every task after the
//!   drain grace, and [`TasksHandle::drained`] says when they all ended.
//!
//! # Several replicas
//!
//! A task's work runs on the replica that created it; its `tasks/*` may
//! land on any replica behind a balancer. With a [`TaskStore`] shared by
//! the replicas (e.g. the `tower-mcp-cancel-redis` package), each layer is
//! an *owner* with a random id, named in its tasks' records
//! ([`TaskRecord::owner`]): a `tasks/cancel` or `tasks/update` served by
//! another replica is written to the store and signalled to the owner
//! ([`TaskSignal`]), whose executor stops the work or hands the answers to
//! the waiting handler; and a task whose owner's lease lapsed reads
//! `failed` ("its server went away") instead of `working` forever. The
//! in-memory store is one process's: it needs none of this.
//!
//! A request that did not declare the extension never gets a task (a tool
//! whose policy is [`required`](TaskPolicy::required) is refused `-32021`),
//! nor may it use `tasks/*` (`-32021`). `server/discover` answers carry the
//! extension in `capabilities.extensions`.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder};
//! use tower_mcp_cancel::tasks::{TaskPolicy, TasksLayer};
//! use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, TimeoutLayer};
//!
//! let tasks = TasksLayer::new()
//!     .tool("export", TaskPolicy::required())
//!     .tool("search", TaskPolicy::optional().after(Duration::from_secs(2)))
//!     .ttl(Some(Duration::from_secs(600)))
//!     .grace(Duration::from_millis(500));
//! let server = ServiceBuilder::new()
//!     .layer(CancelOnDisconnectLayer::new()) // the creating request
//!     .layer(tasks)
//!     .layer(TimeoutLayer::new(Duration::from_secs(60))) // each call, task or not
//!     .service(service_fn(|req: McpRequest| async move {
//!         Ok::<_, tower::BoxError>(serde_json::json!({"content": []}))
//!     }));
//! # let _ = server;
//! ```
//!
//! Layers outside the tasks layer bound the creating request only; layers
//! inside it bound the work, task or not.
//!
//! # Observability
//!
//! Each task has a span, `mcp.server.task` (target
//! `tower_mcp_cancel::task`), with `mcp.task.id`, `gen_ai.tool.name`,
//! `mcp.task.outcome` (`completed`, `failed`, `cancelled`, `expired`,
//! `shutdown`, `store_error`) and, for a stopped task with a grace,
//! `mcp.grace` (`finished` or `dropped`); an `info` event when it is
//! created and when it ends. With the `metrics` feature, the counter
//! `mcp.server.tasks` counts them by `mcp.task.outcome` (and `created`),
//! and `mcp.server.tasks.grace` the graces of stopped tasks by `mcp.grace`
//! (`finished`, `dropped`).

mod client;
mod context;
mod executor;
pub mod future;
mod layer;
mod listen;
mod owner;
mod policy;
mod record;
mod service;
mod shared;
mod store;

pub use client::{
    declare_extension, DetailedTask, InvalidTaskAnswer, KeepTaskHandle, TaskCall, TaskCallLayer,
    TaskClient,
};
pub use context::{InputError, TaskContext};
pub use future::TasksResponse;
pub use layer::{TasksHandle, TasksLayer};

pub use policy::TaskPolicy;
pub use record::{TaskChange, TaskEnd, TaskRecord, TaskStatus, EXTENSION};
pub use service::Tasks;
pub use store::{MemoryStore, StoreError, TaskSignal, TaskStore};

#[cfg(test)]
mod tests;
