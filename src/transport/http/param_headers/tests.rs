//! Unit tests of `x-mcp-header` parsing, mirroring and checking.

use super::*;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::json;
use serde_json::Value;

fn reason(schema: Value) -> InvalidReason {
    ParamHeaders::from_input_schema(&schema)
        .unwrap_err()
        .reason()
        .clone()
}

fn prop(p: Value) -> Value {
    json!({"type": "object", "properties": {"p": p}})
}

#[test]
fn valid_annotations_and_paths() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "flag": {"type": ["boolean", "null"], "x-mcp-header": "Flag"},
        "outer": {"type": "object", "properties": {
            "inner": {"type": "string", "x-mcp-header": "Inner_1.x"}}},
        "x-mcp-header": {"type": "string"},
        "plain": {"type": "string", "default": {"x-mcp-header": "NotAnAnnotation"}}
    }});
    let h = ParamHeaders::from_input_schema(&schema).unwrap();
    assert_eq!(h.len(), 4);
    let inner = h.iter().find(|p| p.name() == "Inner_1.x").unwrap();
    assert_eq!(inner.path(), ["outer", "inner"]);
    assert_eq!(inner.header_name().as_str(), "mcp-param-inner_1.x");
    assert!(ParamHeaders::from_input_schema(&json!({"type": "object"}))
        .unwrap()
        .is_empty());
}

#[test]
fn each_constraint_is_enforced() {
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": ""}))),
        InvalidReason::Empty
    );
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": 5}))),
        InvalidReason::NotAString
    );
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": "A\r\nB"}))),
        InvalidReason::ControlCharacter
    );
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": "Re gion"}))),
        InvalidReason::NotAToken(' ')
    );
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": "Région"}))),
        InvalidReason::NotAToken('é')
    );
    assert_eq!(
        reason(prop(json!({"type": "string", "x-mcp-header": "a:b"}))),
        InvalidReason::NotAToken(':')
    );
    assert_eq!(
        reason(prop(json!({"type": "number", "x-mcp-header": "N"}))),
        InvalidReason::NumberType
    );
    assert!(matches!(
        reason(prop(json!({"type": "object", "x-mcp-header": "O"}))),
        InvalidReason::UnsupportedType(_)
    ));
    assert!(matches!(
        reason(prop(json!({"x-mcp-header": "O"}))),
        InvalidReason::UnsupportedType(_)
    ));
    assert!(matches!(
        reason(prop(
            json!({"type": ["string", "integer"], "x-mcp-header": "O"})
        )),
        InvalidReason::UnsupportedType(_)
    ));
    let dup = json!({"type": "object", "properties": {
        "a": {"type": "string", "x-mcp-header": "Region"},
        "b": {"type": "string", "x-mcp-header": "REGION"}}});
    assert!(matches!(reason(dup), InvalidReason::Duplicate { .. }));
    assert_eq!(
        reason(json!({"type": "object", "x-mcp-header": "Root"})),
        InvalidReason::NotStaticallyReachable {
            keyword: "<root>".into()
        }
    );
}

#[test]
fn annotations_off_the_properties_chain_invalidate() {
    let ann = json!({"type": "string", "x-mcp-header": "X"});
    for (keyword, schema) in [
        (
            "items",
            prop(json!({"type": "array", "items": ann.clone()})),
        ),
        ("oneOf", prop(json!({"oneOf": [ann.clone()]}))),
        (
            "anyOf",
            json!({"anyOf": [{"properties": {"p": ann.clone()}}]}),
        ),
        (
            "allOf",
            json!({"allOf": [{"properties": {"p": ann.clone()}}]}),
        ),
        ("not", prop(json!({"not": ann.clone()}))),
        ("if", json!({"if": {"properties": {"p": ann.clone()}}})),
        ("then", json!({"then": {"properties": {"p": ann.clone()}}})),
        ("else", json!({"else": {"properties": {"p": ann.clone()}}})),
        (
            "$defs",
            json!({"$defs": {"R": ann.clone()}, "properties": {"p": {"$ref": "#/$defs/R"}}}),
        ),
        (
            "additionalProperties",
            json!({"additionalProperties": ann.clone()}),
        ),
        (
            "patternProperties",
            json!({"patternProperties": {"^a": ann.clone()}}),
        ),
        (
            "items",
            json!({"properties": {"l": {"type": "array", "items": {"properties": {"p": ann.clone()}}}}}),
        ),
    ] {
        assert_eq!(
            reason(schema.clone()),
            InvalidReason::NotStaticallyReachable {
                keyword: keyword.into()
            },
            "{schema}"
        );
    }
}

#[test]
fn client_encoding() {
    let h = ParamHeaders::from_input_schema(&json!({"properties": {
        "s": {"type": "string", "x-mcp-header": "S"},
        "i": {"type": "integer", "x-mcp-header": "I"},
        "b": {"type": "boolean", "x-mcp-header": "B"},
        "o": {"type": "object", "properties": {"deep": {"type": "string", "x-mcp-header": "Deep"}}}
    }}))
    .unwrap();
    let out = h
        .headers_for(Some(
            &json!({"s": "Hello, 世界", "i": 42.0, "b": false, "o": {"deep": null}}),
        ))
        .unwrap();
    let get = |n: &str| {
        out.iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.to_str().unwrap().to_owned())
    };
    assert_eq!(
        get("mcp-param-s").unwrap(),
        "=?base64?SGVsbG8sIOS4lueVjA==?="
    );
    assert_eq!(get("mcp-param-i").unwrap(), "42");
    assert_eq!(get("mcp-param-b").unwrap(), "false");
    assert_eq!(get("mcp-param-deep"), None, "null omits the header");
    assert!(h.headers_for(None).unwrap().is_empty());
    assert!(h
        .headers_for(Some(&json!({"i": 9007199254740992i64})))
        .is_err());
    assert!(h.headers_for(Some(&json!({"i": 1.5}))).is_err());
    assert!(h.headers_for(Some(&json!({"s": ["x"]}))).is_err());
    assert_eq!(
        h.headers_for(Some(&json!({"i": -9007199254740991i64})))
            .unwrap()[0]
            .1,
        "-9007199254740991"
    );
}

#[test]
fn server_check() {
    let h = ParamHeaders::from_input_schema(&json!({"properties": {
        "s": {"type": "string", "x-mcp-header": "S"},
        "i": {"type": "integer", "x-mcp-header": "I"}
    }}))
    .unwrap();
    let headers = |pairs: &[(&str, &[u8])]| {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        m
    };
    let args = json!({"s": "a b", "i": 42});
    assert!(h
        .check(
            &headers(&[("mcp-param-s", b"a b"), ("mcp-param-i", b"42.0")]),
            Some(&args)
        )
        .is_ok());
    assert!(h
        .check(
            &headers(&[
                ("Mcp-Param-S", b"=?base64?YSBi?="),
                ("mcp-param-i", b"42"),
                ("mcp-param-other", b"x")
            ]),
            Some(&args)
        )
        .is_ok());
    let err = h
        .check(&headers(&[("mcp-param-i", b"42")]), Some(&args))
        .unwrap_err();
    assert!(
        err.to_string().contains("Mcp-Param-S header is missing"),
        "{err}"
    );
    let err = h
        .check(
            &headers(&[("mcp-param-s", b"a b"), ("mcp-param-i", b"43")]),
            Some(&args),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("Mcp-Param-I header value '43'"),
        "{err}"
    );
    let err = h
        .check(
            &headers(&[("mcp-param-s", b"a\xffb"), ("mcp-param-i", b"42")]),
            Some(&args),
        )
        .unwrap_err();
    assert!(err.to_string().contains("invalid characters"), "{err}");
    let err = h
        .check(
            &headers(&[("mcp-param-s", b"=?base64?!!?="), ("mcp-param-i", b"42")]),
            Some(&args),
        )
        .unwrap_err();
    assert!(err.to_string().contains("malformed Base64"), "{err}");
    let err = h
        .check(
            &headers(&[("mcp-param-s", b"x")]),
            Some(&json!({"s": null})),
        )
        .unwrap_err();
    assert!(err.to_string().contains("no value in the body"), "{err}");
    assert!(h.check(&headers(&[]), Some(&json!({"s": null}))).is_ok());
    assert!(h.check(&headers(&[]), None).is_ok());
    let err = h
        .check(
            &headers(&[("mcp-param-i", b"1"), ("mcp-param-i", b"1")]),
            Some(&json!({"i": 1})),
        )
        .unwrap_err();
    assert!(err.to_string().contains("more than once"), "{err}");
    assert!(h
        .check(&headers(&[("mcp-param-i", b"nan")]), Some(&json!({"i": 1})))
        .is_err());
}

#[test]
fn tools_list_filtering() {
    let mut result = json!({"tools": [
        {"name": "good", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}},
        {"name": "bad", "inputSchema": {"properties": {"r": {"type": "number", "x-mcp-header": "R"}}}},
        {"name": "plain", "inputSchema": {"type": "object"}}
    ], "nextCursor": "c"});
    let mut map = ToolHeaderMap::new();
    map.insert("bad", &json!({})).unwrap();
    let rejected = map.learn_tools_list(&mut result);
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].name, "bad");
    assert_eq!(rejected[0].error.reason(), &InvalidReason::NumberType);
    let names: Vec<_> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["good", "plain"]);
    assert_eq!(result["nextCursor"], "c");
    assert_eq!(map.get("good").unwrap().len(), 1);
    assert!(map.get("plain").unwrap().is_empty());
    assert!(map.get("bad").is_none(), "a now-invalid tool is forgotten");
}
