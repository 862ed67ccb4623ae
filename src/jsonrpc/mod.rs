//! JSON-RPC 2.0 wire types, decoded only as far as the layers need.
//!
//! A request is decoded once: its `id`, `method` and `params._meta.progressToken`
//! are read, and `params` itself is kept as raw JSON ([`RawValue`](serde_json::value::RawValue)) for the
//! handler, so nothing is parsed twice.
//!
//! ```
//! use tower_mcp_cancel::jsonrpc::{Message, RequestId};
//!
//! let line = br#"{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"echo","_meta":{"progressToken":7}}}"#;
//! let Message::Request(req) = Message::decode(line).unwrap() else { panic!() };
//! assert_eq!(req.id, RequestId::from("1"));
//! assert_ne!(req.id, RequestId::from(1)); // "1" and 1 are different ids
//! assert_eq!(req.progress_token.unwrap().to_string(), "7");
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

mod encode;
mod error;
mod id;
mod message;
mod method;
mod params;

#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) use encode::encode_cancelled;
pub use encode::{encode_notification, encode_request, encode_response};
pub use error::ErrorObject;
pub use id::{ProgressToken, RequestId};
pub use message::{DecodeError, Message, RawNotification, RawRequest, RawResponse};
pub use method::Method;
pub(crate) use method::{CANCELLED, PROGRESS, SUBSCRIPTIONS_LISTEN};
pub(crate) use params::{params_with_progress_token, peek_progress_token};
pub use params::{CancelledParams, ProgressParams};
pub(crate) use params::{PROTOCOL_VERSION_META, SUBSCRIPTION_ID_META};

#[cfg(test)]
mod tests;
