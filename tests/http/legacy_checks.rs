//! A legacy `MCP-Protocol-Version` header is not a way around the 2026
//! checks: a body carrying the 2026 `_meta` protocol version is a 2026
//! request whatever the header says, and the `Mcp-Method` / `Mcp-Name`
//! headers a legacy request does send must match its body.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use http_support::*;
use serde_json::{json, Value};

fn headers(version: &str, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
        ("MCP-Protocol-Version", version.into()),
    ];
    h.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    h
}

/// A 2025 `tools/call` body: no `_meta` protocol version.
fn old_call(id: i64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": {"text": "hi"}}})
}

fn call_with_meta_version(id: i64, name: &str, version: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": {"text": "hi"},
                      "_meta": {"io.modelcontextprotocol/protocolVersion": version}}})
}

#[tokio::test]
async fn a_legacy_version_header_does_not_skip_the_2026_checks() {
    let (addr, _tools, mut events) = serve_tools(Proto::H1, |s| s).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let named = [("Mcp-Method", "tools/call"), ("Mcp-Name", "echo")];

    type Case = (&'static str, Vec<(&'static str, String)>, Value, u16);
    let mismatches: Vec<Case> = vec![
        (
            "legacy header, 2026 body",
            headers("2025-11-25", &named),
            tool_call(1, "echo", json!({"text": "hi"})),
            400,
        ),
        (
            "legacy header, 2026 body, no Mcp headers",
            headers("2025-06-18", &[]),
            tool_call(2, "echo", json!({"text": "hi"})),
            400,
        ),
        (
            "2026 header, legacy version in the body",
            headers("2026-07-28", &named),
            call_with_meta_version(3, "echo", json!("2025-11-25")),
            400,
        ),
        (
            "legacy header, a body version that is not a string",
            headers("2025-11-25", &named),
            call_with_meta_version(4, "echo", json!(20260728)),
            400,
        ),
        (
            "legacy request, Mcp-Method differs from the body",
            headers("2025-11-25", &[("Mcp-Method", "subscriptions/listen")]),
            old_call(5, "echo"),
            400,
        ),
        (
            "legacy request, Mcp-Name differs from the body",
            headers("2025-11-25", &[("Mcp-Name", "other")]),
            old_call(6, "echo"),
            400,
        ),
        (
            "legacy request, Mcp-Name with malformed Base64",
            headers("2025-11-25", &[("Mcp-Name", "=?base64?!!!?=")]),
            old_call(7, "echo"),
            400,
        ),
    ];
    for (what, h, body, status) in mismatches {
        let res = bounded(conn.send(post(&body, &h))).await.unwrap();
        let got = res.status().as_u16();
        let text = text(res).await;
        assert_eq!(got, status, "{what}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], -32020, "{what}: {text}");
        assert_eq!(v["id"], body["id"], "{what}: {text}");
    }
    assert!(events.drain().is_empty(), "no handler ran");

    // Legacy requests whose Mcp headers are absent or match are served.
    for (id, h) in [
        (10, headers("2025-11-25", &[])),
        (11, headers("2025-11-25", &named)),
        (12, headers("2025-03-26", &[("Mcp-Method", "tools/call")])),
    ] {
        let res = bounded(conn.send(post(&old_call(id, "echo"), &h)))
            .await
            .unwrap();
        let got = res.status().as_u16();
        let text = text(res).await;
        assert_eq!(got, 200, "{id}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["result"]["content"][0]["text"], "hi", "{text}");
    }
}
