//! The same handler served by rmcp's `StreamableHttpService` (stateless,
//! JSON responses) behind `CancelOnDisconnectLayer::http()`, called by this
//! crate's `HttpClient` (2026-07-28): a server deadline and a client that
//! goes away drop the handler; progress in the response body keeps a
//! request alive and silence ends it; progress that does not increase and
//! anything of a request after its answer are not sent; a client that goes
//! away drops the handler with or without the layer, which adds the reason.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::ServiceBuilder;
use tower_mcp_cancel::transport::http::{serve, HttpClient};
use tower_mcp_cancel::CancelOnDisconnectLayer;

use super::*;

/// Serves `wrap(Tools)` on a free port, its progress observed; the
/// client, and the handler's events.
async fn start(
    wrap: impl FnOnce(Tools) -> Cancellable<Tools>,
) -> (HttpClient, mpsc::UnboundedReceiver<(&'static str, Value)>) {
    let s = serve_tools(wrap).await;
    (s.client, s.events)
}

/// A served `Tools`: the client, the handler's events, what a `late`
/// tool's reporter waits for, and every byte of the response bodies.
struct Served {
    client: HttpClient,
    events: mpsc::UnboundedReceiver<(&'static str, Value)>,
    release: Arc<tokio::sync::Notify>,
    wire: Arc<Mutex<Vec<u8>>>,
}

impl Served {
    /// The progress values for `token` in the response bodies so far:
    /// those before a response and those after one.
    fn progress_for(&self, token: &str) -> (Vec<f64>, Vec<f64>) {
        let wire = self.wire.lock().unwrap();
        let (mut before, mut after, mut answered) = (Vec::new(), Vec::new(), false);
        for line in String::from_utf8_lossy(&wire).lines() {
            let Some(Ok(v)) = line
                .strip_prefix("data:")
                .map(|d| serde_json::from_str::<Value>(d.trim()))
            else {
                continue;
            };
            answered |= v.get("result").is_some() || v.get("error").is_some();
            if v["method"] == "notifications/progress"
                && v["params"]["progressToken"] == json!(token)
            {
                let p = v["params"]["progress"].as_f64().unwrap();
                if answered {
                    after.push(p)
                } else {
                    before.push(p)
                }
            }
        }
        (before, after)
    }
}

/// `res` with every data frame of its body appended to `log`.
fn record<B: http_body::Body<Data = bytes::Bytes>>(
    log: Arc<Mutex<Vec<u8>>>,
    res: ::http::Response<B>,
) -> ::http::Response<impl http_body::Body<Data = bytes::Bytes, Error = B::Error>> {
    use http_body_util::BodyExt;
    res.map(|body| {
        body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                log.lock().unwrap().extend_from_slice(data);
            }
            frame
        })
    })
}

async fn serve_tools(wrap: impl FnOnce(Tools) -> Cancellable<Tools>) -> Served {
    serve_tools_behind(wrap, true, true).await
}

/// [`serve_tools`], behind `CancelOnDisconnectLayer::http()` or not, with
/// JSON responses or SSE streams.
async fn serve_tools_behind(
    wrap: impl FnOnce(Tools) -> Cancellable<Tools>,
    cancel_on_disconnect: bool,
    json_response: bool,
) -> Served {
    let (tx, events) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let handler = wrap(Tools(tx, release.clone()));
    let observe = handler.observe_http();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(json_response);
    let wire = Arc::new(Mutex::new(Vec::new()));
    let log = wire.clone();
    let rmcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    if cancel_on_disconnect {
        let mcp = ServiceBuilder::new()
            // What leaves the server: every body frame, as it is polled.
            .map_response(move |res| record(log.clone(), res))
            .layer(CancelOnDisconnectLayer::http())
            .layer(observe)
            .service(rmcp);
        tokio::spawn(serve(listener, mcp, shutdown));
    } else {
        let mcp = ServiceBuilder::new()
            .map_response(move |res| record(log.clone(), res))
            .map_err(|e: std::convert::Infallible| -> tower::BoxError { match e {} })
            .layer(observe)
            .service(rmcp);
        tokio::spawn(serve(listener, mcp, shutdown));
    }
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    Served {
        client,
        events,
        release,
        wire,
    }
}

/// Waits for `kind` of request `id`, failing on its `DONE`.
async fn event(events: &mut mpsc::UnboundedReceiver<(&'static str, Value)>, kind: &str, id: i64) {
    loop {
        let (k, i) = events.recv().await.expect("server gone");
        if k == kind && i == json!(id) {
            return;
        }
        assert!(
            !(i == json!(id) && k == "DONE"),
            "{id}: DONE where {kind} was expected"
        );
    }
}

#[tokio::test]
async fn a_server_deadline_drops_the_handler_and_answers_with_an_error() {
    let (client, mut events) = start(|t| {
        Cancellable::new(t).timeout(
            TimeoutLayer::new(Duration::from_secs(60))
                .method("tools/call", Duration::from_millis(200)),
        )
    })
    .await;
    let err = client
        .oneshot(call(7, "spawned", json!({})))
        .await
        .unwrap_err();
    let err = err
        .downcast_ref::<ErrorObject>()
        .expect("an error response");
    assert_eq!(err.code, ErrorObject::INTERNAL_ERROR, "{err:?}");
    assert_eq!(err.data.as_ref().unwrap()["limit"], "timeout", "{err:?}");
    event(&mut events, "DROPPED", 7).await;
    event(&mut events, "TOKEN", 7).await;
}

#[tokio::test]
async fn a_client_that_goes_away_drops_the_handler() {
    let (client, mut events) = start(Cancellable::new).await;
    // The client's deadline drops its call: on 2026-era HTTP that closes
    // the exchange, the only cancel there is.
    let svc = TimeoutLayer::new(Duration::from_millis(200)).layer(client);
    let err = svc.oneshot(call(7, "slow", json!({}))).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().limit(),
        Limit::Timeout
    );
    event(&mut events, "DROPPED", 7).await;
}

#[tokio::test]
async fn progress_in_the_response_body_keeps_a_request_alive_and_silence_ends_it() {
    let (client, mut events) = start(|t| {
        Cancellable::new(t).progress(
            ProgressResetLayer::new(Duration::from_millis(400)).max(Duration::from_secs(30)),
        )
    })
    .await;
    // 10 steps of 100 ms with a progress token: 1 s in all, idle never 400 ms.
    let args = json!({"steps": 10, "interval_ms": 100});
    let req = McpRequest::new(7, "tools/call")
        .with_params(json!({"name": "slow", "arguments": args, "_meta": {"progressToken": "p7"}}));
    let ok = client.clone().oneshot(req).await;
    assert!(ok.is_ok(), "{ok:?}");
    event(&mut events, "DONE", 7).await;
    // The same without a token: nothing resets the idle limit.
    let err = client.oneshot(call(8, "slow", args)).await.unwrap_err();
    let err = err
        .downcast_ref::<ErrorObject>()
        .expect("an error response");
    assert_eq!(
        err.data.as_ref().unwrap()["limit"],
        "idle timeout",
        "{err:?}"
    );
    event(&mut events, "DROPPED", 8).await;
}

#[tokio::test]
async fn progress_that_does_not_increase_is_not_in_the_response_body() {
    let s = serve_tools(Cancellable::new).await;
    let ok = s
        .client
        .clone()
        .oneshot(call_with_token(7, "unordered", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let (before, after) = s.progress_for("p7");
    assert_eq!((before, after), (vec![5.0, 6.0], vec![]));
}

#[tokio::test]
async fn nothing_of_a_request_is_sent_after_its_answer_even_by_a_task_it_spawned() {
    let mut s = serve_tools(Cancellable::new).await;
    let ok = s
        .client
        .clone()
        .oneshot(call_with_token(7, "late", "p7"))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    event(&mut s.events, "DONE", 7).await;
    // The request is answered; its reporter now sends 5 progress reports.
    s.release.notify_one();
    event(&mut s.events, "REPORTED", 7).await;
    let (_, after) = s.progress_for("p7");
    assert!(
        after.is_empty(),
        "progress sent after the answer: {after:?}"
    );
}

/// Calls the `reason` tool (it never ends; JSON responses or SSE) and goes
/// away after 200 ms;
/// why the handler's request ended, as its `Cancellation` said when the
/// handler was dropped.
async fn reason_of_a_disconnect(cancel_on_disconnect: bool, json_response: bool) -> &'static str {
    let mut s = serve_tools_behind(Cancellable::new, cancel_on_disconnect, json_response).await;
    let svc = TimeoutLayer::new(Duration::from_millis(200)).layer(s.client);
    let err = svc.oneshot(call(7, "reason", json!({}))).await.unwrap_err();
    assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
    // Both at the handler's drop, in either order.
    let (mut dropped, mut reason) = (false, None);
    while !(dropped && reason.is_some()) {
        let (k, i) = s.events.recv().await.expect("server gone");
        if i != json!(7) {
            continue;
        }
        assert_ne!(k, "DONE");
        dropped |= k == "DROPPED";
        if k.starts_with("REASON_") {
            reason = Some(k);
        }
    }
    reason.unwrap()
}

/// What the docs say of `CancelOnDisconnectLayer::http` in front of rmcp's
/// `StreamableHttpService`: without it, a client that goes away still
/// drops the handler (rmcp's `ct`), with rmcp's reasonless cancel...
#[tokio::test]
async fn without_the_layer_a_disconnect_drops_the_handler_through_rmcps_ct() {
    for json_response in [true, false] {
        assert_eq!(
            reason_of_a_disconnect(false, json_response).await,
            "REASON_RMCP",
            "JSON responses: {json_response}"
        );
    }
}

/// ...and with it, the request's reason is the disconnect.
#[tokio::test]
async fn with_the_layer_a_disconnect_drops_the_handler_with_its_reason() {
    for json_response in [true, false] {
        assert_eq!(
            reason_of_a_disconnect(true, json_response).await,
            "REASON_CLIENT_DISCONNECTED",
            "JSON responses: {json_response}"
        );
    }
}
