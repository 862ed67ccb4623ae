//! [`HttpClientError`]: the HTTP-level failures of a call.

use std::fmt;

use http::StatusCode;

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
    /// The server's answer — a JSON body, or one event of its SSE stream —
    /// was larger than the client's limit
    /// ([`HttpClientBuilder::max_response_bytes`](super::HttpClientBuilder::max_response_bytes));
    /// it was not read to its end.
    ResponseTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The response was neither `application/json` nor `text/event-stream`.
    UnexpectedContentType(String),
    /// The answer did not parse as the response to this request.
    InvalidResponse(String),
    /// The request could not be sent as given (bad params, a method that is
    /// not a valid header value).
    InvalidRequest(String),
    /// No connection: nobody listens there, the connection was refused.
    ConnectionRefused {
        /// The `host:port` of the endpoint.
        target: String,
        /// The underlying error's message.
        detail: String,
    },
    /// No connection: the host name could not be resolved.
    Dns {
        /// The `host:port` of the endpoint.
        target: String,
        /// The resolver's message.
        detail: String,
    },
    /// No connection: the TLS handshake failed.
    Tls {
        /// The `host:port` of the endpoint.
        target: String,
        /// What happened and what to do, in words (an unknown issuer, a name
        /// mismatch, an expired certificate, …), then rustls' reason in
        /// parentheses (e.g. `(rustls: invalid peer certificate:
        /// UnknownIssuer)`).
        detail: String,
    },
    /// No connection: an `https://` endpoint, but the crate was built
    /// without feature `tls`.
    TlsNotEnabled {
        /// The `host:port` of the endpoint.
        target: String,
    },
    /// No connection: it timed out, was reset, or failed otherwise.
    ConnectionFailed {
        /// The `host:port` of the endpoint.
        target: String,
        /// The underlying error's message.
        detail: String,
    },
}

impl HttpClientError {
    /// Whether no connection to the server could be made (the request was
    /// not sent): [`ConnectionRefused`](Self::ConnectionRefused),
    /// [`Dns`](Self::Dns), [`Tls`](Self::Tls),
    /// [`TlsNotEnabled`](Self::TlsNotEnabled) or
    /// [`ConnectionFailed`](Self::ConnectionFailed).
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            HttpClientError::ConnectionRefused { .. }
                | HttpClientError::Dns { .. }
                | HttpClientError::Tls { .. }
                | HttpClientError::TlsNotEnabled { .. }
                | HttpClientError::ConnectionFailed { .. }
        )
    }
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
            HttpClientError::ResponseTooLarge { limit } => write!(
                f,
                "the server's answer (a JSON body, or one SSE event) is over the client's limit of {limit} bytes (HttpClientBuilder::max_response_bytes)"
            ),
            HttpClientError::UnexpectedContentType(ct) => {
                write!(f, "unexpected response content type {ct:?}")
            }
            HttpClientError::InvalidResponse(m) => write!(f, "invalid response: {m}"),
            HttpClientError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            HttpClientError::ConnectionRefused { target, detail } => {
                write!(f, "cannot connect to {target}: connection refused: {detail}")
            }
            HttpClientError::Dns { target, detail } => {
                write!(f, "cannot connect to {target}: DNS lookup failed: {detail}")
            }
            HttpClientError::Tls { target, detail } => {
                write!(f, "cannot connect to {target}: TLS handshake failed: {detail}")
            }
            HttpClientError::TlsNotEnabled { target } => write!(
                f,
                "cannot connect to {target}: TLS not enabled: https:// needs the `tls` feature of tower-mcp-cancel"
            ),
            HttpClientError::ConnectionFailed { target, detail } => {
                write!(f, "cannot connect to {target}: connection failed: {detail}")
            }
        }
    }
}

impl std::error::Error for HttpClientError {}
