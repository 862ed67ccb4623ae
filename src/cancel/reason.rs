//! [`CancelReason`], reason sanitizing, and the drop-reason scope that lets a
//! reason travel with a drop.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use crate::error::Elapsed;

/// Why a request was cancelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The peer sent `notifications/cancelled` (the reason text it gave, sanitized).
    Peer(Option<String>),
    /// The client closed the response (HTTP stream closed, response future dropped).
    ClientDisconnected,
    /// The transport closed (stdin EOF, connection lost).
    TransportClosed,
    /// A limit fired.
    Timeout(Elapsed),
    /// The caller dropped the request's future (client side).
    CallerDropped,
    /// The server is shutting down.
    Shutdown,
    /// Anything else.
    Other(Cow<'static, str>),
}

impl CancelReason {
    /// A peer-supplied reason, truncated and stripped of control characters.
    pub fn peer(reason: Option<&str>) -> Self {
        CancelReason::Peer(reason.map(sanitize_reason))
    }
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Peer(Some(r)) => write!(f, "cancelled by peer: {r}"),
            CancelReason::Peer(None) => f.write_str("cancelled by peer"),
            CancelReason::ClientDisconnected => f.write_str("client disconnected"),
            CancelReason::TransportClosed => f.write_str("transport closed"),
            CancelReason::Timeout(e) => fmt::Display::fmt(e, f),
            CancelReason::CallerDropped => f.write_str("caller dropped the request"),
            CancelReason::Shutdown => f.write_str("server shutting down"),
            CancelReason::Other(s) => f.write_str(s),
        }
    }
}

/// The longest reason text kept from the wire, in characters.
pub const MAX_REASON_CHARS: usize = 256;

/// Truncates a reason from the wire to [`MAX_REASON_CHARS`] characters and
/// replaces control characters (newlines, escapes, NUL, …) with spaces, so a
/// peer cannot forge log lines or flood logs.
///
/// ```
/// use tower_mcp_cancel::cancel::sanitize_reason;
/// assert_eq!(sanitize_reason("bad\n\x1b[31mred"), "bad  [31mred");
/// assert!(sanitize_reason(&"x".repeat(10_000)).chars().count() <= 257);
/// ```
pub fn sanitize_reason(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len().min(MAX_REASON_CHARS + 3));
    for (n, c) in reason.chars().enumerate() {
        if n == MAX_REASON_CHARS {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

thread_local! {
    static DROP_REASON: RefCell<Option<CancelReason>> = const { RefCell::new(None) };
}

/// Drops `value` with `reason` visible to [`current_drop_reason`] for the
/// duration of the drop.
///
/// This is how a reason travels with a drop: a layer that gives up on its
/// inner future (a timer fired) drops it inside this scope, and a client
/// transport below, whose response future is being dropped, reads the reason
/// to put in `notifications/cancelled`. The scope is the synchronous drop on
/// this thread only; nothing outlives it.
pub fn drop_with_reason<T>(reason: &CancelReason, value: T) {
    with_drop_reason(reason, move || drop(value));
}

/// Runs `f` with `reason` visible to [`current_drop_reason`].
pub fn with_drop_reason<R>(reason: &CancelReason, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<CancelReason>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            let _ = DROP_REASON.try_with(|r| *r.borrow_mut() = prev);
        }
    }
    let prev = DROP_REASON
        .try_with(|r| r.borrow_mut().replace(reason.clone()))
        .ok()
        .flatten();
    let _restore = Restore(prev);
    f()
}

/// The reason of the drop in progress on this thread, if a layer set one with
/// [`drop_with_reason`]. `None` means the future was dropped by its caller.
pub fn current_drop_reason() -> Option<CancelReason> {
    DROP_REASON.try_with(|r| r.borrow().clone()).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_reason_is_scoped_and_nests() {
        struct Probe(std::sync::Arc<std::sync::Mutex<Vec<Option<CancelReason>>>>);
        impl Drop for Probe {
            fn drop(&mut self) {
                self.0.lock().unwrap().push(current_drop_reason());
            }
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        drop(Probe(seen.clone()));
        drop_with_reason(&CancelReason::Shutdown, Probe(seen.clone()));
        with_drop_reason(&CancelReason::TransportClosed, || {
            drop_with_reason(&CancelReason::CallerDropped, Probe(seen.clone()));
            drop(Probe(seen.clone()));
        });
        drop(Probe(seen.clone()));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                None,
                Some(CancelReason::Shutdown),
                Some(CancelReason::CallerDropped),
                Some(CancelReason::TransportClosed),
                None
            ]
        );
    }

    #[test]
    fn sanitize_truncates_and_strips() {
        let big = format!("{}\u{0}\r\n", "é".repeat(1 << 20));
        let s = sanitize_reason(&big);
        assert_eq!(s.chars().count(), MAX_REASON_CHARS + 1);
        assert!(!s.chars().any(char::is_control));
    }
}
