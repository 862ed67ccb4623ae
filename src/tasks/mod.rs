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
//!     .ttl(Some(Duration::from_secs(600))) // what a task may take
//!     .grace(Duration::from_millis(500));
//! let server = ServiceBuilder::new()
//!     .layer(CancelOnDisconnectLayer::new())
//!     // Outside the tasks layer: bounds plain calls, and the creating
//!     // request of a task (not its work).
//!     .layer(TimeoutLayer::new(Duration::from_secs(60)))
//!     .layer(tasks)
//!     .service(service_fn(|req: McpRequest| async move {
//!         Ok::<_, tower::BoxError>(serde_json::json!({"content": []}))
//!     }));
//! # let _ = server;
//! ```
//!
//! # Limits and the TTL
//!
//! Layers outside the tasks layer bound the creating request only (the
//! call until it is answered, with its result or a `CreateTaskResult`);
//! the TTL bounds a task's work. Layers *inside* the tasks layer bound the
//! work, task or not: such a limit still ends a task's work at its
//! deadline, so **a task's TTL is capped to it** — the `ttlMs` the task
//! reports is the one enforced (a limit of 60 s under a TTL of 600 s
//! reports `ttlMs: 60000` less the time before the promotion), and
//! [`TaskContext::extend_ttl`] never extends past it. A task a limit stops
//! ends `failed` with the limit's error, with or without a grace.
//!
//! # How a task ends
//!
//! | what happened | status | its error or message |
//! | --- | --- | --- |
//! | the handler answered | `completed` | its result |
//! | the handler returned an error | `failed` | that error |
//! | the handler panicked | `failed` | `-32603` "task handler panicked" |
//! | `tasks/cancel` (here or on another replica), or the creating request cancelled before the task was announced | `cancelled` | why |
//! | the TTL elapsed | `failed` | `-32603` "task TTL elapsed", `data.ttlMs` |
//! | a limit inside the tasks layer | `failed` | the limit's error |
//! | the shutdown, after the drain grace | `failed` | `-32603` "the server shut down" |
//! | the record could not be created | — (the call is answered with the store's error) | the record, should its write have landed, `failed` |
//! | the replica running it went away (a shared store) | `failed` | "its server went away" |
//!
//! Every task ends, whatever its store does: each store call is bounded
//! ([`TasksLayer::store_timeout`]) and a panic in it caught; an end the
//! store fails is written again until it takes it (from 50 ms apart,
//! doubling, at most 5 s apart: once the store is back, the record is
//! terminal within 5 s and one store call), while the task's slot is free
//! and this process answers `tasks/get` with that end; a handler waiting
//! for input hears that its task ended before its grace starts.
//!
//! # A whole server, and its shutdown
//!
//! The server transports hand their shutdown token to the tasks their
//! requests create: give the token to the transport (for Streamable HTTP,
//! to the service and to `serve`), and
//! the tasks stop with it after the layer's
//! [drain grace](TasksLayer::drain_grace) ([`TasksLayer::shutdown`] is for
//! a transport of your own). Then wait for [`TasksHandle::drained`]: it
//! resolves once every task ended and its end is in the store.
//! [`BoxTasksService`] names the stack's type, for a function that
//! builds it.
//!
#![cfg_attr(feature = "http", doc = "```no_run")]
#![cfg_attr(not(feature = "http"), doc = "```ignore")]
//! use std::time::Duration;
//! use tokio_util::sync::CancellationToken;
//! use tower::{service_fn, BoxError, ServiceBuilder};
//! use tower_mcp_cancel::tasks::{BoxTasksService, TaskPolicy, TasksHandle, TasksLayer};
//! use tower_mcp_cancel::transport::http::{serve, StreamableHttpService};
//! use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest};
//!
//! async fn export(_req: McpRequest) -> Result<serde_json::Value, BoxError> {
//!     tokio::time::sleep(Duration::from_secs(30)).await;
//!     Ok(serde_json::json!({"content": [{"type": "text", "text": "exported"}]}))
//! }
//!
//! fn mcp() -> (BoxTasksService, TasksHandle) {
//!     let tasks = TasksLayer::new()
//!         .tool("export", TaskPolicy::required())
//!         .drain_grace(Duration::from_secs(10));
//!     let handle = tasks.handle();
//!     let stack = ServiceBuilder::new()
//!         .layer(CancelOnDisconnectLayer::new())
//!         .layer(tasks)
//!         .service(service_fn(export));
//!     (BoxTasksService::new(stack), handle)
//! }
//!
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! let shutdown = CancellationToken::new();
//! let (stack, tasks) = mcp();
//! let app = axum::Router::new().route_service(
//!     "/mcp",
//!     StreamableHttpService::new(stack).shutdown(shutdown.clone()),
//! );
//! let signal = shutdown.clone();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     signal.cancel();
//! });
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, app, shutdown).await; // requests drained
//! tasks.drained().await; // tasks stopped (after their drain grace) and written
//! # Ok(()) }
//! ```
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
mod runner;
mod service;
mod shared;
mod slots;
mod store;
mod watched;

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

/// A tasks stack behind one type: a [`Tasks`] service (over any inner
/// stack whose response is `R`) boxed, so that a function can return it
/// and a transport (or axum) take it: `BoxTasksService::new(stack)` makes
/// one (see the [module docs](self#a-whole-server-and-its-shutdown);
/// tower's `ServiceBuilder::boxed_clone_sync` asks a `Sync` future of the
/// stack, which a tasks stack's is not).
pub type BoxTasksService<R = serde_json::Value> =
    tower::util::BoxCloneSyncService<crate::McpRequest, TasksResponse<R>, crate::error::BoxError>;

#[cfg(test)]
mod tests;
