//! JSON-RPC 2.0 wire types, decoded only as far as the layers need.
//!
//! A request is decoded once: its `id`, `method` and `params._meta.progressToken`
//! are read, and `params` itself is kept as raw JSON ([`RawValue`]) for the
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

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The method of the cancellation notification.
pub const CANCELLED: &str = "notifications/cancelled";
/// The method of the progress notification.
pub const PROGRESS: &str = "notifications/progress";
/// The method of the long-lived subscription request, exempt from timeouts by default.
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// The `_meta` key carrying the id of the `subscriptions/listen` request a message belongs to.
pub const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key carrying the protocol version of a request (2026-07-28 and later).
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

macro_rules! string_or_integer {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            /// An integer value.
            Number(i64),
            /// A string value. `"1"` is a different value from the integer `1`.
            String(Arc<str>),
        }

        impl From<i64> for $name {
            fn from(n: i64) -> Self {
                Self::Number(n)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::String(s.into())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self::String(s.into())
            }
        }

        /// Formats the value as JSON: strings quoted, integers bare, so that
        /// `"1"` and `1` stay distinguishable in logs. Every control
        /// character is escaped (also DEL and the C1 range, which JSON would
        /// leave as they are), so a value from the wire cannot break a log
        /// line.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    Self::Number(n) => write!(f, "{n}"),
                    Self::String(s) => {
                        let json = serde_json::Value::from(&**s).to_string();
                        for c in json.chars() {
                            if c.is_control() {
                                write!(f, "\\u{:04x}", c as u32)?;
                            } else {
                                fmt::Write::write_char(f, c)?;
                            }
                        }
                        Ok(())
                    }
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    Self::Number(n) => s.serialize_i64(*n),
                    Self::String(v) => s.serialize_str(v),
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                        Ok($name::Number(v))
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                        i64::try_from(v)
                            .map($name::Number)
                            .map_err(|_| E::custom(concat!($what, " out of range")))
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                        // `42.0` is an integer written as a float; anything fractional is not.
                        if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
                            Ok($name::Number(v as i64))
                        } else {
                            Err(E::custom(concat!($what, " must be a string or an integer")))
                        }
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                        Ok($name::String(v.into()))
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

string_or_integer!(
    /// A JSON-RPC request id: a string or an integer, never null.
    ///
    /// `"1"` and `1` are different ids: they compare and hash differently.
    /// `0` is an ordinary id.
    RequestId,
    "a request id (string or integer)"
);

string_or_integer!(
    /// A progress token (`params._meta.progressToken`): a string or an integer.
    ProgressToken,
    "a progress token (string or integer)"
);

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

    /// Attaches `data`.
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
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Reads `_meta.progressToken` out of raw params without building a tree.
pub(crate) fn peek_progress_token(params: &RawValue) -> Option<ProgressToken> {
    struct Peek(Option<ProgressToken>);
    impl<'de> Deserialize<'de> for Peek {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct ParamsV;
            impl<'de> Visitor<'de> for ParamsV {
                type Value = Peek;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("params")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Peek, A::Error> {
                    let mut found = None;
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        if key == "_meta" {
                            found = map.next_value::<MetaPeek>()?.0;
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(Peek(found))
                }
                fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Peek, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Peek(None))
                }
            }
            d.deserialize_any(ParamsV)
        }
    }
    struct MetaPeek(Option<ProgressToken>);
    impl<'de> Deserialize<'de> for MetaPeek {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct MetaV;
            impl<'de> Visitor<'de> for MetaV {
                type Value = MetaPeek;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("_meta")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaPeek, A::Error> {
                    let mut found = None;
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        if key == "progressToken" {
                            // A malformed token is treated as absent rather than failing the request.
                            found = map
                                .next_value::<serde_json::Value>()
                                .ok()
                                .and_then(|v| ProgressToken::deserialize(v).ok());
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(MetaPeek(found))
                }
                fn visit_unit<E: de::Error>(self) -> Result<MetaPeek, E> {
                    Ok(MetaPeek(None))
                }
            }
            d.deserialize_any(MetaV)
        }
    }
    serde_json::from_str::<Peek>(params.get())
        .ok()
        .and_then(|p| p.0)
}

impl Message {
    /// Decodes one message (one line of stdio, one HTTP body).
    ///
    /// Never panics. Invalid JSON is a `-32700` error; valid JSON that is not
    /// a JSON-RPC 2.0 message is `-32600`, with the id when it could be read.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        let env: Envelope<'_> = match serde_json::from_slice(bytes) {
            Ok(env) => env,
            Err(e) if e.is_syntax() || e.is_eof() => {
                return Err(DecodeError {
                    code: ErrorObject::PARSE_ERROR,
                    message: format!("Parse error: {e}"),
                    id: None,
                })
            }
            Err(e) => {
                return Err(DecodeError {
                    code: ErrorObject::INVALID_REQUEST,
                    message: format!("Invalid Request: {e}"),
                    id: None,
                })
            }
        };
        let invalid = |message: &str, id: Option<RequestId>| DecodeError {
            code: ErrorObject::INVALID_REQUEST,
            message: format!("Invalid Request: {message}"),
            id,
        };
        let id = match env.id {
            None => None,
            Some(WireId::Valid(id)) => Some(id),
            Some(WireId::Null) => {
                // A null id is only legal on an error response about an unreadable request.
                if env.error.is_some() && env.method.is_none() {
                    None
                } else {
                    return Err(invalid("id must be a string or an integer, not null", None));
                }
            }
            Some(WireId::Invalid) => {
                return Err(invalid("id must be a string or an integer", None));
            }
        };
        if env.jsonrpc.as_deref() != Some("2.0") {
            return Err(invalid("jsonrpc must be \"2.0\"", id));
        }
        if let Some(params) = &env.params {
            let first = params.get().as_bytes().first();
            if !matches!(first, Some(b'{') | Some(b'[')) {
                return Err(invalid("params must be an object or an array", id));
            }
        }
        match (env.method, env.result, env.error) {
            (Some(method), None, None) => {
                let method = Method::from(method);
                match id {
                    Some(id) => {
                        let progress_token = env.params.as_deref().and_then(peek_progress_token);
                        Ok(Message::Request(RawRequest {
                            id,
                            method,
                            params: env.params,
                            progress_token,
                        }))
                    }
                    None => Ok(Message::Notification(RawNotification {
                        method,
                        params: env.params,
                    })),
                }
            }
            (None, Some(result), None) => match id {
                Some(id) => Ok(Message::Response(RawResponse {
                    id: Some(id),
                    outcome: Ok(result),
                })),
                None => Err(invalid("a result response must carry an id", None)),
            },
            (None, None, Some(error)) => {
                let error = serde_json::from_value::<ErrorObject>(error)
                    .map_err(|e| invalid(&format!("malformed error object: {e}"), id.clone()))?;
                Ok(Message::Response(RawResponse {
                    id,
                    outcome: Err(error),
                }))
            }
            _ => Err(invalid(
                "expected exactly one of method, result or error",
                id,
            )),
        }
    }
}

/// An MCP method name, cheap to clone: well-known methods are static strings,
/// others are shared.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method(MethodRepr);

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum MethodRepr {
    Static(&'static str),
    Shared(Arc<str>),
}

const KNOWN_METHODS: &[&str] = &[
    "tools/call",
    "tools/list",
    "server/discover",
    "resources/read",
    "resources/list",
    "resources/templates/list",
    "prompts/get",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    SUBSCRIPTIONS_LISTEN,
    "initialize",
    "ping",
    CANCELLED,
    PROGRESS,
    "notifications/initialized",
    "notifications/message",
];

impl Method {
    /// A method name.
    pub fn new(name: &str) -> Self {
        match KNOWN_METHODS.iter().find(|m| **m == name) {
            Some(m) => Method(MethodRepr::Static(m)),
            None => Method(MethodRepr::Shared(name.into())),
        }
    }

    /// A method name from a static string, without allocating.
    pub const fn from_static(name: &'static str) -> Self {
        Method(MethodRepr::Static(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            MethodRepr::Static(s) => s,
            MethodRepr::Shared(s) => s,
        }
    }
}

impl std::ops::Deref for Method {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Method {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Method {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&str> for Method {
    fn from(s: &str) -> Self {
        Method::new(s)
    }
}

impl From<Cow<'_, str>> for Method {
    fn from(s: Cow<'_, str>) -> Self {
        Method::new(&s)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// `params` of `notifications/cancelled`.
///
/// It decodes only from a JSON object with a valid `requestId` (a string or
/// an integer) and, when present, a string (or null) `reason`; other keys
/// are ignored. Anything else — an array (which a derived `Deserialize`
/// would read by position), a missing, null or fractional id, a duplicate
/// key — is an error, so the notification is not a cancellation and is
/// ignored, as the spec asks of invalid cancellations. Both the stdio server
/// and the stdio client decode through this type.
///
/// ```
/// use tower_mcp_cancel::jsonrpc::CancelledParams;
/// assert!(serde_json::from_str::<CancelledParams>(r#"{"requestId":1}"#).is_ok());
/// assert!(serde_json::from_str::<CancelledParams>(r#"[1]"#).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    /// The id of the request to cancel.
    pub request_id: RequestId,
    /// Why, for logs and UIs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl<'de> Deserialize<'de> for CancelledParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CancelledParams;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object with a requestId")
            }
            // Only `visit_map`: any other shape is refused by the default methods.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut request_id = None;
                let mut reason = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        "requestId" if request_id.is_some() => {
                            return Err(de::Error::duplicate_field("requestId"))
                        }
                        "requestId" => request_id = Some(map.next_value::<RequestId>()?),
                        "reason" if reason.is_some() => {
                            return Err(de::Error::duplicate_field("reason"))
                        }
                        "reason" => reason = Some(map.next_value::<Option<String>>()?),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(CancelledParams {
                    request_id: request_id.ok_or_else(|| de::Error::missing_field("requestId"))?,
                    reason: reason.flatten(),
                })
            }
        }
        d.deserialize_map(V)
    }
}

/// `params` of `notifications/progress`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// The token of the request this progress is for.
    pub progress_token: ProgressToken,
    /// Progress so far; must increase with each notification.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

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

/// Returns `params` with `_meta.progressToken` set to `token`, keeping every
/// other field.
pub fn params_with_progress_token(
    params: Option<&RawValue>,
    token: &ProgressToken,
) -> Result<Box<RawValue>, serde_json::Error> {
    let mut obj: serde_json::Map<String, serde_json::Value> = match params {
        Some(p) => serde_json::from_str(p.get())?,
        None => serde_json::Map::new(),
    };
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = serde_json::Value::Object(Default::default());
    }
    if let serde_json::Value::Object(meta) = meta {
        meta.insert("progressToken".into(), serde_json::to_value(token)?);
    }
    serde_json::value::to_raw_value(&obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn string_and_integer_ids_differ() {
        let a = RequestId::from("1");
        let b = RequestId::from(1);
        assert_ne!(a, b);
        let set: HashSet<_> = [a.clone(), b.clone()].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert_eq!(a.to_string(), "\"1\"");
        assert_eq!(b.to_string(), "1");
    }

    #[test]
    fn id_zero_is_an_ordinary_id() {
        let m = Message::decode(br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#).unwrap();
        let Message::Request(r) = m else {
            panic!("not a request")
        };
        assert_eq!(r.id, RequestId::Number(0));
    }

    #[test]
    fn null_id_request_is_invalid() {
        let e = Message::decode(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).unwrap_err();
        assert_eq!(e.code, ErrorObject::INVALID_REQUEST);
        assert_eq!(e.id, None);
    }

    #[test]
    fn fractional_id_is_invalid_but_integral_float_is_integer() {
        assert!(Message::decode(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#).is_err());
        let Message::Request(r) =
            Message::decode(br#"{"jsonrpc":"2.0","id":4.0,"method":"ping"}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.id, RequestId::Number(4));
    }

    #[test]
    fn parse_error_vs_invalid_request() {
        assert_eq!(Message::decode(b"{not json").unwrap_err().code, -32700);
        assert_eq!(Message::decode(b"").unwrap_err().code, -32700);
        assert_eq!(Message::decode(b"[1,2]").unwrap_err().code, -32600);
        assert_eq!(Message::decode(b"42").unwrap_err().code, -32600);
        let e = Message::decode(br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#).unwrap_err();
        assert_eq!(e.code, -32600);
        assert_eq!(e.id, Some(RequestId::from("x")));
        let e =
            Message::decode(br#"{"jsonrpc":"2.0","id":3,"method":"a","params":5}"#).unwrap_err();
        assert_eq!(e.id, Some(RequestId::from(3)));
    }

    #[test]
    fn notification_and_responses() {
        let Message::Notification(n) = Message::decode(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0,"reason":"x"}}"#,
        )
        .unwrap() else {
            panic!()
        };
        let p: CancelledParams = serde_json::from_str(n.params.unwrap().get()).unwrap();
        assert_eq!(p.request_id, RequestId::Number(0));
        let Message::Response(r) =
            Message::decode(br#"{"jsonrpc":"2.0","id":"a","result":{"ok":true}}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.id, Some(RequestId::from("a")));
        assert!(r.outcome.is_ok());
        let Message::Response(r) = Message::decode(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(r.id, None);
        assert_eq!(r.outcome.unwrap_err().code, -32700);
    }

    #[test]
    fn progress_token_is_peeked_and_rewritten() {
        let Message::Request(r) = Message::decode(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"a":[1,{"b":2}],"progressToken":"tok"}}}"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(r.progress_token, Some(ProgressToken::from("tok")));
        let p = params_with_progress_token(r.params.as_deref(), &ProgressToken::from(9)).unwrap();
        let v: serde_json::Value = serde_json::from_str(p.get()).unwrap();
        assert_eq!(v["_meta"]["progressToken"], 9);
        assert_eq!(v["_meta"]["a"][1]["b"], 2);
        assert_eq!(v["name"], "slow");
        let p = params_with_progress_token(None, &ProgressToken::from("t")).unwrap();
        assert_eq!(p.get(), r#"{"_meta":{"progressToken":"t"}}"#);
    }

    #[test]
    fn encoders_round_trip() {
        let line = encode_response::<serde_json::Value>(
            Some(&RequestId::from("1")),
            Ok(&serde_json::json!({"x": 1})),
        );
        let Message::Response(r) = Message::decode(&line).unwrap() else {
            panic!()
        };
        assert_eq!(r.id, Some(RequestId::from("1")));
        let line = encode_notification(
            CANCELLED,
            &CancelledParams {
                request_id: RequestId::from(1),
                reason: Some("t".into()),
            },
        )
        .unwrap();
        assert!(Message::decode(&line).is_ok());
        assert!(!line.contains(&b'\n'));
        let line = encode_request(&RequestId::from(0), "ping", None).unwrap();
        assert!(matches!(
            Message::decode(&line).unwrap(),
            Message::Request(_)
        ));
    }

    #[test]
    fn raw_json_is_written_on_one_line() {
        let pretty = "{\r\n  \"text\": \"a\\nb\",\n  \"n\": [\n    1\n  ]\n}";
        let raw = RawValue::from_string(pretty.to_owned()).unwrap();
        let line = encode_request(&RequestId::from(1), "tools/call", Some(&raw)).unwrap();
        assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
        let Message::Request(r) = Message::decode(&line).unwrap() else {
            panic!()
        };
        let v: serde_json::Value = serde_json::from_str(r.params.unwrap().get()).unwrap();
        assert_eq!(v, serde_json::json!({"text": "a\nb", "n": [1]}));
        let line = encode_response(Some(&RequestId::from(1)), Ok(&raw));
        assert!(!line.contains(&b'\n'));
    }

    #[test]
    fn method_interns_known_names() {
        let m = Method::new("tools/call");
        assert!(matches!(m.0, MethodRepr::Static(_)));
        assert_eq!(m, "tools/call");
        assert_eq!(Method::new("x/y").as_str(), "x/y");
    }
}
