//! The JSON-RPC 2.0 values a handler or a layer deals with: request ids,
//! progress tokens, method names and error objects.
//!
//! The transports decode a request once: its `id`, `method` and
//! `params._meta.progressToken` are read, and `params` itself is kept as raw
//! JSON ([`RawValue`](serde_json::value::RawValue)) for the handler, so
//! nothing is parsed twice. That codec is internal to the transports.
//!
//! ```
//! use tower_mcp_cancel::jsonrpc::{ErrorObject, RequestId};
//!
//! assert_ne!(RequestId::from("1"), RequestId::from(1)); // "1" and 1 are different ids
//! let error = ErrorObject::new(ErrorObject::INVALID_PARAMS, "no such tool");
//! assert_eq!(error.code, -32602);
//! ```

//! The module runs one way: ids and tokens, method names and error objects
//! first; the params the layers read; the message envelope and its
//! decoding; encoding.

// The codec serves the transports: a build without one of them (or both)
// leaves parts of it unused.
#![cfg_attr(
    not(all(feature = "stdio", feature = "http")),
    allow(unused_imports, dead_code)
)]

// `encode` and `message` are crate-private; their items are `pub` only so
// that the fuzz entry points (`__fuzz`) can re-export them.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub(crate) mod encode;
mod error;
mod id;
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub(crate) mod message;
mod method;
mod params;

#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) use encode::encode_cancelled;
pub(crate) use encode::{encode_notification, encode_request, encode_response};
pub use error::ErrorObject;
pub use id::{ProgressToken, RequestId};
pub(crate) use message::{Message, RawNotification, RawRequest, RawResponse};
pub use method::Method;
pub(crate) use method::{CANCELLED, PROGRESS, SUBSCRIPTIONS_LISTEN, TOOLS_CALL};
pub(crate) use params::{json_str, params_with_progress_token, ParamsPeek, ParamsView};
pub(crate) use params::{CancelledParams, ProgressParams};
pub(crate) use params::{CLIENT_CAPABILITIES_META, PROTOCOL_VERSION_META, SUBSCRIPTION_ID_META};

#[cfg(test)]
mod tests;
