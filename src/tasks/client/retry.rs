//! What a task client sends again: [`is_transient`], and the backoff
//! between attempts ([`backoff`]).

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use crate::error::Limit;
use crate::jsonrpc::ErrorObject;
use crate::Elapsed;

/// Whether sending the same `tasks/get` or `tasks/update` again may
/// succeed where this attempt failed with `error` (its source chain is
/// read up to the first error it knows):
///
/// * a JSON-RPC error answer: only `-32603` (internal error: a store that
///   failed, a replica that went away). `-32602` (the task is unknown),
///   `-32021` and every other code are the server's answer, not a blip;
/// * the HTTP client's errors ([`HttpClientError`]): a `502`, `503`, `504`
///   or `429` status (a balancer between replicas, a rate limit on
///   polling), the response stream ending before its answer, a connection
///   that could not be made (refused, failed, DNS) — but not TLS, nor an
///   answer that is too large, of the wrong type or malformed;
/// * hyper's errors (the connection closed or reset mid-request), except
///   a response that does not parse as HTTP and a misuse of hyper;
/// * an [`io::Error`] of kind `ConnectionReset`, `ConnectionAborted`,
///   `ConnectionRefused`, `NotConnected`, `TimedOut`, `UnexpectedEof` or
///   `Interrupted` — not `BrokenPipe`: the stdio client reports its closed
///   connection so, and it never reopens;
/// * an [`Elapsed`] from a timer below the task client (one poll took too
///   long), except an inherited deadline, which a retry cannot outrun.
///
/// Anything else (a [`Cancelled`](crate::Cancelled), an
/// [`InvalidTaskAnswer`](super::InvalidTaskAnswer), an error of a
/// transport this crate does not know) is not transient.
///
/// [`HttpClientError`]: crate::transport::http::HttpClientError
pub(super) fn is_transient(error: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(error);
    while let Some(e) = cur {
        if let Some(o) = e.downcast_ref::<ErrorObject>() {
            return o.code == ErrorObject::INTERNAL_ERROR;
        }
        #[cfg(feature = "http")]
        if let Some(h) = e.downcast_ref::<crate::transport::http::HttpClientError>() {
            return http_transient(h);
        }
        #[cfg(feature = "http")]
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            return !(h.is_parse() || h.is_parse_status() || h.is_user());
        }
        #[cfg(feature = "http")]
        if e.is::<hyper_util::client::legacy::Error>() {
            // The pooled client's connection failures were made
            // `HttpClientError`s (connector.rs): this one failed on a
            // connection that was made, e.g. closed by the server or a
            // balancer mid-request.
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            let kind = matches!(
                io.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::Interrupted
            );
            // `io::Error::source` skips the error it wraps: look inside.
            return kind || io.get_ref().is_some_and(|inner| is_transient(inner));
        }
        if let Some(elapsed) = e.downcast_ref::<Elapsed>() {
            return elapsed.limit() != Limit::Inherited;
        }
        cur = e.source();
    }
    false
}

#[cfg(feature = "http")]
fn http_transient(e: &crate::transport::http::HttpClientError) -> bool {
    use crate::transport::http::HttpClientError as E;
    match e {
        E::Status { status, .. } => matches!(status.as_u16(), 429 | 502 | 503 | 504),
        E::StreamEnded
        | E::ConnectionRefused { .. }
        | E::ConnectionFailed { .. }
        | E::Dns { .. } => true,
        E::ResponseTooLarge { .. }
        | E::UnexpectedContentType(_)
        | E::InvalidResponse(_)
        | E::InvalidRequest(_)
        | E::Tls { .. }
        | E::TlsNotEnabled { .. } => false,
    }
}

/// The wait before attempt `failures + 1` of a request that failed
/// `failures` times in a row (1 or more): `interval · 2^failures`, capped at
/// `cap` (but never below `interval`); saturating, so no setting or
/// count overflows.
pub(super) fn backoff(interval: Duration, failures: u32, cap: Duration) -> Duration {
    let factor = 1u32.checked_shl(failures).unwrap_or(u32::MAX);
    interval.saturating_mul(factor).min(cap.max(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_and_never_overflows() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(ms(100), 1, ms(5000)), ms(200));
        assert_eq!(backoff(ms(100), 2, ms(5000)), ms(400));
        assert_eq!(backoff(ms(100), 10, ms(5000)), ms(5000));
        assert_eq!(backoff(ms(100), u32::MAX, ms(5000)), ms(5000));
        assert_eq!(
            backoff(Duration::MAX, u32::MAX, Duration::MAX),
            Duration::MAX
        );
        assert_eq!(backoff(Duration::ZERO, 40, Duration::ZERO), Duration::ZERO);
        // A cap under the interval: the interval.
        assert_eq!(backoff(ms(100), 3, ms(10)), ms(100));
    }

    #[test]
    fn what_is_transient() {
        let rpc = |code| ErrorObject::new(code, "x");
        assert!(is_transient(&rpc(ErrorObject::INTERNAL_ERROR)));
        assert!(!is_transient(&rpc(ErrorObject::INVALID_PARAMS)));
        assert!(!is_transient(&rpc(
            ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY
        )));
        assert!(is_transient(&io::Error::from(
            io::ErrorKind::ConnectionReset
        )));
        assert!(!is_transient(&io::Error::from(io::ErrorKind::BrokenPipe)));
        assert!(is_transient(&Elapsed::new(
            Limit::Timeout,
            Duration::from_secs(1)
        )));
        assert!(!is_transient(&Elapsed::new(
            Limit::Inherited,
            Duration::from_secs(1)
        )));
        // Read through a wrapper's source.
        let wrapped = io::Error::other(rpc(ErrorObject::INTERNAL_ERROR));
        assert!(is_transient(&wrapped));
    }
}
