//! [`OriginPolicy`]: which `Origin` header values the server accepts
//! (DNS-rebinding protection).
//!
//! ```
//! use tower_mcp_cancel::transport::http::OriginPolicy;
//!
//! // The default origin policy allows browsers on this machine only.
//! let policy = OriginPolicy::default();
//! assert!(policy.allows("http://localhost:3000"));
//! assert!(policy.allows("http://127.0.0.1:8080"));
//! assert!(!policy.allows("https://evil.example"));
//! ```

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;

use super::validation::Rejection;
use crate::jsonrpc::ErrorObject;

/// Which `Origin` header values the server accepts.
///
/// A request without `Origin` (a non-browser client) is always accepted; a
/// request whose `Origin` is not allowed gets `403 Forbidden` with a JSON-RPC
/// error without id, as the spec asks.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum OriginPolicy {
    /// Only origins whose host is `localhost`, `127.0.0.1` or `[::1]` (any
    /// scheme and port). The default: right for a server bound to loopback.
    #[default]
    Localhost,
    /// Exactly these origins (compared as written, e.g. `https://app.example`),
    /// plus the localhost ones if `also_localhost`.
    List {
        /// The allowed origins.
        origins: Arc<[String]>,
        /// Whether localhost origins are allowed too.
        also_localhost: bool,
    },
    /// Any origin (no DNS-rebinding protection: only behind a proxy that checks).
    Any,
    /// A function deciding for each `Origin` value.
    Custom(Arc<dyn Fn(&str) -> bool + Send + Sync>),
}

impl fmt::Debug for OriginPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginPolicy::Localhost => f.write_str("Localhost"),
            OriginPolicy::List {
                origins,
                also_localhost,
            } => f
                .debug_struct("List")
                .field("origins", origins)
                .field("also_localhost", also_localhost)
                .finish(),
            OriginPolicy::Any => f.write_str("Any"),
            OriginPolicy::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl OriginPolicy {
    /// Exactly these origins, and localhost.
    pub fn list<I, S>(origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        OriginPolicy::List {
            origins: origins.into_iter().map(Into::into).collect(),
            also_localhost: true,
        }
    }

    /// A policy deciding with `f`.
    pub fn custom(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        OriginPolicy::Custom(Arc::new(f))
    }

    /// Whether an `Origin` header value is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPolicy::Localhost => is_localhost_origin(origin),
            OriginPolicy::List {
                origins,
                also_localhost,
            } => {
                origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
                    || (*also_localhost && is_localhost_origin(origin))
            }
            OriginPolicy::Any => true,
            OriginPolicy::Custom(f) => f(origin),
        }
    }

    /// Checks a request's headers: `Err` is the 403 to send. A repeated
    /// `Origin` is refused: a browser sends one, and another reader may take
    /// another copy than the one checked.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Rejection> {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let Some(origin) = values.next() else {
            return Ok(());
        };
        let ok =
            values.next().is_none() && origin.to_str().map(|o| self.allows(o)).unwrap_or(false);
        if ok {
            Ok(())
        } else {
            let origin = String::from_utf8_lossy(origin.as_bytes());
            tracing::warn!(origin = %crate::sanitize::for_log(&origin), "request from a disallowed Origin rejected");
            Err(Rejection::new(
                StatusCode::FORBIDDEN,
                None,
                ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    "Forbidden: the Origin header is not allowed",
                ),
            ))
        }
    }
}

/// `OriginPolicy` as a [`tower_http`] request validator, to protect other
/// routes of the same server (`ValidateRequestHeaderLayer::custom(policy)`).
impl<B> tower_http::validate_request::ValidateRequest<B> for OriginPolicy {
    type ResponseBody = Full<Bytes>;
    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Full<Bytes>>> {
        self.check(request.headers())
            .map_err(Rejection::into_response)
    }
}

fn is_localhost_origin(origin: &str) -> bool {
    let Some((_scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, _)) => h,
            None => return false,
        }
    } else {
        authority.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_origins() {
        for o in [
            "http://localhost",
            "http://LOCALHOST:1",
            "https://127.0.0.1:8443/",
            "http://[::1]:80",
        ] {
            assert!(is_localhost_origin(o), "{o}");
        }
        for o in [
            "null",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://[::2]",
            "",
        ] {
            assert!(!is_localhost_origin(o), "{o}");
        }
    }
}
