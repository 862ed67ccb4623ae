//! Text from the wire made safe for logs and error messages.
//!
//! A peer controls cancel reasons, header values, tool names and bodies; any
//! of them may end up in a log line or in an error this crate returns.
//! [`for_log`] bounds its length and blanks its control characters, so a
//! peer can neither forge log lines nor flood them.

/// The longest text kept from the wire, in characters.
pub(crate) const MAX_CHARS: usize = 256;

/// Truncates text from the wire to 256 characters (marking the cut with
/// `…`) and replaces control characters (newlines, escapes, NUL, …)
/// with spaces: `"bad\n\x1b[31mred"` is logged as `"bad  [31mred"`.
pub(crate) fn for_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_CHARS + 3));
    for (n, c) in text.chars().enumerate() {
        if n == MAX_CHARS {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_and_strips() {
        let big = format!("{}\u{0}\r\n", "é".repeat(1 << 20));
        let s = for_log(&big);
        assert_eq!(s.chars().count(), MAX_CHARS + 1);
        assert!(!s.chars().any(char::is_control));
        assert_eq!(for_log("bad\n\x1b[31mred"), "bad  [31mred");
    }
}
