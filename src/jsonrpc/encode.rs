//! Encoding: every message is one line of JSON (the stdio framing), built
//! without an intermediate tree.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;

use super::error::ErrorObject;
use super::id::RequestId;

/// Serializes `value` as one line of JSON (without the trailing newline).
///
/// `serde_json` writes no whitespace of its own and escapes control
/// characters inside strings, so the only line breaks its output can hold
/// come from raw JSON passed through verbatim ([`RawValue`]: a client's raw
/// params, a handler's raw result, a body forwarded from HTTP), where they
/// are insignificant whitespace between tokens. They become spaces: every
/// message is exactly one line, whatever its source.
fn to_line<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = serde_json::to_vec(value)?;
    for b in bytes.iter_mut() {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    Ok(bytes)
}

/// The `notifications/cancelled` line for request `id`, with `reason`: the
/// one encoding of a cancel, for both clients and a server's listen
/// teardown. Fails only as [`encode_notification`] does (never, for an id
/// and a string).
#[cfg(any(feature = "stdio", feature = "http"))]
pub(crate) fn encode_cancelled(
    id: &RequestId,
    reason: String,
) -> Result<Vec<u8>, serde_json::Error> {
    encode_notification(
        super::CANCELLED,
        &super::CancelledParams {
            request_id: id.clone(),
            reason: Some(reason),
        },
    )
}

/// Serializes a notification line (without the trailing newline). Fails
/// only when `params` cannot be serialized.
pub fn encode_notification<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
) -> Result<Vec<u8>, serde_json::Error> {
    struct N<'a, P: ?Sized>(&'a str, &'a P);
    impl<P: Serialize + ?Sized> Serialize for N<'_, P> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(3))?;
            m.serialize_entry("jsonrpc", "2.0")?;
            m.serialize_entry("method", self.0)?;
            m.serialize_entry("params", self.1)?;
            m.end()
        }
    }
    to_line(&N(method, params))
}

/// Serializes a request line (without the trailing newline).
pub fn encode_request(
    id: &RequestId,
    method: &str,
    params: Option<&RawValue>,
) -> Result<Vec<u8>, serde_json::Error> {
    struct R<'a>(&'a RequestId, &'a str, Option<&'a RawValue>);
    impl Serialize for R<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(None)?;
            m.serialize_entry("jsonrpc", "2.0")?;
            m.serialize_entry("id", self.0)?;
            m.serialize_entry("method", self.1)?;
            if let Some(p) = self.2 {
                m.serialize_entry("params", p)?;
            }
            m.end()
        }
    }
    to_line(&R(id, method, params))
}

/// Serializes a response line (without the trailing newline). `id: None`
/// leaves the id out, for errors about requests whose id could not be read
/// (the 2026-07-28 schema makes it optional on error responses). A result
/// that cannot be serialized is answered with an internal error instead.
pub fn encode_response<T: Serialize + ?Sized>(
    id: Option<&RequestId>,
    outcome: Result<&T, &ErrorObject>,
) -> Vec<u8> {
    struct R<'a, T: ?Sized>(Option<&'a RequestId>, Result<&'a T, &'a ErrorObject>);
    impl<T: Serialize + ?Sized> Serialize for R<'_, T> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(None)?;
            m.serialize_entry("jsonrpc", "2.0")?;
            if let Some(id) = self.0 {
                m.serialize_entry("id", id)?;
            }
            match self.1 {
                Ok(result) => m.serialize_entry("result", result)?,
                Err(error) => m.serialize_entry("error", error)?,
            }
            m.end()
        }
    }
    match to_line(&R(id, outcome)) {
        Ok(v) => v,
        // A result that cannot be serialized becomes an internal error, never a panic.
        Err(e) => {
            tracing::warn!(error = %e, "result not serializable; answered with an internal error");
            let err = ErrorObject::new(
                ErrorObject::INTERNAL_ERROR,
                format!("result not serializable: {e}"),
            );
            // An id, a code and a message: this cannot fail.
            to_line(&R::<()>(id, Err(&err))).unwrap_or_else(|_| {
                br#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error"}}"#.to_vec()
            })
        }
    }
}
