//! Params the layers and transports read or write: [`CancelledParams`],
//! [`ProgressParams`], and `_meta.progressToken` inside raw params.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::id::{ProgressToken, RequestId};

/// The `_meta` key carrying the id of the `subscriptions/listen` request a message belongs to.
pub(crate) const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key carrying the protocol version of a request (2026-07-28 and later).
pub(crate) const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// `params` of `notifications/cancelled`.
///
/// It decodes only from a JSON object with a valid `requestId` (a string or
/// an integer) and, when present, a string (or null) `reason`; other keys
/// are ignored. Anything else — an array (which a derived `Deserialize`
/// would read by position), a missing, null or fractional id, a duplicate
/// key — is an error, so the notification is not a cancellation and is
/// ignored, as the spec asks of invalid cancellations. Both the stdio server
/// and the stdio client decode through this type.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CancelledParams {
    /// The id of the request to cancel.
    pub(crate) request_id: RequestId,
    /// Why, for logs and UIs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
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
pub(crate) struct ProgressParams {
    /// The token of the request this progress is for.
    pub(crate) progress_token: ProgressToken,
    /// Progress so far; must increase with each notification.
    pub(crate) progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) total: Option<f64>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
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

/// Returns `params` with `_meta.progressToken` set to `token`, keeping every
/// other field.
pub(crate) fn params_with_progress_token(
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
