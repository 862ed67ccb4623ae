//! What tower-mcp 0.25's stdio transport does before a request reaches
//! `RouterLayer` (the crate docs' "What it does not cover"), pinned here so
//! that a tower-mcp release that changes it shows: the docs then change too.
//! Both were found by `mcp-cancel-check` (checker/) on the example server.
//!
//! * Once given any layer (`StdioTransport::layer`, which returns its
//!   generic transport) it answers a malformed notification with an error;
//!   without one it ignores it. Its input read through `CheckedInput`, it
//!   does not see such a notification, and sees everything else.
//! * It reads a notification in its read loop but hands a request to a
//!   dispatcher task, and its router ignores a cancel for a request it has
//!   not registered yet: a cancel right behind its request is lost, with a
//!   layer or without.

#[path = "support/pipe.rs"]
mod pipe;

use std::sync::Arc;

use pipe::Pipe;
use serde_json::{json, Value};
use tower::layer::util::Identity;
use tower_mcp::extract::{Json, State};
use tower_mcp::{CallToolResult, McpRouter, StdioTransport, ToolBuilder};
use tower_mcp_cancel_tower_mcp::{CheckedInput, RouterLayer};

/// How the transport is given the router.
#[derive(Clone, Copy, Debug)]
enum Under {
    /// `StdioTransport::new(router)`, no layer.
    Nothing,
    /// `.layer(Identity)`: a layer that does nothing.
    Identity,
    /// `.layer(RouterLayer::new())`.
    RouterLayer,
    /// `.layer(RouterLayer::new())`, its input read through `CheckedInput`.
    Checked,
}

/// Serves `router` under `under` over a pipe and does the 2025 handshake.
async fn start(router: McpRouter, under: Under) -> Pipe {
    let (mut peer, theirs) = Pipe::new();
    let (server_r, server_w) = tokio::io::split(theirs);
    let transport = StdioTransport::new(router);
    match under {
        Under::Nothing => {
            let mut t = transport;
            tokio::spawn(async move { t.run_with_streams(server_r, server_w).await });
        }
        Under::Identity => {
            let mut t = transport.layer(Identity::new());
            tokio::spawn(async move { t.run_with_streams(server_r, server_w).await });
        }
        Under::RouterLayer => {
            let mut t = transport.layer(RouterLayer::new());
            tokio::spawn(async move { t.run_with_streams(server_r, server_w).await });
        }
        Under::Checked => {
            let mut t = transport.layer(RouterLayer::new());
            let input = CheckedInput::new(server_r);
            tokio::spawn(async move { t.run_with_streams(input, server_w).await });
        }
    }
    peer.handshake().await;
    peer
}

/// `gated`: answers once the test releases it.
fn router(release: Arc<tokio::sync::Notify>) -> McpRouter {
    let gated = ToolBuilder::new("gated")
        .description("answers once released")
        .extractor_handler(
            release,
            |State(release): State<Arc<tokio::sync::Notify>>, Json(_): Json<Value>| async move {
                release.notified().await;
                Ok(CallToolResult::text("released"))
            },
        )
        .build();
    McpRouter::new().server_info("test", "0").tool(gated)
}

/// The lines `malformed` and a `ping` behind it get.
async fn answers(under: Under, malformed: Value) -> Vec<Value> {
    let mut peer = start(router(Arc::default()), under).await;
    let ping = json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"});
    peer.send(&[malformed, ping]).await;
    peer.until_response("ping").await
}

/// A `notifications/cancelled` without its `requestId`.
fn malformed_cancel() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
}

#[tokio::test]
async fn a_layered_transport_answers_a_malformed_notification_an_unlayered_one_does_not() {
    let plain = answers(Under::Nothing, malformed_cancel()).await;
    assert_eq!(plain.len(), 1, "{plain:?}");
    for under in [Under::Identity, Under::RouterLayer] {
        let lines = answers(under, malformed_cancel()).await;
        assert_eq!(lines.len(), 2, "{under:?}: {lines:?}");
        assert!(
            lines[0]["id"].is_null() && lines[0]["error"]["code"] == -32602,
            "{under:?}: {lines:?}"
        );
    }
}

#[tokio::test]
async fn read_through_checked_input_a_layered_transport_answers_no_malformed_notification() {
    let array = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1, 2]});
    for malformed in [malformed_cancel(), array] {
        let lines = answers(Under::Checked, malformed.clone()).await;
        assert_eq!(lines.len(), 1, "{malformed}: {lines:?}");
        // The layered transport alone answers it (what the reader is for).
        let lines = answers(Under::RouterLayer, malformed.clone()).await;
        assert_eq!(lines.len(), 2, "{malformed}: {lines:?}");
    }
}

#[tokio::test]
async fn read_through_checked_input_a_malformed_request_is_answered_with_its_id() {
    let request = json!({
        "jsonrpc": "2.0", "id": "bad", "method": "tools/call", "params": [1],
    });
    let lines = answers(Under::Checked, request).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0]["id"] == "bad" && lines[0]["error"]["code"].is_i64(),
        "{lines:?}"
    );
}

/// Whether a `tools/call` of `gated` is answered when its cancel is in the
/// same write (`right_behind`), or follows once a `ping` sent behind the
/// call has been answered. Either way the cancel has been read (a `ping`
/// behind it is answered) before the call is released.
async fn cancelled_call_answered(under: Under, right_behind: bool) -> bool {
    let release = Arc::new(tokio::sync::Notify::new());
    let mut peer = start(router(release.clone()), under).await;
    let call = json!({
        "jsonrpc": "2.0", "id": "call", "method": "tools/call",
        "params": {"name": "gated", "arguments": {}},
    });
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "call", "reason": "the test's"},
    });
    let ping = |id: &str| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let mut lines = Vec::new();
    if right_behind {
        peer.send(&[call, cancel, ping("ping")]).await;
    } else {
        peer.send(&[call, ping("before")]).await;
        lines.extend(peer.until_response("before").await);
        peer.send(&[cancel, ping("ping")]).await;
    }
    lines.extend(peer.until_response("ping").await);
    if lines.iter().any(|v| v["id"] == "call") {
        return true;
    }
    release.notify_one();
    peer.answered("call").await.is_some()
}

// A paused clock: a call that is never answered is known at once.
#[tokio::test(start_paused = true)]
async fn read_through_checked_input_a_well_formed_cancel_still_cancels() {
    assert!(
        !cancelled_call_answered(Under::Checked, false).await,
        "a call cancelled once it ran was answered"
    );
}

// A paused clock: a call that is never answered is known at once.
#[tokio::test(start_paused = true)]
async fn a_cancel_right_behind_its_request_is_lost_with_a_layer_or_without() {
    for under in [Under::Nothing, Under::RouterLayer] {
        assert!(
            !cancelled_call_answered(under, false).await,
            "{under:?}: a call cancelled once it ran was answered"
        );
        assert!(
            cancelled_call_answered(under, true).await,
            "{under:?}: tower-mcp now honours a cancel right behind its request; update lib.rs"
        );
    }
}
