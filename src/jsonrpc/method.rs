//! [`Method`]: MCP method names, cheap to clone, and the names the layers
//! and transports act on.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The method of the cancellation notification.
pub(crate) const CANCELLED: &str = "notifications/cancelled";
/// The method of the progress notification.
pub(crate) const PROGRESS: &str = "notifications/progress";
/// The method of the long-lived subscription request, exempt from timeouts by default.
pub(crate) const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// The method that calls a tool: the one whose limits can be set per tool.
pub(crate) const TOOLS_CALL: &str = "tools/call";
/// An MCP method name, cheap to clone: well-known methods are static strings,
/// others are shared.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method(MethodRepr);

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum MethodRepr {
    Static(&'static str),
    Shared(Arc<str>),
}

const KNOWN_METHODS: &[&str] = &[
    TOOLS_CALL,
    "tools/list",
    "server/discover",
    "resources/read",
    "resources/list",
    "resources/templates/list",
    "prompts/get",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    SUBSCRIPTIONS_LISTEN,
    "initialize",
    "ping",
    CANCELLED,
    PROGRESS,
    "notifications/initialized",
    "notifications/message",
];

impl Method {
    /// A method name.
    pub fn new(name: &str) -> Self {
        match KNOWN_METHODS.iter().find(|m| **m == name) {
            Some(m) => Method(MethodRepr::Static(m)),
            None => Method(MethodRepr::Shared(name.into())),
        }
    }

    /// A method name from a static string, without allocating.
    pub const fn from_static(name: &'static str) -> Self {
        Method(MethodRepr::Static(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            MethodRepr::Static(s) => s,
            MethodRepr::Shared(s) => s,
        }
    }
}

impl AsRef<str> for Method {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Method {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Method {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&str> for Method {
    fn from(s: &str) -> Self {
        Method::new(s)
    }
}

impl From<Cow<'_, str>> for Method {
    fn from(s: Cow<'_, str>) -> Self {
        Method::new(&s)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Quoted, through the crate's sanitizer: a method name from the wire is bounded and free of control characters in
/// the logs that show it.
impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*crate::sanitize::for_log(self.as_str()), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_interns_known_names() {
        let m = Method::new("tools/call");
        assert!(matches!(m.0, MethodRepr::Static(_)));
        assert_eq!(m, "tools/call");
        assert_eq!(Method::new("x/y").as_str(), "x/y");
    }
}
