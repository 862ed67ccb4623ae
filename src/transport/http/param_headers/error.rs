//! The errors of `x-mcp-header` handling: an invalid annotation, a value
//! that cannot be mirrored, a header that does not match the body.

use std::fmt;

use crate::sanitize::for_log;

/// Why an `x-mcp-header` annotation (and so its tool) is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum InvalidReason {
    /// The annotation's value is not a string.
    NotAString,
    /// The annotation's value is empty.
    Empty,
    /// The annotation's value contains a control character (CR, LF, …).
    ControlCharacter,
    /// The annotation's value has a character outside the RFC 9110 `tchar` set.
    NotAToken(char),
    /// Two annotations of the schema differ only in case (or are equal).
    Duplicate {
        /// The annotation seen first.
        first: String,
        /// The annotation that repeats it.
        second: String,
    },
    /// The annotated property has `"type": "number"`, which is not permitted.
    NumberType,
    /// The annotated property's type is not integer, string or boolean (or
    /// it declares no type).
    UnsupportedType(String),
    /// The annotation is not on a property reachable from the root through
    /// `properties` keys only: `keyword` is the first other keyword on the
    /// way (`items`, `oneOf`, `$ref`, `$defs`, …), or `<root>` for an
    /// annotation on the schema root itself.
    NotStaticallyReachable {
        /// The keyword that breaks the chain.
        keyword: String,
    },
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidReason::NotAString => f.write_str("the x-mcp-header value must be a string"),
            InvalidReason::Empty => f.write_str("the x-mcp-header value must not be empty"),
            InvalidReason::ControlCharacter => {
                f.write_str("the x-mcp-header value must not contain control characters")
            }
            InvalidReason::NotAToken(c) => write!(
                f,
                "the x-mcp-header value must be an RFC 9110 token; {c:?} is not allowed"
            ),
            InvalidReason::Duplicate { first, second } => write!(
                f,
                "x-mcp-header {:?} is not case-insensitively unique (also declared as {:?})",
                for_log(second),
                for_log(first)
            ),
            InvalidReason::NumberType => {
                f.write_str("x-mcp-header is not permitted on a parameter of type number")
            }
            InvalidReason::UnsupportedType(t) => write!(
                f,
                "x-mcp-header is only permitted on integer, string or boolean parameters (type is {})",
                for_log(t)
            ),
            InvalidReason::NotStaticallyReachable { keyword } if keyword == "<root>" => {
                f.write_str("x-mcp-header on the schema root (it must be on a property)")
            }
            InvalidReason::NotStaticallyReachable { keyword } => write!(
                f,
                "x-mcp-header is only permitted on properties reachable through `properties` keys; this one is under `{}`",
                for_log(keyword)
            ),
        }
    }
}

/// An invalid `x-mcp-header` annotation: where it is and why it is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidParamHeader {
    pub(super) pointer: String,
    pub(super) reason: InvalidReason,
}

impl InvalidParamHeader {
    /// The JSON pointer of the annotated schema inside the `inputSchema`.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Why it is invalid (its `Display` says it too).
    #[cfg(test)]
    pub(crate) fn reason(&self) -> &InvalidReason {
        &self.reason
    }
}

/// Schemas may come from a peer (a server's `tools/list`): the texts they
/// give (property names in the pointer, a type, a keyword, annotations)
/// are quoted through the sanitizer, bounded and without control
/// characters.
impl fmt::Display for InvalidParamHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "/".to_owned()
        } else {
            for_log(&self.pointer)
        };
        write!(f, "{} (at inputSchema {at})", self.reason)
    }
}

impl std::error::Error for InvalidParamHeader {}

/// An argument value that cannot be mirrored into its header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnmirrorableValue {
    pub(super) header: String,
    pub(super) path: String,
    pub(super) why: &'static str,
}

impl fmt::Display for UnmirrorableValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cannot be mirrored into {}: {}",
            self.path, self.header, self.why
        )
    }
}

impl std::error::Error for UnmirrorableValue {}

/// A `Mcp-Param-*` header that does not match the call's arguments
/// (missing, different, unreadable, repeated, or mirroring a value that
/// cannot be mirrored): the server answers `HeaderMismatch` (`-32020`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamHeaderMismatch {
    pub(super) header: String,
    pub(super) message: String,
}

impl fmt::Display for ParamHeaderMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamHeaderMismatch {}
