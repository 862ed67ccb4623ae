//! The layers: the three MCP layers under a paused clock ([`mcp`]), and the
//! layers around plain HTTP services ([`http`]).

#[path = "../support/mod.rs"]
mod support;

#[cfg(all(feature = "stdio", feature = "http"))]
mod after_end;
mod composition;
mod composition_orders;
mod deadlines;
mod http;
mod mcp;
mod per_tool;
#[cfg(all(feature = "stdio", feature = "http"))]
mod progress_rules;
