//! [`HttpClientError`]: the HTTP-level failures of a call.

use std::fmt;

use http::StatusCode;

use super::ConnectErrorKind;

/// An HTTP-level failure of a call (a JSON-RPC error answer is reported as
/// [`ErrorObject`](crate::jsonrpc::ErrorObject) instead).
#[derive(Debug)]
#[non_exhaustive]
pub enum HttpClientError {
    /// The server answered with a status and a body that is not a JSON-RPC
    /// answer (e.g. a proxy's error page, or a legacy server's `404`).
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// The start of the body, for the message.
        body: String,
    },
    /// The SSE stream ended without the final response (the server went away).
    StreamEnded,
    /// The response was neither `application/json` nor `text/event-stream`.
    UnexpectedContentType(String),
    /// The answer did not parse as the response to this request.
    InvalidResponse(String),
    /// The request could not be sent as given (bad params, a method that is
    /// not a valid header value).
    InvalidRequest(String),
    /// No connection to the server: refused, DNS, TLS (and why), `https://`
    /// without feature `tls` — told apart by `kind`.
    Connect {
        /// What failed.
        kind: ConnectErrorKind,
        /// The `host:port` of the endpoint.
        target: String,
        /// The underlying error's message. For TLS, what happened and what
        /// to do, in words, then rustls' reason in parentheses (e.g.
        /// `(rustls: invalid peer certificate: UnknownIssuer)`).
        detail: String,
    },
}

impl fmt::Display for HttpClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpClientError::Status { status, body } => {
                write!(f, "MCP server answered HTTP {status}")?;
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            HttpClientError::StreamEnded => {
                f.write_str("the SSE response stream ended without a response")
            }
            HttpClientError::UnexpectedContentType(ct) => {
                write!(f, "unexpected response content type {ct:?}")
            }
            HttpClientError::InvalidResponse(m) => write!(f, "invalid response: {m}"),
            HttpClientError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            HttpClientError::Connect {
                kind,
                target,
                detail,
            } => write!(f, "cannot connect to {target}: {kind}: {detail}"),
        }
    }
}

impl std::error::Error for HttpClientError {}
