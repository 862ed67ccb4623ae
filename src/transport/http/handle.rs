//! One POST on the MCP endpoint, as a sequence of named steps: the HTTP
//! checks, the body, the JSON-RPC message, the protocol era and its
//! metadata headers, the call, and the response's shape. The order is the
//! one the [adapter's docs](super::StreamableHttpService) list.

use std::sync::Arc;

use http::request::Parts;
use http::{HeaderMap, Method as HttpMethod, Request, Response, StatusCode};
use http_body::Body;

use super::body::ResponseBody;
use super::config::{Config, StatefulRequests, ASSUMED_LEGACY_VERSION};
use super::drain::{self, ShutdownSignal};
use super::exchange::{CallFuture, Exchange, Hold};
use super::headers::{MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER};
use super::request_body;
use super::response;
use super::serve::Running;
use super::session::JoinError;
use super::session_endpoint::{self as endpoint, Opened};
use super::validation::{
    check_accept, check_content_type, check_legacy_headers, check_param_headers,
    check_request_headers, protocol_version_header, MirroredParams, Rejection,
};
use crate::error::BoxError;
use crate::jsonrpc::{
    ErrorObject, Message, ParamsView, RawNotification, RawRequest, SUBSCRIPTIONS_LISTEN,
};
use crate::notify::outbox::Scope;
use crate::observe::{Era as ObservedEra, Transport};
use crate::timeout::BudgetKey;
use crate::transport::call::server as call;
use crate::transport::McpService;
use crate::Cancellation;

/// Answers one HTTP request: a rejection becomes its error response.
pub(crate) async fn handle<S, B>(
    inner: S,
    config: Arc<Config>,
    req: Request<B>,
) -> Response<ResponseBody>
where
    S: McpService,
    B: Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    match try_handle(inner, config, req).await {
        Ok(res) => res,
        Err(rejection) => {
            tracing::debug!(status = %rejection.status, code = rejection.error.code, message = ?rejection.error.message, "request rejected");
            response::rejected(rejection)
        }
    }
}

async fn try_handle<S, B>(
    inner: S,
    config: Arc<Config>,
    req: Request<B>,
) -> Result<Response<ResponseBody>, Rejection>
where
    S: McpService,
    B: Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = req.into_parts();
    // Held by the call, not by the handler's request: see `Hold`.
    let running = parts.extensions.remove::<Running>();
    config.origin.check(&parts.headers)?;
    let sessions = config.sessions.as_deref();
    if let (Some(sessions), &HttpMethod::DELETE) = (sessions, &parts.method) {
        return endpoint::delete(sessions, &parts.headers);
    }
    if parts.method != HttpMethod::POST {
        return Ok(response::method_not_allowed(
            &parts.method,
            sessions.is_some(),
        ));
    }
    check_accept(&parts.headers)?;
    check_content_type(&parts.headers)?;
    let bytes = request_body::read(body, &parts.headers, &config).await?;
    // The body is parsed once: the envelope, the progress token and the
    // fields the headers mirror (`view`, borrowed from `bytes`) in one pass.
    let budget_key = config.budget_key.as_ref().map(BudgetKey::as_str);
    let (raw, view) = match decode(&bytes, budget_key)? {
        // Draining: no new work. A legacy session's cancel and `DELETE` are
        // still served, they only end work.
        Decoded::Request(..) if drain::shutting_down(&config) => {
            tracing::debug!("request refused: server shutting down");
            return Ok(response::plain(StatusCode::SERVICE_UNAVAILABLE));
        }
        Decoded::Request(raw, view) => (raw, view),
        Decoded::Notification(n) => {
            if let Some(sessions) = sessions {
                endpoint::notification(sessions, &parts.headers, &n)?;
            }
            return Ok(response::plain(StatusCode::ACCEPTED));
        }
    };
    let era = check_metadata(&config, &parts.headers, &raw, view.into())?;
    // Counted from here to the call's end (see `max_in_flight`); refused
    // before a session is minted or joined.
    let Some(place) = config.in_flight.try_take() else {
        let max = config.in_flight.max();
        tracing::warn!(request_id = %raw.id, max, "request refused: too many requests in flight");
        return Ok(response::busy(&raw.id, max));
    };
    // Only a legacy request has a session; a modern one ignores the header.
    let opened = match sessions {
        Some(sessions) if era.legacy => {
            endpoint::of_request(sessions, &parts.headers, raw.method.as_str())?
        }
        _ => None,
    };
    let hold = Hold {
        _running: running,
        _place: Some(place),
    };
    let exchange = start_call(
        inner,
        &config,
        parts,
        raw,
        &view,
        era,
        opened.as_ref(),
        hold,
    )?;
    let mut res = response::shape(exchange, &config).await;
    if let (Some(opened), Some(sessions)) = (&opened, sessions) {
        opened.finish(sessions, &mut res);
    }
    Ok(res)
}

/// What a POST carries.
enum Decoded<'a> {
    /// A request, and the fields of its params read with it.
    Request(RawRequest, ParamsView<'a>),
    /// Answered `202` (after a legacy session's cancel, if it is one).
    Notification(RawNotification),
}

/// The message in the body. A response, or anything that is not JSON-RPC,
/// is refused (`400`).
fn decode<'a>(bytes: &'a [u8], budget_key: Option<&str>) -> Result<Decoded<'a>, Rejection> {
    match Message::decode_viewed_with(bytes, budget_key) {
        Err(e) => Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            e.id.clone(),
            e.to_error_object(),
        )),
        Ok((Message::Notification(n), _)) => {
            tracing::debug!(method = ?n.method, "notification accepted");
            Ok(Decoded::Notification(n))
        }
        Ok((Message::Response(r), _)) => Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            r.id,
            ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Invalid Request: clients must not send JSON-RPC responses",
            ),
        )),
        Ok((Message::Request(r), view)) => Ok(Decoded::Request(r, view)),
    }
}

/// Which protocol revision a request belongs to.
#[derive(Clone, Copy, Debug)]
struct Era {
    /// An earlier (2025) revision.
    legacy: bool,
    /// Taken for 2025-03-26 for lack of an `MCP-Protocol-Version` header.
    assumed: bool,
}

/// Decides the request's [`Era`] and checks its metadata headers against
/// its body: the 2026 requirements (and `Mcp-Param-*`) for a modern
/// request, the headers it does send for a legacy one.
fn check_metadata(
    config: &Config,
    headers: &HeaderMap,
    raw: &RawRequest,
    mirrored: MirroredParams<'_>,
) -> Result<Era, Rejection> {
    // Only a 2026 client puts the protocol version in the body: such a body
    // is a 2026 request whatever the header says, so a header cannot turn
    // off the checks below, or cancel-on-disconnect.
    let modern_body = mirrored.has_protocol_version();
    // With legacy sessions on, an `initialize` or a request of a session
    // without the header is from a 2025-03-26 client (later ones send it).
    let session_era = config.sessions.is_some()
        && (raw.method == "initialize" || headers.contains_key(&MCP_SESSION_ID_HEADER));
    let assumed = (config.missing_version_legacy || session_era)
        && !headers.contains_key(&MCP_PROTOCOL_VERSION_HEADER)
        && !modern_body;
    let version = if assumed {
        Some(ASSUMED_LEGACY_VERSION)
    } else {
        protocol_version_header(headers)
    };
    let legacy = !modern_body
        && (assumed || version.is_some_and(|v| config.legacy_versions.iter().any(|l| l == v)));
    if !legacy {
        check_request_headers(
            headers,
            &raw.id,
            raw.method.as_str(),
            &mirrored,
            &config.supported,
        )?;
        if raw.method == "tools/call" && !config.param_headers.is_empty() {
            check_param_headers(
                headers,
                &raw.id,
                raw.params.as_deref(),
                &config.param_headers,
            )?;
        }
    } else if config.legacy == StatefulRequests::Reject {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            Some(raw.id.clone()),
            ErrorObject::new(
                ErrorObject::UNSUPPORTED_PROTOCOL_VERSION,
                format!("Unsupported protocol version: {}", version.unwrap_or("")),
            )
            .with_data(serde_json::json!({ "supported": &*config.supported })),
        ));
    } else {
        check_legacy_headers(headers, &raw.id, raw.method.as_str(), &mirrored)?;
    }
    Ok(Era { legacy, assumed })
}

/// Starts the call: the request the service sees (its [`Cancellation`] —
/// the one an outer layer put in the HTTP request's extensions, or a new
/// one —, a notifier, the HTTP request's extensions
/// and its `HeaderMap`), run by the lifecycle, owned by an [`Exchange`].
#[allow(clippy::too_many_arguments)]
fn start_call<S: McpService>(
    inner: S,
    config: &Arc<Config>,
    parts: Parts,
    raw: RawRequest,
    view: &ParamsView<'_>,
    era: Era,
    opened: Option<&Opened>,
    hold: Hold,
) -> Result<Exchange, Rejection> {
    let id = raw.id.clone();
    let is_listen = raw.method == SUBSCRIPTIONS_LISTEN;
    let cancellation = parts
        .extensions
        .get::<Cancellation>()
        .cloned()
        .unwrap_or_default();
    // A session's request is registered under its id, so that the
    // session's `notifications/cancelled` and `DELETE` reach it.
    let joined = match opened {
        None => None,
        Some(o) => Some(
            o.session
                .join(id.clone(), Some(raw.method.clone()), cancellation.clone())
                .map_err(|e| match e {
                    JoinError::Ended => endpoint::ended(),
                    JoinError::Duplicate => endpoint::duplicate(&id),
                })?,
        ),
    };
    let (scope, queue) = Scope::with_own_queue(cancellation, config.queue);
    let mut mcp = call::prepare(raw, view, &scope, None, config.shutdown.as_ref());
    crate::timeout::inherit_budget(&mut mcp, view.budget);
    let mut extensions = parts.extensions;
    extensions.extend(std::mem::take(mcp.extensions_mut()));
    extensions.insert(parts.headers);
    *mcp.extensions_mut() = extensions;

    let cancel_on_disconnect =
        !era.legacy || config.legacy == StatefulRequests::ServeCancelOnDisconnect;
    tracing::debug!(request_id = %id, method = %crate::sanitize::for_log(mcp.method()), legacy = era.legacy, assumed_version = era.assumed, session = joined.is_some(), "MCP request over HTTP");
    let grace = if is_listen {
        std::time::Duration::ZERO
    } else {
        call::grace_of(&config.grace, &mcp)
    };
    let call = call::run(
        inner,
        mcp,
        *view,
        id.clone(),
        scope.cancellation().clone(),
        is_listen,
        Transport::Http,
        Some(if era.legacy {
            ObservedEra::Legacy
        } else {
            ObservedEra::Modern
        }),
        grace,
    );
    let call: CallFuture = match joined {
        None => Box::pin(call),
        // Registered until the call's ending (also when a disconnect
        // detached it: the session can still cancel it); a handler in its
        // grace no longer holds the id.
        Some(joined) => {
            let handshake = opened.zip(config.sessions.as_ref());
            let handshake = handshake.and_then(|(o, sessions)| o.handshake(sessions));
            Box::pin(call.on_end(Box::new(move |ending| {
                drop(joined);
                if let Some(handshake) = handshake {
                    handshake.settle(ending);
                }
            })))
        }
    };
    Ok(Exchange::new(
        call,
        queue,
        scope,
        id,
        is_listen,
        ShutdownSignal::new(config, is_listen),
        !cancel_on_disconnect,
    )
    .holding(hold))
}
