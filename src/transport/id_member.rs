//! [`id_member`]: whether a line's JSON object has an `id` member, read as
//! a JSON-RPC decoder reads it.

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// What the top level of a line holds, as far as telling a JSON-RPC
/// notification from a request goes: the answer of [`id_member`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdMember {
    /// An object with a member named `id` (what follows it is not read,
    /// and may not even be JSON).
    Present,
    /// A whole object without one (whatever follows the object).
    Absent,
    /// Another value, or no JSON.
    NotAnObject,
}

/// Reads the members of the JSON object `json` starts with (after JSON
/// white space), up to the first one named `id`: its names are read as a
/// JSON-RPC decoder built on serde reads them, escapes undone
/// (`"\u0069d"` is `id`), so a [`LineCheck`](super::LineCheck) that must
/// agree with its SDK's decoder can tell a notification (no `id`) from a
/// request however the peer spelled it. Only the top level counts: an `id`
/// inside `params` does not. A request (its `id` among its first members,
/// as clients write it) is told after a few bytes; only an object without
/// `id` is read whole. Never panics, whatever the bytes.
///
/// ```
/// use tower_mcp_cancel::transport::{id_member, IdMember};
///
/// assert_eq!(id_member(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), IdMember::Present);
/// assert_eq!(id_member(br#"{"method":"x","params":{"id":1}}"#), IdMember::Absent);
/// assert_eq!(id_member(br#"{"\u0069d":1}"#), IdMember::Present);
/// assert_eq!(id_member(b"[1]"), IdMember::NotAnObject);
/// ```
pub fn id_member(json: &[u8]) -> IdMember {
    let mut found = false;
    let read = serde_json::Deserializer::from_slice(json).deserialize_map(Members(&mut found));
    match (found, read) {
        (true, _) => IdMember::Present,
        (false, Ok(())) => IdMember::Absent,
        (false, Err(_)) => IdMember::NotAnObject,
    }
}

/// Sets its flag on the first `id` member, and stops there.
struct Members<'a>(&'a mut bool);

impl<'de> Visitor<'de> for Members<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(IsId(id)) = map.next_key()? {
            if id {
                *self.0 = true;
                // The rest is unread: serde_json reports the object
                // unfinished, which is ignored once the flag is set.
                return Ok(());
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

/// A member name, read only as far as whether it is `id`.
struct IsId(bool);

impl<'de> Deserialize<'de> for IsId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IsId, D::Error> {
        struct Name;

        impl Visitor<'_> for Name {
            type Value = IsId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_str<E>(self, name: &str) -> Result<IsId, E> {
                Ok(IsId(name == "id"))
            }
        }

        d.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_top_level_id_counts_however_it_is_spelled() {
        for (line, want) in [
            (&br#"{"id":1}"#[..], IdMember::Present),
            (br#" {"method":"m", "id" : "a"}"#, IdMember::Present),
            (br#"{"\u0069\u0064":1}"#, IdMember::Present),
            (br#"{"id":1, this is not JSON"#, IdMember::Present),
            (
                br#"{"method":"notifications\/cancelled","params":{"id":1}}"#,
                IdMember::Absent,
            ),
            (br#"{"ids":1,"Id":2}"#, IdMember::Absent),
            (br#"{} trailing"#, IdMember::Absent),
            (br#"[{"id":1}]"#, IdMember::NotAnObject),
            (b"", IdMember::NotAnObject),
            (b"\xff\xfe", IdMember::NotAnObject),
            (br#"{"method":"m""#, IdMember::NotAnObject),
        ] {
            assert_eq!(id_member(line), want, "{}", String::from_utf8_lossy(line));
        }
    }
}
