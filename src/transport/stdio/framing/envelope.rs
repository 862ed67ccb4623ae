//! The envelope of a line too long to keep: its top-level `"id"` and whether
//! it has a top-level `"method"`, read while its bytes stream past, in
//! constant memory (at most [`MAX_ID_BYTES`] of the id's text), so that the
//! message a discarded line carried can still be answered (server) or its
//! call ended (client).
//!
//! A scanner, not a validator: it follows strings, escapes and nesting well
//! enough to find the top-level keys of a JSON object; on input that is not
//! one it gives up and reports nothing.

use crate::jsonrpc::RequestId;

/// How much of an id's JSON text is kept; a longer id is [`Id::Overlong`].
pub(crate) const MAX_ID_BYTES: usize = 1024;

/// What an oversize line's top-level `"id"` was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Id {
    /// None could be read: no top-level id, `null`, not a string or an
    /// integer, twice, or a line that is not a JSON object.
    #[default]
    Absent,
    /// This one.
    Found(RequestId),
    /// Its text is longer than [`MAX_ID_BYTES`].
    Overlong,
}

/// What was read of an oversize line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Envelope {
    /// Its top-level id.
    pub(crate) id: Id,
    /// Whether it has a top-level `"method"` (a request or a notification,
    /// not a response).
    pub(crate) method: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the object's `{`.
    Start,
    /// Where a key or the object's end is due.
    Key,
    /// Inside a key's string.
    InKey,
    /// After a key, before its `:`.
    Colon,
    /// After the `:`, before the value.
    Value,
    /// Inside a top-level string value.
    InString,
    /// Inside a top-level object or array value, `depth` levels down.
    Nested,
    /// Inside a top-level number or literal.
    Scalar,
    /// After a value, before `,` or the object's end.
    After,
    /// The object ended, or the input is not one: nothing more is read.
    Done,
}

/// Which top-level key's value is being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Id,
    Method,
    Other,
}

/// Reads the envelope of a line fed to it in pieces.
#[derive(Debug)]
pub(crate) struct Scanner {
    state: State,
    in_string: bool,
    escaped: bool,
    depth: usize,
    /// The key being read, up to one byte more than the longest one looked
    /// for.
    key_text: Vec<u8>,
    key: Key,
    /// The id's JSON text, while and after it is read.
    id_text: Vec<u8>,
    reading_id: bool,
    ids: u8,
    overlong: bool,
    method: bool,
}

impl Default for Scanner {
    fn default() -> Self {
        Self {
            state: State::Start,
            in_string: false,
            escaped: false,
            depth: 0,
            key_text: Vec::new(),
            key: Key::Other,
            id_text: Vec::new(),
            reading_id: false,
            ids: 0,
            overlong: false,
            method: false,
        }
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    /// Reads the next piece of the line.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() && self.state != State::Done {
            // The bulk of a large message is string content nobody keeps:
            // skip to the next quote or backslash at once.
            if self.in_string && !self.escaped && !self.reading_id && self.state != State::InKey {
                match bytes[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                    Some(n) => i += n,
                    None => return,
                }
            }
            self.byte(bytes[i]);
            i += 1;
        }
    }

    /// What was read.
    pub(crate) fn finish(self) -> Envelope {
        let id = match self.ids {
            0 => Id::Absent,
            1 if self.overlong => Id::Overlong,
            // An id read to its end (the value is done, not cut off).
            1 if !self.reading_id => serde_json::from_slice(&self.id_text)
                .map(Id::Found)
                .unwrap_or(Id::Absent),
            _ => Id::Absent,
        };
        Envelope {
            id,
            method: self.method,
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            let ends = !self.escaped && b == b'"';
            self.escaped = !self.escaped && b == b'\\';
            if self.state == State::InKey {
                if !ends && self.key_text.len() <= b"method".len() {
                    self.key_text.push(b);
                }
            } else {
                self.keep(b);
            }
            if ends {
                self.in_string = false;
                match self.state {
                    State::InKey => self.key_read(),
                    State::InString => self.value_read(),
                    _ => {}
                }
            }
            return;
        }
        match self.state {
            State::Start => match b {
                b'{' => self.state = State::Key,
                _ if is_space(b) => {}
                _ => self.state = State::Done,
            },
            State::Key => match b {
                b'"' => {
                    self.key_text.clear();
                    self.in_string = true;
                    self.state = State::InKey;
                }
                _ if is_space(b) => {}
                _ => self.state = State::Done,
            },
            State::Colon => match b {
                b':' => self.state = State::Value,
                _ if is_space(b) => {}
                _ => self.state = State::Done,
            },
            State::Value if is_space(b) => {}
            State::Value => {
                match self.key {
                    Key::Method => self.method = true,
                    Key::Id => {
                        self.ids = self.ids.saturating_add(1);
                        self.id_text.clear();
                        self.reading_id = true;
                    }
                    Key::Other => {}
                }
                self.keep(b);
                self.state = match b {
                    b'"' => {
                        self.in_string = true;
                        State::InString
                    }
                    b'{' | b'[' => {
                        self.depth = 1;
                        State::Nested
                    }
                    _ => State::Scalar,
                };
            }
            State::Nested => {
                self.keep(b);
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            self.value_read();
                        }
                    }
                    _ => {}
                }
            }
            State::Scalar => match b {
                b',' | b'}' => {
                    self.value_read();
                    self.after(b);
                }
                _ if is_space(b) => self.value_read(),
                _ => self.keep(b),
            },
            State::After => self.after(b),
            State::InKey | State::InString | State::Done => {}
        }
    }

    /// Between a value and the next key.
    fn after(&mut self, b: u8) {
        match b {
            b',' => self.state = State::Key,
            _ if is_space(b) => {}
            // `}`: the object ended; anything else: not JSON.
            _ => self.state = State::Done,
        }
    }

    fn key_read(&mut self) {
        self.key = match self.key_text.as_slice() {
            b"id" => Key::Id,
            b"method" => Key::Method,
            _ => Key::Other,
        };
        self.state = State::Colon;
    }

    fn value_read(&mut self) {
        self.reading_id = false;
        self.state = State::After;
    }

    /// Keeps a byte of the id's text, if one is being read.
    fn keep(&mut self, b: u8) {
        if !self.reading_id {
            return;
        }
        if self.id_text.len() < MAX_ID_BYTES {
            self.id_text.push(b);
        } else {
            self.overlong = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The envelope of `line`, fed in pieces of every size up to 7 bytes and
    /// whole: the same each time.
    fn envelope(line: &str) -> Envelope {
        let whole = {
            let mut s = Scanner::default();
            s.push(line.as_bytes());
            s.finish()
        };
        for size in 1..8 {
            let mut s = Scanner::default();
            for piece in line.as_bytes().chunks(size) {
                s.push(piece);
            }
            assert_eq!(s.finish(), whole, "pieces of {size}: {line}");
        }
        whole
    }

    fn found(id: impl Into<RequestId>, method: bool) -> Envelope {
        Envelope {
            id: Id::Found(id.into()),
            method,
        }
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is() {
        assert_eq!(
            envelope(r#"{"jsonrpc":"2.0","id":7,"result":{"x":"y"}}"#),
            found(7, false)
        );
        // After a large result with ids, keys and quotes nested in it.
        assert_eq!(
            envelope(
                r#" { "result" : {"id":1,"list":[{"id":"2"},"}\"id\":3,"],"s":"\\"} , "id" : "abc\"d" , "jsonrpc":"2.0"}"#
            ),
            found("abc\"d", false)
        );
        assert_eq!(
            envelope(r#"{"error":{"code":-32600,"message":"m"},"id":-3}"#),
            found(-3, false)
        );
        assert_eq!(
            envelope(r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{}}"#),
            found(12, true)
        );
        // A number at the very end of the object.
        assert_eq!(envelope(r#"{"result":[],"id":5}"#), found(5, false));
    }

    #[test]
    fn what_is_not_a_readable_id_is_absent() {
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":1}}"#,
            r#"{"id":null,"error":{}}"#,
            r#"{"id":1.5,"result":{}}"#,
            r#"{"id":{"a":1},"result":{}}"#,
            r#"{"id":1,"id":2,"result":{}}"#,
            r#"[{"id":1}]"#,
            r#"garbage "id":1"#,
            r#"{"result":{},"id":"unterminated"#,
            r#"{"id":4"#,
            "",
        ] {
            assert_eq!(envelope(line).id, Id::Absent, "{line}");
        }
        assert!(envelope(r#"{"method":"x","params":{}}"#).method);
        assert!(!envelope(r#"{"result":{"method":"x"}}"#).method);
        // A key that only starts like one looked for.
        assert_eq!(envelope(r#"{"idx":1,"methods":2}"#), Envelope::default());
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[ -~\\\\\"\u{e9}\n]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("(id|method|[a-z\"\\\\]{0,6})", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// On any JSON object, read in pieces of any size, the scanner
        /// finds the top-level id serde reads, and the method.
        #[test]
        fn the_scanner_reads_what_serde_reads(
            members in proptest::collection::btree_map("(id|method|result|[a-z]{0,3})", json_value(), 0..6),
            piece in 1usize..16,
        ) {
            let line = serde_json::Value::Object(members.clone().into_iter().collect()).to_string();
            let mut s = Scanner::default();
            for p in line.as_bytes().chunks(piece) {
                s.push(p);
            }
            let id = members
                .get("id")
                .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
                .map_or(Id::Absent, Id::Found);
            let want = Envelope { id, method: members.contains_key("method") };
            proptest::prop_assert_eq!(s.finish(), want, "{}", line);
        }

        /// Any bytes at all: no panic, and no more than the bound kept.
        #[test]
        fn any_bytes_are_scanned_in_bounded_memory(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let mut s = Scanner::default();
            s.push(&bytes);
            proptest::prop_assert!(s.id_text.len() <= MAX_ID_BYTES && s.key_text.len() <= 7);
            let _ = s.finish();
        }
    }

    #[test]
    fn an_overlong_id_is_told_apart_and_memory_stays_bounded() {
        let long = "i".repeat(MAX_ID_BYTES);
        let line = format!(r#"{{"id":"{long}","result":{{}}}}"#);
        assert_eq!(envelope(&line).id, Id::Overlong);
        let mut s = Scanner::default();
        s.push(line.as_bytes());
        assert!(s.id_text.capacity() <= 2 * MAX_ID_BYTES);
        // Just under: found.
        let fits = "i".repeat(MAX_ID_BYTES - 2);
        let line = format!(r#"{{"id":"{fits}","result":{{}}}}"#);
        assert_eq!(envelope(&line), found(fits.as_str(), false));
    }
}
