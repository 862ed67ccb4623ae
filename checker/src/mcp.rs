//! What the checker sends besides the user's tools: the era's request
//! metadata, and how it tells a 2026-07-28 server from a 2025 one.

use serde_json::{json, Value};
use tower_mcp_cancel::jsonrpc::ErrorObject;

/// The native revision.
pub(crate) const MODERN: &str = "2026-07-28";
/// The revision the checker offers in a 2025 `initialize`.
pub(crate) const LEGACY: &str = "2025-11-25";
/// The reason the checker's cancels carry.
pub(crate) const REASON: &str = "mcp-cancel-check: cancelled on purpose";
/// The tasks extension's identifier (tasks § Extension Identifier).
pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` key naming the `subscriptions/listen` a message belongs to.
pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` key of a request's client capabilities.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Which protocol era the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28: stateless, per-request `_meta`.
    Modern,
    /// An `initialize` handshake (2025-11-25 and earlier).
    Legacy,
}

impl Era {
    /// How the report names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Era::Modern => "2026-07-28 (stateless)",
            Era::Legacy => "2025 (initialize handshake)",
        }
    }
}

/// The `_meta` every 2026-07-28 request carries.
pub(crate) fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-cancel-check", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `params` for a request in `era`, with `token` as its progress token;
/// what the caller put in `params._meta` (see [`declare_tasks`]) is kept
/// over the era's defaults.
pub(crate) fn params(era: Era, mut params: Value, token: Option<&str>) -> Value {
    let mut meta = match era {
        Era::Modern => modern_meta(),
        Era::Legacy => json!({}),
    };
    if let Some(t) = token {
        meta["progressToken"] = Value::from(t);
    }
    if let (Some(own), Some(meta)) = (
        params.get("_meta").and_then(Value::as_object),
        meta.as_object_mut(),
    ) {
        meta.extend(own.clone());
    }
    if meta.as_object().is_some_and(|m| !m.is_empty()) {
        if !params.is_object() {
            params = json!({});
        }
        params["_meta"] = meta;
    }
    params
}

/// `params` whose request declares the tasks extension in its client
/// capabilities (tasks § Capability Negotiation).
pub(crate) fn declare_tasks(mut params: Value) -> Value {
    if !params.is_object() {
        params = json!({});
    }
    if !params["_meta"].is_object() {
        params["_meta"] = json!({});
    }
    params["_meta"][CLIENT_CAPABILITIES] = json!({"extensions": {TASKS: {}}});
    params
}

/// Whether `server/discover`'s capabilities advertise the tasks extension.
pub(crate) fn advertises_tasks(capabilities: &Value) -> bool {
    capabilities["extensions"].get(TASKS).is_some()
}

/// The `initialize` params of a 2025 handshake.
pub(crate) fn initialize_params() -> Value {
    json!({
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "mcp-cancel-check", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Whether a `server/discover` answer says the server speaks 2026-07-28.
pub(crate) fn speaks_modern(discover: &Value) -> bool {
    discover["supportedVersions"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v == MODERN))
}

/// The errors by which a modern server says it is one (so no fallback).
pub(crate) fn is_modern_error(e: &ErrorObject) -> bool {
    matches!(
        e.code,
        ErrorObject::HEADER_MISMATCH
            | ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorObject::UNSUPPORTED_PROTOCOL_VERSION
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_params_carry_the_version_and_the_token() {
        let p = params(Era::Modern, json!({"name": "slow"}), Some("t1"));
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN
        );
        assert_eq!(p["_meta"]["progressToken"], "t1");
        assert_eq!(p["name"], "slow");
    }

    #[test]
    fn legacy_params_carry_only_a_token() {
        assert_eq!(params(Era::Legacy, json!({}), None), json!({}));
        let p = params(Era::Legacy, json!({"name": "slow"}), Some("t"));
        assert_eq!(p, json!({"name": "slow", "_meta": {"progressToken": "t"}}));
    }

    #[test]
    fn declared_tasks_survive_the_era_meta() {
        let p = params(Era::Modern, declare_tasks(json!({"taskId": "t"})), None);
        assert_eq!(
            p["_meta"][CLIENT_CAPABILITIES]["extensions"][TASKS],
            json!({})
        );
        assert_eq!(
            p["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN
        );
        assert_eq!(p["taskId"], "t");
        // Without the declaration: empty capabilities.
        let p = params(Era::Modern, json!({"taskId": "t"}), None);
        assert_eq!(p["_meta"][CLIENT_CAPABILITIES], json!({}));
        assert!(advertises_tasks(&json!({"extensions": {TASKS: {}}})));
        assert!(!advertises_tasks(&json!({"tools": {}})));
    }

    #[test]
    fn discover_answers() {
        assert!(speaks_modern(&json!({"supportedVersions": [MODERN]})));
        assert!(!speaks_modern(
            &json!({"supportedVersions": ["2025-06-18"]})
        ));
        assert!(!speaks_modern(&json!({})));
    }
}
