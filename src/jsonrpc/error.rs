//! [`ErrorObject`]: the JSON-RPC error object and its codes.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::Elapsed;

/// A JSON-RPC error object (`{"code", "message", "data"?}`).
///
/// It is also the error a handler returns to have the transport answer with
/// that error, and the error a client service reports for an error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl ErrorObject {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// HTTP headers do not match the body (Streamable HTTP, 2026-07-28).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// A required client capability is missing (2026-07-28).
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// The requested protocol version is not supported (2026-07-28).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The error a server answers for a failed call: an [`ErrorObject`] as
    /// it is, an [`Elapsed`](crate::Elapsed) with its limit, a
    /// [`Cancelled`](crate::Cancelled) nobody asked for (the handler's own,
    /// or a layer inside the stack) as an internal error that says so,
    /// anything else as an internal error carrying its message.
    ///
    /// Public so that an SDK adapter answers a failed call exactly as this
    /// crate's transports do: the one mapping for every transport and
    /// integration.
    pub fn of_error(error: &(dyn std::error::Error + 'static)) -> Self {
        if let Some(e) = error.downcast_ref::<ErrorObject>() {
            return e.clone();
        }
        if let Some(e) = error.downcast_ref::<Elapsed>() {
            return e.to_error_object();
        }
        let message = match error.downcast_ref::<crate::Cancelled>() {
            Some(c) => format!("request cancelled by the server: {}", c.reason()),
            None => error.to_string(),
        };
        Self::new(Self::INTERNAL_ERROR, message)
    }

    /// Attaches `data`.
    #[must_use]
    pub fn with_data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JSON-RPC error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorObject {}

// Here rather than in `error`, so that the outcomes import nothing of the
// wire types (the wire types map them).
impl Elapsed {
    /// The JSON-RPC error a server answers with when its own limit fires.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(ErrorObject::INTERNAL_ERROR, self.to_string()).with_data(
            serde_json::json!({ "limit": self.limit().to_string(), "afterMs": self.after().as_millis() as u64 }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorObject;

    #[test]
    fn a_failed_call_keeps_its_error_object_and_anything_else_is_an_internal_error_with_its_message(
    ) {
        let io = std::io::Error::other("disk on fire");
        let e = ErrorObject::of_error(&io);
        assert_eq!(e.code, ErrorObject::INTERNAL_ERROR);
        assert_eq!(e.message, "disk on fire");
        let own = ErrorObject::new(-32001, "mine");
        assert_eq!(ErrorObject::of_error(&own), own);
    }
}
