//! [`MethodPolicy`]: which limit a request gets, by method (and, for
//! `tools/call`, by tool); the one policy type of both timer layers and of
//! the server transports' grace.
//!
//! Below the layers that use it (`timeout`, `progress`), which re-export it,
//! so that neither layer imports the other.

use std::sync::Arc;

use crate::jsonrpc::{Method, SUBSCRIPTIONS_LISTEN, TOOLS_CALL};
use crate::request::RequestView;

/// Which limit a request gets, by method: a default, per-method entries
/// (an entry of `None`: no limit for that method), and per-tool entries for
/// `tools/call`. `subscriptions/listen` is exempt unless configured
/// otherwise.
///
/// One policy type serves both timer layers: `MethodPolicy<Duration>` for
/// [`TimeoutLayer`](crate::TimeoutLayer), and
/// `MethodPolicy<`[`ProgressLimits`](crate::ProgressLimits)`>` for
/// [`ProgressResetLayer`](crate::ProgressResetLayer).
///
/// # Which entry
///
/// The first that applies: for a `tools/call`, the entry of its tool
/// ([`tool`](Self::tool)); the entry of its method; the default. A
/// per-request value in the request's extensions
/// ([`RequestTimeout`](crate::RequestTimeout),
/// [`ProgressLimits`](crate::ProgressLimits)) comes before all of them.
/// The tool's name is [`RequestView::tool_name`], read where the method is
/// (for [`McpRequest`](crate::McpRequest), in the same pass over the params
/// as its progress token): a request whose tool name is not known gets its
/// method's entry. Over an `http::Request` whose method is only claimed,
/// the tool is the `Mcp-Name` header's claim, under the same rule as the
/// method's below.
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::MethodPolicy;
///
/// // `slow` gets 2 s, every other tool 60 s, everything else 10 s.
/// let policy = MethodPolicy::new(Duration::from_secs(10))
///     .method("tools/call", Duration::from_secs(60))
///     .tool("slow", Duration::from_secs(2));
/// assert_eq!(policy.limit_for_tool("slow"), Some(Duration::from_secs(2)));
/// assert_eq!(policy.limit_for_tool("echo"), Some(Duration::from_secs(60)));
/// assert_eq!(policy.limit_for(Some("tools/list")), Some(Duration::from_secs(10)));
/// ```
///
/// # Which method
///
/// The layers look the request's method up with
/// [`RequestView::mcp_method`]. When that method is only *claimed*
/// ([`RequestView::mcp_method_checked`] is `false`: an `http::Request`'s
/// `Mcp-Method` header that nothing has compared with the body), its entry
/// may make the limit shorter than the default, never longer or absent: a
/// client that labels a `tools/call` as `subscriptions/listen` gets the
/// default limit, not an exemption.
///
/// ```
/// use std::time::Duration;
/// use tower_mcp_cancel::MethodPolicy;
///
/// let policy = MethodPolicy::new(Duration::from_secs(60))
///     .method("tools/call", Duration::from_secs(600))
///     .method_unlimited("tasks/wait");
/// assert_eq!(policy.limit_for(Some("tools/list")), Some(Duration::from_secs(60)));
/// assert_eq!(policy.limit_for(Some("tools/call")), Some(Duration::from_secs(600)));
/// assert_eq!(policy.limit_for(Some("subscriptions/listen")), None);
/// assert_eq!(policy.limit_for(Some("tasks/wait")), None);
/// ```
#[derive(Clone, Debug)]
pub struct MethodPolicy<T> {
    default: T,
    // Few entries: a linear scan beats hashing the method name, and the
    // lookup allocates nothing.
    methods: Arc<[(Method, Option<T>)]>,
    // `tools/call` entries by tool name, looked up before the method's.
    tools: Arc<[(Box<str>, T)]>,
}

impl<T: Copy> MethodPolicy<T> {
    /// `default` for every method, `subscriptions/listen` exempt.
    pub fn new(default: T) -> Self {
        Self {
            default,
            methods: Arc::new([(Method::from_static(SUBSCRIPTIONS_LISTEN), None)]),
            tools: Arc::new([]),
        }
    }

    fn set(&mut self, method: &str, limit: Option<T>) {
        let mut v: Vec<_> = self
            .methods
            .iter()
            .filter(|(m, _)| m.as_str() != method)
            .cloned()
            .collect();
        v.push((Method::new(method), limit));
        self.methods = v.into();
    }

    /// Sets the limit for `method`.
    #[must_use]
    pub fn method(mut self, method: &str, limit: T) -> Self {
        self.set(method, Some(limit));
        self
    }

    /// Sets the limit of a `tools/call` of the tool `name`: it comes before
    /// the `tools/call` method entry and the default (see [which
    /// entry](Self#which-entry)).
    ///
    /// Why: deadlines are chosen by what a request does, and for a
    /// `tools/call` that is its tool (`slow` gets 2 s, every other tool
    /// 60 s), which no method entry can say.
    #[must_use]
    pub fn tool(mut self, name: &str, limit: T) -> Self {
        let mut v: Vec<_> = self
            .tools
            .iter()
            .filter(|(t, _)| &**t != name)
            .cloned()
            .collect();
        v.push((name.into(), limit));
        self.tools = v.into();
        self
    }

    /// No limit for `method`.
    #[must_use]
    pub fn method_unlimited(mut self, method: &str) -> Self {
        self.set(method, None);
        self
    }

    /// Whether `subscriptions/listen` is exempt (it is by default); when not,
    /// it gets the default limit unless it has an entry of its own.
    #[must_use]
    pub fn exempt_listen(mut self, exempt: bool) -> Self {
        if exempt {
            self.set(SUBSCRIPTIONS_LISTEN, None);
        } else {
            self.methods = self
                .methods
                .iter()
                .filter(|(m, l)| !(m.as_str() == SUBSCRIPTIONS_LISTEN && l.is_none()))
                .cloned()
                .collect::<Vec<_>>()
                .into();
        }
        self
    }

    /// The default limit.
    pub fn default_limit(&self) -> T {
        self.default
    }

    /// Sets the default limit (the progress layer's `max` / `without_max`).
    #[must_use]
    pub(crate) fn with_default(mut self, default: T) -> Self {
        self.default = default;
        self
    }

    /// The limit for a request of `method`, a method known to be the
    /// request's (`None`: no limit).
    pub fn limit_for(&self, method: Option<&str>) -> Option<T> {
        match method.and_then(|m| self.entry(m)) {
            Some(entry) => entry,
            None => Some(self.default),
        }
    }

    /// The limit for a `tools/call` of the tool `name`: its tool entry,
    /// else the `tools/call` entry, else the default (`None`: no limit).
    ///
    /// Why: what [`limit_for`](Self::limit_for) is for a method, for a tool
    /// — to check a policy, or to apply it where no layer runs (a
    /// transport's grace).
    pub fn limit_for_tool(&self, name: &str) -> Option<T> {
        match self.tool_entry(name) {
            Some(limit) => Some(limit),
            None => self.limit_for(Some(TOOLS_CALL)),
        }
    }

    /// The limit for a request of `method` (known to be the request's) and,
    /// for a `tools/call`, of the tool `tool` when known.
    #[inline]
    pub(crate) fn limit_for_call(&self, method: Option<&str>, tool: Option<&str>) -> Option<T> {
        match (method, tool) {
            (Some(TOOLS_CALL), Some(tool)) => self.limit_for_tool(tool),
            _ => self.limit_for(method),
        }
    }

    /// The limit for a request whose method is only claimed (not checked
    /// against the body): its entry counts only where it is tighter than the
    /// default, as `tighter` decides.
    pub(crate) fn limit_for_claimed(
        &self,
        method: Option<&str>,
        tool: Option<&str>,
        tighter: fn(T, T) -> T,
    ) -> T {
        let tool_entry = match (method, tool) {
            (Some(TOOLS_CALL), Some(tool)) => self.tool_entry(tool).map(Some),
            _ => None,
        };
        match tool_entry.or_else(|| method.and_then(|m| self.entry(m))) {
            Some(Some(entry)) => tighter(entry, self.default),
            Some(None) | None => self.default,
        }
    }

    /// The limit for a request, by the rules in the [type docs](Self).
    #[inline]
    pub(crate) fn resolve<R: RequestView>(
        &self,
        req: &R,
        method: Option<&str>,
        tighter: fn(T, T) -> T,
    ) -> Option<T> {
        // The tool's name is asked for only where a tool entry could apply.
        let tool = match method {
            Some(TOOLS_CALL) if !self.tools.is_empty() => req.tool_name(),
            _ => None,
        };
        if req.mcp_method_checked() {
            self.limit_for_call(method, tool)
        } else {
            Some(self.limit_for_claimed(method, tool, tighter))
        }
    }

    fn tool_entry(&self, name: &str) -> Option<T> {
        self.tools
            .iter()
            .find(|(t, _)| &**t == name)
            .map(|(_, l)| *l)
    }

    fn entry(&self, method: &str) -> Option<Option<T>> {
        self.methods
            .iter()
            .find(|(m, _)| m.as_str() == method)
            .map(|(_, l)| *l)
    }
}
