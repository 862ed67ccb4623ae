//! [`Message`]: the JSON-RPC envelope, decoded once, `params` kept raw.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::error::ErrorObject;
use super::id::{ProgressToken, RequestId};
use super::method::Method;
use super::params::{ParamsPeek, ParamsView};

/// A request as decoded from the wire: id, method and progress token read,
/// `params` kept raw.
#[derive(Clone, Debug)]
pub struct RawRequest {
    /// The request id.
    pub id: RequestId,
    /// The method name.
    pub method: Method,
    /// The parameters, undecoded.
    pub params: Option<Box<RawValue>>,
    /// `params._meta.progressToken`, if the request asked for progress.
    pub progress_token: Option<ProgressToken>,
}

/// A notification as decoded from the wire.
#[derive(Clone, Debug)]
pub struct RawNotification {
    /// The method name.
    pub method: Method,
    /// The parameters, undecoded.
    pub params: Option<Box<RawValue>>,
}

impl RawNotification {
    /// For a `notifications/cancelled`: the request it names and the peer's
    /// reason (sanitized by [`CancelReason::peer`](crate::CancelReason::peer)).
    /// `None` for any other notification, and for a cancel whose params are
    /// missing or malformed (logged at debug: it changes nothing).
    #[cfg(any(feature = "stdio", feature = "http"))]
    pub(crate) fn cancel_request(&self) -> Option<(RequestId, crate::CancelReason)> {
        if self.method != super::CANCELLED {
            tracing::debug!(method = ?self.method, "notification carries no cancel: nothing to do");
            return None;
        }
        let Some(params) = self.params.as_deref() else {
            tracing::debug!("notifications/cancelled without params ignored");
            return None;
        };
        match serde_json::from_str::<super::CancelledParams>(params.get()) {
            Ok(p) => Some((p.request_id, crate::CancelReason::peer(p.reason.as_deref()))),
            Err(e) => {
                tracing::debug!(error = %crate::sanitize::for_log(&e.to_string()), "malformed notifications/cancelled ignored");
                None
            }
        }
    }
}

/// A response as decoded from the wire.
#[derive(Clone, Debug)]
pub struct RawResponse {
    /// The id of the request this answers; `None` for an error about a
    /// request whose id could not be read.
    pub id: Option<RequestId>,
    /// The result, or the error.
    pub outcome: Result<Box<RawValue>, ErrorObject>,
}

/// One JSON-RPC message.
#[derive(Clone, Debug)]
pub enum Message {
    /// A request (has `method` and `id`).
    Request(RawRequest),
    /// A notification (has `method`, no `id`).
    Notification(RawNotification),
    /// A response (has `result` or `error`).
    Response(RawResponse),
}

/// Why a line could not be decoded as a JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeError {
    /// The JSON-RPC error code to answer with (`-32700` or `-32600`).
    pub code: i64,
    /// What was wrong.
    pub message: String,
    /// The request id, when it could be read.
    pub id: Option<RequestId>,
}

impl DecodeError {
    /// The error object to send back.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(self.code, self.message.clone())
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for DecodeError {}

/// The id field as seen on the wire: absent, null, valid, or of the wrong type.
enum WireId {
    Null,
    Valid(RequestId),
    Invalid,
}

impl<'de> Deserialize<'de> for WireId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(match v {
            serde_json::Value::Null => WireId::Null,
            other => match RequestId::deserialize(other) {
                Ok(id) => WireId::Valid(id),
                Err(_) => WireId::Invalid,
            },
        })
    }
}

fn present_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WireId>, D::Error> {
    WireId::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    // `deserialize_with` so that `"id": null` is seen, not folded into "absent".
    #[serde(default, deserialize_with = "present_id")]
    id: Option<WireId>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    // Borrowed: peeked in place, then copied once into the message.
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

impl Message {
    /// Decodes one message (one line of stdio, one HTTP body).
    ///
    /// Never panics. Invalid JSON is a `-32700` error; valid JSON that is not
    /// a JSON-RPC 2.0 message is `-32600`, with the id when it could be read.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        Self::decode_viewed(bytes).map(|(message, _)| message)
    }

    /// [`decode`](Self::decode), and the fields of a request's params that
    /// its headers mirror and its span names ([`ParamsView`], borrowed from
    /// `bytes`; empty for other messages), read in the same pass as its
    /// progress token: the body is parsed once for the whole lifecycle.
    pub(crate) fn decode_viewed(bytes: &[u8]) -> Result<(Message, ParamsView<'_>), DecodeError> {
        Self::decode_viewed_with(bytes, None)
    }

    /// [`decode_viewed`](Self::decode_viewed), reading a request's
    /// `_meta[budget_key]` into the view in the same pass.
    pub(crate) fn decode_viewed_with<'a>(
        bytes: &'a [u8],
        budget_key: Option<&str>,
    ) -> Result<(Message, ParamsView<'a>), DecodeError> {
        let env: Envelope<'_> = serde_json::from_slice(bytes).map_err(|e| {
            if e.is_syntax() || e.is_eof() {
                DecodeError {
                    code: ErrorObject::PARSE_ERROR,
                    // serde_json quotes the offending input in some errors.
                    message: format!("Parse error: {}", crate::sanitize::for_log(&e.to_string())),
                    id: None,
                }
            } else {
                DecodeError {
                    code: ErrorObject::INVALID_REQUEST,
                    message: format!(
                        "Invalid Request: {}",
                        crate::sanitize::for_log(&e.to_string())
                    ),
                    id: None,
                }
            }
        })?;
        let id = env.checked_id()?;
        if env.jsonrpc.as_deref() != Some("2.0") {
            return Err(invalid("jsonrpc must be \"2.0\"", id));
        }
        if let Some(params) = &env.params {
            let first = params.get().as_bytes().first();
            if !matches!(first, Some(b'{') | Some(b'[')) {
                return Err(invalid("params must be an object or an array", id));
            }
        }
        env.into_message(id, budget_key)
    }
}

/// A `-32600` error.
fn invalid(message: &str, id: Option<RequestId>) -> DecodeError {
    DecodeError {
        code: ErrorObject::INVALID_REQUEST,
        message: format!("Invalid Request: {message}"),
        id,
    }
}

impl<'a> Envelope<'a> {
    /// The id, if valid: a null id is only legal on an error response about
    /// an unreadable request.
    fn checked_id(&self) -> Result<Option<RequestId>, DecodeError> {
        match &self.id {
            None => Ok(None),
            Some(WireId::Valid(id)) => Ok(Some(id.clone())),
            Some(WireId::Null) if self.error.is_some() && self.method.is_none() => Ok(None),
            Some(WireId::Null) => Err(invalid("id must be a string or an integer, not null", None)),
            Some(WireId::Invalid) => Err(invalid("id must be a string or an integer", None)),
        }
    }

    /// Which message it is: exactly one of method, result or error; for a
    /// request, the view of its params too.
    fn into_message(
        self,
        id: Option<RequestId>,
        budget_key: Option<&str>,
    ) -> Result<(Message, ParamsView<'a>), DecodeError> {
        match (self.method, self.result, self.error) {
            (Some(method), None, None) => {
                let method = Method::from(method);
                let params = self.params.map(RawValue::to_owned);
                Ok(match id {
                    Some(id) => {
                        let peek = self
                            .params
                            .map(|p| ParamsPeek::with_budget(p, budget_key))
                            .unwrap_or_default();
                        let request = RawRequest {
                            id,
                            method,
                            progress_token: peek.progress_token,
                            params,
                        };
                        (Message::Request(request), peek.view)
                    }
                    None => (
                        Message::Notification(RawNotification { method, params }),
                        ParamsView::default(),
                    ),
                })
            }
            (None, Some(result), None) => match id {
                Some(id) => Ok((
                    Message::Response(RawResponse {
                        id: Some(id),
                        outcome: Ok(result),
                    }),
                    ParamsView::default(),
                )),
                None => Err(invalid("a result response must carry an id", None)),
            },
            (None, None, Some(error)) => {
                let error = serde_json::from_value::<ErrorObject>(error).map_err(|e| {
                    let e = crate::sanitize::for_log(&e.to_string());
                    invalid(&format!("malformed error object: {e}"), id.clone())
                })?;
                Ok((
                    Message::Response(RawResponse {
                        id,
                        outcome: Err(error),
                    }),
                    ParamsView::default(),
                ))
            }
            _ => Err(invalid(
                "expected exactly one of method, result or error",
                id,
            )),
        }
    }
}
