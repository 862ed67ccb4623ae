//! Unit tests of the wire types.

use super::*;
use serde_json::value::RawValue;
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
fn a_string_id_displays_bounded_and_without_control_characters() {
    let huge = RequestId::from(format!("a\n\u{1b}[31m\u{85}{}", "é".repeat(1 << 20)));
    let shown = huge.to_string();
    assert!(shown.starts_with("\"a\\n\\u001b[31m "), "{shown}");
    assert_eq!(shown.chars().count(), crate::sanitize::MAX_CHARS + 1);
    assert!(shown.ends_with('…'));
    assert!(!shown.chars().any(char::is_control));
    assert_eq!(format!("{huge:?}"), shown);
    assert_eq!(RequestId::from("x\u{7f}").to_string(), "\"x \"");
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
    let e = Message::decode(br#"{"jsonrpc":"2.0","id":3,"method":"a","params":5}"#).unwrap_err();
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
    let Message::Response(r) =
        Message::decode(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#)
            .unwrap()
    else {
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
fn peer_text_in_decode_errors_and_method_debug_is_bounded_and_clean() {
    let huge = format!("\u{1b}[31m\n{}", "x".repeat(200_000));
    let lines = [
        // serde_json quotes the string it could not take as an error object.
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": huge}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": huge}),
        serde_json::json!({"jsonrpc": huge, "id": 1, "method": "m"}),
    ];
    for line in lines {
        let e = Message::decode(line.to_string().as_bytes()).unwrap_err();
        assert!(e.message.chars().count() < 1024, "{}", e.message.len());
        assert!(!e.message.chars().any(char::is_control), "{:?}", e.message);
    }
    let shown = format!("{:?}", crate::jsonrpc::Method::new(&huge));
    assert!(shown.chars().count() < 1024, "{}", shown.len());
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
}

#[test]
fn cancelled_params_decode_only_from_an_object_with_a_valid_request_id() {
    use serde_json::json;
    // `params` values that name request 1 in some way but are not a valid
    // cancellation of it.
    let malformed = [
        json!([1]),
        json!([1, "by position"]),
        json!({}),
        json!({"requestId": null}),
        json!({"requestId": 1.5}),
        json!({"requestId": [1]}),
        json!({"requestId": {"id": 1}}),
        json!({"requestId": true}),
        json!({"request_id": 1}),
    ];
    for p in malformed {
        assert!(
            serde_json::from_value::<CancelledParams>(p.clone()).is_err(),
            "{p} decoded as a cancellation"
        );
    }
    // A duplicate key, which `json!` cannot write.
    assert!(serde_json::from_str::<CancelledParams>(r#"{"requestId":1,"requestId":2}"#).is_err());
    let ok: CancelledParams =
        serde_json::from_value(json!({"requestId": "a", "reason": "r", "other": [1]})).unwrap();
    assert_eq!(ok.request_id, "a".into());
    assert_eq!(ok.reason.as_deref(), Some("r"));
    let ok: CancelledParams = serde_json::from_value(json!({"requestId": 0})).unwrap();
    assert_eq!(ok.request_id, 0.into());
    assert_eq!(ok.reason, None);
}

/// The request's fields in one decode: envelope, progress token and the
/// mirrored fields, the latter borrowed from the body (not copied).
#[test]
fn a_request_is_decoded_with_its_params_view_borrowed_from_the_body() {
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","uri":"file:///x","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p"}}}"#;
    let (Message::Request(r), view) = Message::decode_viewed(body).unwrap() else {
        panic!()
    };
    assert_eq!(r.progress_token, Some(ProgressToken::from("p")));
    assert_eq!(view.name.unwrap().get(), r#""echo""#);
    assert_eq!(view.uri.unwrap().get(), r#""file:///x""#);
    assert_eq!(view.protocol_version.unwrap().get(), r#""2026-07-28""#);
    let inside = body.as_ptr_range();
    for raw in [view.name, view.uri, view.protocol_version] {
        assert!(inside.contains(&raw.unwrap().get().as_ptr()), "copied");
    }
    // A notification or a response has no view.
    let (_, view) =
        Message::decode_viewed(br#"{"jsonrpc":"2.0","method":"x","params":{"name":"n"}}"#).unwrap();
    assert!(view.name.is_none());
}

fn peek(params: &str) -> (Option<ProgressToken>, [Option<String>; 3]) {
    let raw = RawValue::from_string(params.to_owned()).unwrap();
    let p = ParamsPeek::of(&raw);
    let text = |r: Option<&RawValue>| r.map(|r| r.get().to_owned());
    (
        p.progress_token,
        [
            text(p.view.name),
            text(p.view.uri),
            text(p.view.protocol_version),
        ],
    )
}

/// The peek keeps the rules of the readers it replaced: a malformed token
/// is absent; null is absent; a repeated mirrored field, or a `_meta`
/// that is not an object, leaves no mirrored field; arrays have none.
#[test]
fn the_params_peek_reads_ambiguous_params_as_absent() {
    let v = r#"{"name":"a","_meta":{"progressToken":1.5,"io.modelcontextprotocol/protocolVersion":"v"}}"#;
    assert_eq!(
        peek(v),
        (None, [Some(r#""a""#.into()), None, Some(r#""v""#.into())])
    );
    let v = r#"{"name":null,"_meta":{"progressToken":3,"io.modelcontextprotocol/protocolVersion":null}}"#;
    assert_eq!(peek(v), (Some(ProgressToken::from(3)), [None, None, None]));
    // Repeated: no mirrored field, the token still read (last one wins).
    let v = r#"{"name":"a","name":"b","_meta":{"progressToken":1,"progressToken":2}}"#;
    assert_eq!(peek(v), (Some(ProgressToken::from(2)), [None, None, None]));
    let v = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"a"}}"#;
    assert_eq!(peek(v), (None, [None, None, None]));
    let v = r#"{"uri":"u","_meta":{},"_meta":{"progressToken":"t"}}"#;
    assert_eq!(
        peek(v),
        (Some(ProgressToken::from("t")), [None, None, None])
    );
    // A `_meta` that is not an object: nothing.
    for meta in ["3", "\"x\"", "[\"2026-07-28\"]", "true"] {
        let v = format!(r#"{{"name":"a","_meta":{meta}}}"#);
        assert_eq!(peek(&v), (None, [None, None, None]), "{v}");
    }
    let v = r#"{"name":"a","_meta":{"progressToken":"t"},"_meta":null}"#;
    assert_eq!(peek(v), (None, [None, None, None]));
    assert_eq!(
        peek(r#"["a",{"progressToken":1}]"#),
        (None, [None, None, None])
    );
    assert_eq!(peek("{}"), (None, [None, None, None]));
}

#[test]
fn json_str_borrows_plain_strings_and_decodes_escaped_ones() {
    let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
    let plain = raw(r#""tools/call""#);
    assert!(matches!(
        json_str(&plain),
        Some(std::borrow::Cow::Borrowed("tools/call"))
    ));
    assert_eq!(json_str(&raw(r#""""#)).as_deref(), Some(""));
    assert_eq!(json_str(&raw(r#""e\u0063ho""#)).as_deref(), Some("echo"));
    assert_eq!(json_str(&raw(r#""a\"b\\""#)).as_deref(), Some("a\"b\\"));
    assert_eq!(json_str(&raw(r#""é 世界""#)).as_deref(), Some("é 世界"));
    for other in ["7", "null", "true", r#"["a"]"#, r#"{"a":"b"}"#] {
        assert_eq!(json_str(&raw(other)), None, "{other}");
    }
}
