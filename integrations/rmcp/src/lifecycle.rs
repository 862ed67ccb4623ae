//! The notifications rmcp's server would end the connection on.
//!
//! Until a connection's lifecycle is chosen (an `initialize`, or a first
//! 2026-07-28 request other than `ping` and `server/discover` whose
//! `_meta` is complete and whose version the handler supports), rmcp's
//! server loop treats any notification as a broken handshake and ends the
//! connection. A 2026-era client that drops its `server/discover` call
//! sends the `notifications/cancelled` the spec asks for, and the server
//! would die of it. Such a cancel can only name a `ping` or a
//! `server/discover`, which rmcp answers before it reads on: dropping the
//! notification loses nothing, and the spec lets a server ignore a cancel
//! for a request that already completed.

use std::borrow::Cow;

use ::rmcp::model::{ClientRequest, GetMeta, JsonRpcMessage, ProtocolVersion};
use ::rmcp::service::RxJsonRpcMessage;
use ::rmcp::RoleServer;

/// Where a server connection stands, as rmcp's loop will see it.
#[derive(Debug, Clone)]
pub(crate) enum Lifecycle {
    /// No lifecycle chosen yet; the versions the handler supports.
    Open(Cow<'static, [ProtocolVersion]>),
    /// rmcp serves the connection: every message goes through.
    Chosen,
}

impl Lifecycle {
    pub(crate) fn new(supported: Cow<'static, [ProtocolVersion]>) -> Self {
        Lifecycle::Open(supported)
    }

    /// Whether rmcp may be handed `message`; moves to [`Lifecycle::Chosen`]
    /// on the message that makes rmcp choose (the same tests rmcp makes).
    pub(crate) fn admit(&mut self, message: &RxJsonRpcMessage<RoleServer>) -> bool {
        let Lifecycle::Open(supported) = self else {
            return true;
        };
        match message {
            JsonRpcMessage::Notification(_) => false,
            JsonRpcMessage::Request(req) => {
                if chooses(&req.request, supported) {
                    *self = Lifecycle::Chosen;
                }
                true
            }
            _ => true,
        }
    }
}

/// Whether rmcp's loop leaves its handshake phase for `request`.
fn chooses(request: &ClientRequest, supported: &[ProtocolVersion]) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => {
            let meta = other.get_meta();
            meta.missing_required_keys(&ProtocolVersion::V_2026_07_28)
                .is_empty()
                && meta
                    .protocol_version()
                    .is_some_and(|version| supported.contains(&version))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(json: serde_json::Value) -> RxJsonRpcMessage<RoleServer> {
        serde_json::from_value(json).unwrap()
    }

    fn cancel() -> RxJsonRpcMessage<RoleServer> {
        message(serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 1, "reason": "dropped"}
        }))
    }

    fn meta(version: &str) -> serde_json::Value {
        serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {}
        })
    }

    fn lifecycle() -> Lifecycle {
        Lifecycle::new(Cow::Owned(vec![ProtocolVersion::V_2026_07_28]))
    }

    #[test]
    fn notifications_wait_for_a_request_that_chooses_the_lifecycle() {
        let mut l = lifecycle();
        let discover = message(serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": {"_meta": meta("2026-07-28")}
        }));
        assert!(l.admit(&discover));
        assert!(
            !l.admit(&cancel()),
            "a cancel before the lifecycle is dropped"
        );
        // Incomplete `_meta`: rmcp refuses it and stays in its handshake.
        let bare = message(serde_json::json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}
        }));
        assert!(l.admit(&bare));
        assert!(!l.admit(&cancel()));
        // A version the handler does not support: refused too.
        let old = message(serde_json::json!({
            "jsonrpc": "2.0", "id": 3, "method": "tools/list",
            "params": {"_meta": meta("2099-01-01")}
        }));
        assert!(l.admit(&old));
        assert!(!l.admit(&cancel()));
        let call = message(serde_json::json!({
            "jsonrpc": "2.0", "id": 4, "method": "tools/list",
            "params": {"_meta": meta("2026-07-28")}
        }));
        assert!(l.admit(&call));
        assert!(
            l.admit(&cancel()),
            "once chosen, every message goes through"
        );
    }

    #[test]
    fn initialize_chooses_the_lifecycle() {
        let mut l = lifecycle();
        let init = message(serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}
        }));
        assert!(l.admit(&init));
        let initialized = message(serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/initialized"
        }));
        assert!(l.admit(&initialized));
    }
}
