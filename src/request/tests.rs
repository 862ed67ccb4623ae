//! The request types' own rules: the token and tool read with the params, the
//! `http::Request` view.

use super::*;

#[test]
fn assigned_token_is_merged_only_on_the_wire() {
    let mut r = McpRequest::new(1, "tools/call").with_params(serde_json::json!({
        "name": "slow", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    }));
    assert!(r.progress_token().is_none());
    assert!(RequestView::set_progress_token(
        &mut r,
        ProgressToken::from("p1")
    ));
    let wire = r.wire_params().unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_str(wire.get()).unwrap();
    assert_eq!(v["_meta"]["progressToken"], "p1");
    assert_eq!(
        v["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
}

#[test]
fn params_token_is_picked_up() {
    let r = McpRequest::new("a", "tools/call")
        .with_params(serde_json::json!({"_meta": {"progressToken": 5}}));
    assert_eq!(r.progress_token(), Some(&ProgressToken::Number(5)));
    assert!(r
        .wire_params()
        .unwrap()
        .unwrap()
        .get()
        .contains("progressToken"));
}

#[test]
fn a_tools_name_is_read_with_the_params_and_only_for_tools_call() {
    let call = |params| McpRequest::new(1, "tools/call").with_params(params);
    assert_eq!(
        call(serde_json::json!({"name": "slow"})).tool_name(),
        Some("slow")
    );
    // Escapes are decoded.
    assert_eq!(
        call(serde_json::json!({"name": "a\"b"})).tool_name(),
        Some("a\"b")
    );
    // Not a string, missing: no tool.
    assert_eq!(call(serde_json::json!({"name": 5})).tool_name(), None);
    assert_eq!(call(serde_json::json!({})).tool_name(), None);
    // Given twice: ambiguous, no tool (the method's limits apply).
    let twice =
        serde_json::value::RawValue::from_string(r#"{"name":"slow","name":"fast"}"#.to_owned())
            .unwrap();
    let mut r = McpRequest::new(1, "tools/call");
    r.set_raw_params(Some(twice));
    assert_eq!(r.tool_name(), None);
    // Another method's `name` is not a tool's.
    let prompt = McpRequest::new(1, "prompts/get").with_params(serde_json::json!({"name": "slow"}));
    assert_eq!(RequestView::tool_name(&prompt), None);
}

#[test]
fn a_decoded_request_carries_its_tools_name() {
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p"}}}"#;
    let (jsonrpc::Message::Request(raw), view) = jsonrpc::Message::decode_viewed(line).unwrap()
    else {
        panic!("a request");
    };
    let req = McpRequest::decoded(raw, &view);
    assert_eq!(req.tool_name(), Some("slow"));
    assert_eq!(req.progress_token(), Some(&ProgressToken::from("p")));
}

#[test]
fn http_request_view_reads_mcp_method_header() {
    let req = http::Request::builder()
        .header("Mcp-Method", "tools/call")
        .body(())
        .unwrap();
    assert_eq!(req.mcp_method().unwrap(), "tools/call");
    assert_eq!(req.request_id(), None);
}

#[test]
fn http_request_view_claims_a_tool_only_with_a_claimed_method() {
    let req = |method: &str| {
        http::Request::builder()
            .header("Mcp-Method", method)
            .header("Mcp-Name", "slow")
            .body(())
            .unwrap()
    };
    assert_eq!(req("tools/call").tool_name(), Some("slow"));
    assert_eq!(req("prompts/get").tool_name(), None);
    // A checked method: the header is no longer the request's word.
    let mut checked = req("tools/call");
    checked.extensions_mut().insert(Method::new("tools/call"));
    assert_eq!(checked.tool_name(), None);
}
