//! Params the layers and transports read or write: [`CancelledParams`],
//! [`ProgressParams`], and `_meta.progressToken` inside raw params.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::id::{ProgressToken, RequestId};

/// The `_meta` key carrying the id of the `subscriptions/listen` request a message belongs to.
pub(crate) const SUBSCRIPTION_ID_META: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key carrying the protocol version of a request (2026-07-28 and later).
pub(crate) const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key carrying a request's client capabilities (2026-07-28 and later).
pub(crate) const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

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

/// What the transports, the header checks and the request span read inside
/// a request's `params`, found in one pass over them without building a
/// tree: the progress token, and the fields a Streamable HTTP request
/// mirrors in its headers, borrowed from the params' text.
#[derive(Clone, Debug, Default)]
pub(crate) struct ParamsPeek<'a> {
    /// `_meta.progressToken`, when it is a valid token (a malformed one
    /// reads as absent rather than failing the request). `None` too when a
    /// `_meta` is neither an object nor `null`.
    pub(crate) progress_token: Option<ProgressToken>,
    /// The mirrored fields.
    pub(crate) view: ParamsView<'a>,
}

/// The fields of `params` a request's headers mirror (and its span names),
/// as raw JSON borrowed from the params, `null` read as absent. All absent
/// when the params are not an object, or when they are ambiguous: a
/// repeated `name`, `uri` or `_meta` (another reader may take the other
/// copy), a repeated protocol version in `_meta`, a `_meta` that is
/// neither an object nor `null`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ParamsView<'a> {
    /// `name`: a `tools/call`'s tool, a `prompts/get`'s prompt.
    pub(crate) name: Option<&'a RawValue>,
    /// `uri`: a resource's.
    pub(crate) uri: Option<&'a RawValue>,
    /// `taskId`: the task of a `tasks/get`, `tasks/update`, `tasks/cancel`.
    pub(crate) task_id: Option<&'a RawValue>,
    /// `_meta["io.modelcontextprotocol/protocolVersion"]`, which only a
    /// 2026 client sends.
    pub(crate) protocol_version: Option<&'a RawValue>,
    /// `_meta[key]` for the budget key a server transport reads (none
    /// unless it asked for one): the raw value, checked by its reader. Not
    /// mirrored, so kept when the mirrored fields are ambiguous; absent
    /// when repeated.
    pub(crate) budget: Option<&'a RawValue>,
}

/// A JSON string value as text (borrowed unless it has escapes); `None` for
/// any other JSON value. A string without escapes is the text between its
/// quotes (a `RawValue` is valid JSON): no second parse.
pub(crate) fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        if !inner.contains('\\') {
            return Some(Cow::Borrowed(inner));
        }
    }
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

impl<'a> ParamsPeek<'a> {
    /// The peek of `params`: one pass, nothing allocated but an owned
    /// token (and a key that has escapes).
    pub(crate) fn of(params: &'a RawValue) -> Self {
        Self::with_budget(params, None)
    }

    /// [`of`](Self::of), reading `_meta[budget_key]` into the view's
    /// `budget` in the same pass.
    pub(crate) fn with_budget(params: &'a RawValue, budget_key: Option<&str>) -> Self {
        let mut de = serde_json::Deserializer::from_str(params.get());
        PeekSeed { budget_key }
            .deserialize(&mut de)
            .and_then(|peek| de.end().map(|()| peek))
            .unwrap_or_default()
    }
}

/// Reads a [`ParamsPeek`], with the budget key to look for in `_meta`.
struct PeekSeed<'k> {
    budget_key: Option<&'k str>,
}

impl<'de> DeserializeSeed<'de> for PeekSeed<'_> {
    type Value = ParamsPeek<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct ParamsV<'k> {
            budget_key: Option<&'k str>,
        }
        impl<'de> Visitor<'de> for ParamsV<'_> {
            type Value = ParamsPeek<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("params")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = ParamsPeek::default();
                // Whether the mirrored fields can be read unambiguously,
                // and the progress token at all.
                let mut mirrored = true;
                let mut token = true;
                let (mut budget, mut meta_twice) = (None, false);
                let (mut name, mut uri, mut meta) = (false, false, false);
                let mut task_id = false;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        "name" => {
                            mirrored &= !std::mem::replace(&mut name, true);
                            out.view.name = map.next_value()?;
                        }
                        "uri" => {
                            mirrored &= !std::mem::replace(&mut uri, true);
                            out.view.uri = map.next_value()?;
                        }
                        "taskId" => {
                            mirrored &= !std::mem::replace(&mut task_id, true);
                            out.view.task_id = map.next_value()?;
                        }
                        "_meta" => {
                            let repeated = std::mem::replace(&mut meta, true);
                            mirrored &= !repeated;
                            meta_twice |= repeated;
                            let seed = MetaSeed {
                                budget_key: self.budget_key,
                            };
                            match map.next_value_seed(seed)? {
                                MetaPeek::Null => {
                                    out.view.protocol_version = None;
                                    out.progress_token = None;
                                    budget = None;
                                }
                                MetaPeek::Object {
                                    protocol_version,
                                    repeated_version,
                                    progress_token,
                                    budget: b,
                                } => {
                                    mirrored &= !repeated_version;
                                    out.view.protocol_version = protocol_version;
                                    out.progress_token = progress_token;
                                    budget = b;
                                }
                                MetaPeek::Other => {
                                    mirrored = false;
                                    token = false;
                                }
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                if !mirrored {
                    out.view = ParamsView::default();
                }
                if !token {
                    out.progress_token = None;
                }
                // A repeated `_meta` is ambiguous for the budget too.
                out.view.budget = if meta_twice { None } else { budget };
                Ok(out)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ParamsPeek::default())
            }
        }
        d.deserialize_any(ParamsV {
            budget_key: self.budget_key,
        })
    }
}

/// A `_meta` value, as [`ParamsPeek`] reads it.
enum MetaPeek<'a> {
    Null,
    Object {
        protocol_version: Option<&'a RawValue>,
        repeated_version: bool,
        progress_token: Option<ProgressToken>,
        /// The budget key's value (absent when repeated).
        budget: Option<&'a RawValue>,
    },
    /// Not an object: no token, no mirrored fields.
    Other,
}

/// Reads a [`MetaPeek`], with the budget key to look for.
struct MetaSeed<'k> {
    budget_key: Option<&'k str>,
}

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    type Value = MetaPeek<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct MetaV<'k> {
            budget_key: Option<&'k str>,
        }
        impl<'de> Visitor<'de> for MetaV<'_> {
            type Value = MetaPeek<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("_meta")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut protocol_version = None;
                let mut repeated_version = false;
                let mut seen_version = false;
                let mut progress_token = None;
                let (mut budget, mut budget_seen, mut budget_repeated) = (None, false, false);
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        k if self.budget_key == Some(k) => {
                            budget_repeated |= std::mem::replace(&mut budget_seen, true);
                            budget = Some(map.next_value::<&'de RawValue>()?);
                        }
                        PROTOCOL_VERSION_META => {
                            repeated_version |= std::mem::replace(&mut seen_version, true);
                            protocol_version = map.next_value()?;
                        }
                        "progressToken" => {
                            // A malformed token is treated as absent rather than failing the request.
                            let raw = map.next_value::<&'de RawValue>()?;
                            progress_token = serde_json::from_str(raw.get()).ok();
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(MetaPeek::Object {
                    protocol_version,
                    repeated_version,
                    progress_token,
                    budget: budget.filter(|_| !budget_repeated),
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MetaPeek::Null)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MetaPeek::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MetaPeek::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MetaPeek::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MetaPeek::Other)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(MetaPeek::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MetaPeek::Other)
            }
        }
        d.deserialize_any(MetaV {
            budget_key: self.budget_key,
        })
    }
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
