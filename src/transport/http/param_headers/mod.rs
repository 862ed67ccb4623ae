//! `x-mcp-header`: tool parameters mirrored into `Mcp-Param-{Name}` headers.
//!
//! A server may annotate properties of a tool's `inputSchema` with
//! `"x-mcp-header": "Region"`; a Streamable HTTP client then sends the
//! argument's value in `Mcp-Param-Region` (with the Base64 sentinel encoding
//! when it is not plain ASCII), and the server checks the header against the
//! body. A [`ToolHeaderMap`] holds what each tool's schema declares,
//! parsed and validated against every constraint of the spec, for
//! [`HttpClient`](super::HttpClient) (which learns them from `tools/list`)
//! and [`StreamableHttpService`](super::StreamableHttpService) (which is told
//! them); an annotation it refuses is an [`InvalidParamHeader`].
//!
//! ```
//! use serde_json::json;
//! use tower_mcp_cancel::transport::http::param_headers::ToolHeaderMap;
//!
//! let schema = json!({
//!     "type": "object",
//!     "properties": {
//!         "region": {"type": "string", "x-mcp-header": "Region"},
//!         "query": {"type": "string"}
//!     }
//! });
//! let tools = ToolHeaderMap::new().with_tool("run_query", &schema).unwrap();
//! assert_eq!(tools.len(), 1);
//!
//! // An annotation under `items` (not statically reachable) invalidates the tool.
//! let bad = json!({"type": "object", "properties": {"list": {"type": "array",
//!     "items": {"type": "string", "x-mcp-header": "Item"}}}});
//! let err = ToolHeaderMap::new().with_tool("bad", &bad).unwrap_err();
//! assert_eq!(err.pointer(), "/properties/list/items");
//! ```
//!
//! Choices where the spec leaves room, each on the strict side:
//! * `type` must be `"string"`, `"integer"` or `"boolean"`, or a list of one
//!   of those and `"null"` (a nullable parameter: `null` omits the header);
//!   a missing `type` is rejected like `"number"`.
//! * Values are converted by their JSON type (string as-is, integer in
//!   decimal, boolean `true`/`false`); a number with a fraction, an integer
//!   outside ±(2<sup>53</sup>−1), an object or an array cannot be mirrored:
//!   the client refuses to send it, the server answers `HeaderMismatch`.
//! * The server rejects a header that has no value in the body (absent or
//!   `null`) and a header sent more than once: both are a header that does
//!   not match the body.
//!
//! Inside, leaves first: `error` (the errors), `value` (argument values as
//! header values), `param` (one annotation), `schema` (reading them out of
//! a schema), `tool` (one tool's set), `map` (per tool name).

mod error;
mod map;
mod param;
mod schema;
mod tool;
mod value;

pub use error::InvalidParamHeader;
#[cfg(test)]
use error::InvalidReason;
pub use map::ToolHeaderMap;
#[cfg(test)]
use tool::ParamHeaders;

#[cfg(test)]
mod tests;
