//! JSON-RPC messages in the many spellings JSON allows, for the property
//! tests of the SDK integrations' `CheckedInput` (each package includes
//! this file by path): the same value written with escapes anywhere in
//! names and strings, white space between any two tokens, members in any
//! order, members named twice, a byte-order mark, CRLF, white space around
//! the line and, now and then, something after the value.

use proptest::prelude::*;
use serde_json::{json, Value};

/// A message, its spelling choices, and what goes around it.
#[derive(Debug, Clone)]
pub(crate) struct Spelled {
    /// The message as a value.
    pub(crate) message: Value,
    /// The line as written, line ending included.
    pub(crate) line: Vec<u8>,
}

/// Messages a client could send, well-formed or not.
pub(crate) fn message() -> impl Strategy<Value = Value> {
    let jsonrpc = prop_oneof![
        4 => Just(Some(json!("2.0"))),
        1 => Just(Some(json!("1.0"))),
        1 => Just(Some(json!(2))),
        1 => Just(None),
    ];
    let method = prop_oneof![
        4 => Just(Some(json!("notifications/cancelled"))),
        2 => Just(Some(json!("notifications/progress"))),
        1 => Just(Some(json!("notifications/initialized"))),
        1 => Just(Some(json!("notifications/roots/list_changed"))),
        1 => Just(Some(json!("notifications/message"))),
        1 => Just(Some(json!("notifications/whatever"))),
        1 => Just(Some(json!("vendor/x"))),
        1 => Just(Some(json!("ping"))),
        1 => Just(Some(json!("tools/call"))),
        1 => Just(Some(json!(5))),
        1 => Just(None),
    ];
    let id = prop_oneof![
        6 => Just(None),
        1 => Just(Some(json!(1))),
        1 => Just(Some(json!("a/b"))),
        1 => Just(Some(Value::Null)),
    ];
    let meta = prop_oneof![
        Just(None),
        Just(Some("2026-07-28")),
        Just(Some("2025-11-25")),
        Just(Some("1999-01-01")),
    ];
    let params = prop_oneof![
        3 => Just(Some(json!({"requestId": 1}))),
        1 => Just(Some(json!({"requestId": "r/é\u{1F600}", "reason": "a \"quoted\" / reason\n"}))),
        1 => Just(Some(json!({"requestId": null}))),
        1 => Just(Some(json!({"requestId": [1]}))),
        1 => Just(Some(json!({}))),
        2 => Just(Some(json!({"progressToken": 1, "progress": 0.5}))),
        1 => Just(Some(json!({"progressToken": "t", "progress": "x"}))),
        1 => Just(Some(json!({"name": "slow", "arguments": {"id": 1}}))),
        1 => Just(Some(json!({"level": "info", "data": {"id": 2}}))),
        2 => Just(Some(json!([1, 2]))),
        1 => Just(Some(json!(7))),
        1 => Just(Some(json!("x"))),
        2 => Just(None),
    ];
    let extra = prop_oneof![
        8 => Just(None),
        1 => Just(Some(("result", json!({})))),
        1 => Just(Some(("error", json!({"code": -1, "message": "m"})))),
        1 => Just(Some(("x", json!({"id": 1})))),
    ];
    let single = (jsonrpc, method, id, params, meta, extra).prop_map(
        |(jsonrpc, method, id, params, meta, extra)| {
            let mut m = serde_json::Map::new();
            for (name, v) in [("jsonrpc", jsonrpc), ("method", method), ("id", id)] {
                if let Some(v) = v {
                    m.insert(name.into(), v);
                }
            }
            if let Some(mut params) = params {
                if let (Some(revision), Some(p)) = (meta, params.as_object_mut()) {
                    p.insert(
                        "_meta".into(),
                        json!({"io.modelcontextprotocol/protocolVersion": revision}),
                    );
                }
                m.insert("params".into(), params);
            }
            if let Some((name, v)) = extra {
                m.insert(name.into(), v);
            }
            Value::Object(m)
        },
    );
    prop_oneof![
        12 => single.clone(),
        1 => single.prop_map(|m| json!([m])),
        1 => Just(json!(3)),
    ]
}

/// `message()` spelled with the choices of a tape of random bytes.
pub(crate) fn spelled() -> impl Strategy<Value = Spelled> {
    (message(), proptest::collection::vec(any::<u8>(), 16..256)).prop_map(|(message, tape)| {
        let mut w = Writer {
            tape,
            at: 0,
            out: String::new(),
        };
        let line = w.line(&message);
        Spelled { message, line }
    })
}

/// Writes JSON, taking each choice from its tape (read round and round).
struct Writer {
    tape: Vec<u8>,
    at: usize,
    out: String,
}

impl Writer {
    fn choice(&mut self) -> u8 {
        let b = self.tape[self.at % self.tape.len()];
        self.at += 1;
        b
    }

    /// A whole line: mark, white space, the value, what may follow, ending.
    fn line(&mut self, value: &Value) -> Vec<u8> {
        if self.choice() % 8 == 0 {
            self.out.push('\u{feff}');
        }
        self.around();
        self.value(value);
        self.around();
        if self.choice() % 16 == 0 {
            self.out.push_str(" x");
        }
        let ending = if self.choice() % 3 == 0 { "\r\n" } else { "\n" };
        self.out.push_str(ending);
        std::mem::take(&mut self.out).into_bytes()
    }

    /// White space around the value: JSON's mostly, now and then Unicode's.
    fn around(&mut self) {
        match self.choice() % 12 {
            0 => self.out.push('\u{a0}'),
            1 => self.out.push('\u{b}'),
            2 => self.out.push('\u{c}'),
            3 => self.out.push('\u{2028}'),
            _ => self.space(),
        }
    }

    /// JSON white space, often none.
    fn space(&mut self) {
        for _ in 0..self.choice() % 4 {
            match self.choice() % 6 {
                0 => {}
                1 | 2 => self.out.push(' '),
                3 => self.out.push('\t'),
                4 => self.out.push('\r'),
                _ => self.out.push_str("  "),
            }
        }
    }

    fn value(&mut self, value: &Value) {
        self.space();
        match value {
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.space();
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                // Any order.
                for i in (1..members.len()).rev() {
                    let j = usize::from(self.choice()) % (i + 1);
                    members.swap(i, j);
                }
                self.out.push('{');
                let mut first = true;
                for (name, v) in members {
                    // Now and then a decoy (a scalar) of the same name first.
                    if self.choice() % 10 == 0 {
                        let decoy = match self.choice() % 4 {
                            0 => json!("notifications/cancelled"),
                            1 => json!(1),
                            2 => Value::Null,
                            _ => json!("2.0"),
                        };
                        self.member(&mut first, name, &decoy);
                    }
                    self.member(&mut first, name, v);
                }
                self.space();
                self.out.push('}');
            }
            other => self.out.push_str(&other.to_string()),
        }
        self.space();
    }

    fn member(&mut self, first: &mut bool, name: &str, value: &Value) {
        if !*first {
            self.space();
            self.out.push(',');
        }
        *first = false;
        self.space();
        self.string(name);
        self.space();
        self.out.push(':');
        self.value(value);
    }

    /// A string, each character as it is or escaped in one of JSON's ways.
    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            let escape = self.choice() % 4 == 0;
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '/' if escape && self.choice() % 2 == 0 => self.out.push_str("\\/"),
                '\n' if self.choice() % 2 == 0 => self.out.push_str("\\n"),
                c if escape || u32::from(c) < 0x20 => self.unicode(c),
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    /// `\uXXXX`, a surrogate pair beyond the first plane, hex in either case.
    fn unicode(&mut self, c: char) {
        let upper = self.choice() % 2 == 0;
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            if upper {
                self.out.push_str(&format!("\\u{unit:04X}"));
            } else {
                self.out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
}

/// `n` lines of [`spelled`], the same ones every run: for a test that the
/// generator reaches what it must.
pub(crate) fn samples(n: usize) -> Vec<Vec<u8>> {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| spelled().new_tree(&mut runner).unwrap().current().line)
        .collect()
}
