//! The shape of the adapter's answer: a status, a JSON body, or an SSE
//! stream — decided by what the call does first, and by how long it stays
//! silent.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use http::{header, HeaderValue, Method as HttpMethod, Response, StatusCode};

use super::body::ResponseBody;
use super::config::Config;
use super::exchange::{Exchange, First};
use super::headers::X_ACCEL_BUFFERING;
use super::validation::Rejection;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::transport::call::server::Ending;
use crate::CancelReason;

/// The response to a started call. A listen stream is SSE at once. Any
/// other call is JSON if it ends before it sends a notification, SSE if a
/// notification comes first, and SSE with a `:` comment at once if it is
/// still silent after `sse_after` (so that an idle proxy does not cut it).
pub(crate) async fn shape(mut exchange: Exchange, config: &Config) -> Response<ResponseBody> {
    if exchange.is_listen() {
        return sse(exchange, config.keep_alive);
    }
    let first = match config.sse_after {
        None => Some(std::future::poll_fn(|cx| exchange.poll_first(cx)).await),
        Some(delay) => {
            // Made at the first `Pending` only: a call answered at its
            // first poll (most) makes no timer — making one reads the
            // clock and clones the runtime's handle, which every worker
            // thread shares.
            let mut switch = std::pin::pin!(None::<tokio::time::Sleep>);
            std::future::poll_fn(|cx| {
                if let Poll::Ready(first) = exchange.poll_first(cx) {
                    return Poll::Ready(Some(first));
                }
                if switch.is_none() {
                    switch.set(Some(tokio::time::sleep(delay)));
                }
                match switch.as_mut().as_pin_mut() {
                    Some(sleep) => sleep.poll(cx).map(|()| None),
                    None => Poll::Pending,
                }
            })
            .await
        }
    };
    match first {
        None => {
            // Silent for too long: stream, so that bytes flow while it works.
            tracing::debug!(request_id = %exchange.id(), "handler silent past sse_after; answering with SSE keep-alives");
            let mut res = sse(exchange, config.keep_alive);
            res.body_mut().comment_first();
            res
        }
        Some(First::Stream) => sse(exchange, config.keep_alive),
        Some(First::Done(ending)) => ended(ending),
    }
}

/// The response to a call that ended before it sent anything: its answer
/// as JSON, `503` for a shutdown, or `204` for nothing to say.
fn ended(ending: Ending) -> Response<ResponseBody> {
    match ending {
        Ending::Respond { bytes, error_code } => {
            let mut res = Response::new(ResponseBody::full(bytes));
            *res.status_mut() = status_for(error_code);
            res.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            res
        }
        Ending::Silent(CancelReason::Shutdown) => plain(StatusCode::SERVICE_UNAVAILABLE),
        // Only a listen stream is torn down, and it always streams; a
        // request cancelled otherwise (its own cancellation fired with a
        // transport reason) has nothing to say.
        Ending::TearDown(_) | Ending::Silent(_) => plain(StatusCode::NO_CONTENT),
    }
}

/// The HTTP status of a JSON answer: `404` for method-not-found, `400` for
/// the protocol errors, `200` otherwise.
fn status_for(code: Option<i64>) -> StatusCode {
    match code {
        Some(ErrorObject::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            ErrorObject::HEADER_MISMATCH
            | ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// `503` with `Retry-After: 1` and a JSON-RPC error: the adapter runs its
/// [maximum](super::StreamableHttpService::max_in_flight) of requests.
pub(crate) fn busy(id: &RequestId, max: usize) -> Response<ResponseBody> {
    let mut res = rejected(Rejection::new(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(id.clone()),
        ErrorObject::new(
            ErrorObject::INTERNAL_ERROR,
            format!("Service Unavailable: the server has its maximum of {max} requests in flight; try again later"),
        ),
    ));
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

/// A status without a body.
pub(crate) fn plain(status: StatusCode) -> Response<ResponseBody> {
    let mut res = Response::new(ResponseBody::empty());
    *res.status_mut() = status;
    res
}

/// A rejection's response: its status and JSON-RPC error.
pub(crate) fn rejected(rejection: Rejection) -> Response<ResponseBody> {
    rejection.into_response().map(ResponseBody::from_full)
}

/// `405` with `Allow` listing what the endpoint serves (RFC 9110
/// §15.5.6): `POST`, and `DELETE` when legacy sessions are on. There is no
/// GET stream.
pub(crate) fn method_not_allowed(method: &HttpMethod, sessions: bool) -> Response<ResponseBody> {
    let (allow, accepted) = if sessions {
        ("POST, DELETE", "POST and DELETE")
    } else {
        ("POST", "POST")
    };
    let mut res = rejected(Rejection::new(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            format!(
                "Method Not Allowed: the MCP endpoint accepts {accepted} only (got {})",
                crate::sanitize::for_log(method.as_str())
            ),
        ),
    ));
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    res
}

fn sse(exchange: Exchange, keep_alive: Option<Duration>) -> Response<ResponseBody> {
    let mut res = Response::new(ResponseBody::sse(exchange, keep_alive));
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping() {
        assert_eq!(status_for(Some(-32601)), StatusCode::NOT_FOUND);
        assert_eq!(status_for(Some(-32020)), StatusCode::BAD_REQUEST);
        assert_eq!(status_for(Some(-32603)), StatusCode::OK);
        assert_eq!(status_for(None), StatusCode::OK);
    }
}
