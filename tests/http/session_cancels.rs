//! Cancelling in a 2025-era session (the endpoint of [`crate::sessions`]): a
//! session's `notifications/cancelled` drops only its own request (also in a
//! race with the handler's end, after which nothing is written); ids are per
//! session; `DELETE` cancels what is in flight; a disconnected request can
//! still be cancelled in its session; a draining server still serves cancels;
//! the log of a session cancel bounds the request id. The adapter is called
//! directly (no sockets), so the clock can be paused.
#![cfg(feature = "http")]

use std::time::Duration;

use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::BoxError;
use tower::{service_fn, ServiceExt};
use tower_mcp_cancel::transport::http::{SessionLimits, StreamableHttpService};
use tower_mcp_cancel::{CancelReason, McpRequest};

use crate::sessions::{
    cancelled, endpoint, legacy_call, no_drop, open, post, request, send, start, started,
};
use crate::support::http::{Event, Tools};

#[tokio::test]
async fn a_cancel_drops_only_the_request_of_its_own_session() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let a = open(&ep).await;
    let b = open(&ep).await;
    let call_a = start(&ep, post(&legacy_call(1, "hang"), Some(&a)));
    started(&mut events, 1).await;
    let call_b = start(&ep, post(&legacy_call(2, "hang"), Some(&b)));
    started(&mut events, 2).await;

    // Session B names A's request: nothing happens.
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&b))).await;
    assert_eq!(status, 202);
    // Session B cancels its own.
    let (status, _, _) = send(&ep, post(&cancelled(2), Some(&b))).await;
    assert_eq!(status, 202);
    let seen = events.until(|e| *e == Event::Dropped(2.into())).await;
    assert!(!seen.contains(&Event::Dropped(1.into())), "{seen:?}");
    let (status, text) = call_b.await.unwrap();
    assert_eq!(
        (status, text.as_str()),
        (204, ""),
        "nothing is answered for a cancelled request"
    );
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    assert_eq!(
        reason,
        Some(CancelReason::Peer(Some("user stop [31m".into()))),
        "the reason is sanitized"
    );
    assert!(!call_a.is_finished(), "A's request still runs");

    // A cancel without a session id resolves nothing either.
    let (status, _, _) = send(&ep, post(&cancelled(1), None)).await;
    assert_eq!(status, 202);
    no_drop(&mut events);
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&a))).await;
    assert_eq!(status, 202);
    events.until(|e| *e == Event::Dropped(1.into())).await;
    assert_eq!(call_a.await.unwrap().0, 204);
}

/// The same id in two sessions: each session's cancel reaches its own.
#[tokio::test]
async fn ids_are_per_session() {
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let a = open(&ep).await;
    let b = open(&ep).await;
    let call_a = start(&ep, post(&legacy_call(7, "hang"), Some(&a)));
    started(&mut events, 7).await;
    let call_b = start(&ep, post(&legacy_call(7, "hang"), Some(&b)));
    started(&mut events, 7).await;
    send(&ep, post(&cancelled(7), Some(&a))).await;
    assert_eq!(call_a.await.unwrap().0, 204);
    events.until(|e| *e == Event::Dropped(7.into())).await;
    assert!(!call_b.is_finished());
    // A duplicate id within one session is refused without that id.
    let (status, _, text) = send(&ep, post(&legacy_call(7, "echo"), Some(&b))).await;
    assert_eq!(status, 400, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("id").is_none() || v["id"].is_null(), "{v}");
    call_b.abort();
}

/// The race the spec names: a cancel arriving while the handler finishes.
/// Whichever the lifecycle sees first decides, once: a cancel seen first
/// means nothing is written; a cancel after the end changes nothing.
#[tokio::test]
async fn a_cancel_racing_the_end_never_writes_after_it() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;

    // The handler's result is ready and the cancel lands before the
    // lifecycle polls again: the cancel wins, nothing is answered.
    let call = start(&ep, post(&legacy_call(1, "wait_release"), Some(&s)));
    started(&mut events, 1).await;
    tools.release.notify_one();
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&s))).await;
    assert_eq!(status, 202);
    assert_eq!(call.await.unwrap(), (204, String::new()));

    // The answer went out first: the late cancel finds nothing in flight.
    let call = start(&ep, post(&legacy_call(2, "wait_release"), Some(&s)));
    started(&mut events, 2).await;
    tools.release.notify_one();
    let (status, text) = call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["result"]["released"],
        true
    );
    events.until(|e| *e == Event::Done(2.into())).await;
    let (status, _, _) = send(&ep, post(&cancelled(2), Some(&s))).await;
    assert_eq!(status, 202);
    no_drop(&mut events);
}

#[tokio::test]
async fn delete_ends_the_session_and_cancels_its_work() {
    let (ep, tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let call = start(&ep, post(&legacy_call(3, "hang"), Some(&s)));
    started(&mut events, 3).await;
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&s))).await;
    assert_eq!(status, 200);
    events.until(|e| *e == Event::Dropped(3.into())).await;
    assert_eq!(call.await.unwrap().0, 204);
    let reason = tools
        .last
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .reason()
        .cloned();
    assert_eq!(reason, Some(CancelReason::TransportClosed));
    // Ended: every later use is 404.
    let (status, _, _) = send(&ep, post(&legacy_call(4, "echo"), Some(&s))).await;
    assert_eq!(status, 404);
    let (status, _, _) = send(&ep, post(&cancelled(4), Some(&s))).await;
    assert_eq!(status, 404);
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&s))).await;
    assert_eq!(status, 404);
    // DELETE without a session id; GET stays 405.
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, None)).await;
    assert_eq!(status, 400);
    let (status, _, _) = send(&ep, request(http::Method::GET, None, Some(&s))).await;
    assert_eq!(status, 405);
}

/// A legacy request's disconnect still does not cancel it (2025 rule),
/// but the session can: the detached call stays registered.
#[tokio::test]
async fn a_disconnect_detaches_and_the_session_can_still_cancel() {
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let call = start(&ep, post(&legacy_call(5, "hang"), Some(&s)));
    started(&mut events, 5).await;
    call.abort();
    let _ = call.await;
    // Had the disconnect dropped the call, its drop would be recorded now.
    no_drop(&mut events);
    send(&ep, post(&cancelled(5), Some(&s))).await;
    events.until(|e| *e == Event::Dropped(5.into())).await;
}

/// While the adapter drains (shutdown token fired, a grace running), a new
/// request gets `503`, but a session's `notifications/cancelled` and
/// `DELETE` are still served: they only end work.
#[tokio::test(start_paused = true)]
async fn a_draining_server_refuses_new_work_but_still_serves_cancels() {
    let (tools, mut events) = Tools::new();
    let inner = tools.service();
    let mcp = service_fn(move |req: McpRequest| {
        let inner = inner.clone();
        async move {
            if req.method() == "initialize" {
                return Ok::<_, BoxError>(json!({"protocolVersion": "2025-11-25"}));
            }
            inner.oneshot(req).await
        }
    });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ep = BoxCloneService::new(
        StreamableHttpService::new(mcp)
            .stateful_sessions(SessionLimits::new())
            .shutdown(shutdown.clone())
            .drain_grace(Duration::from_secs(3600)),
    );
    let s = open(&ep).await;
    let t = open(&ep).await;
    let call = start(&ep, post(&legacy_call(1, "hang"), Some(&s)));
    started(&mut events, 1).await;
    let other = start(&ep, post(&legacy_call(2, "hang"), Some(&t)));
    started(&mut events, 2).await;
    shutdown.cancel();

    let (status, _, _) = send(&ep, post(&legacy_call(3, "echo"), Some(&s))).await;
    assert_eq!(status, 503, "no new work while draining");
    let (status, _, _) = send(&ep, post(&cancelled(1), Some(&s))).await;
    assert_eq!(status, 202);
    events.until(|e| *e == Event::Dropped(1.into())).await;
    assert_eq!(call.await.unwrap().0, 204);
    let (status, _, _) = send(&ep, request(http::Method::DELETE, None, Some(&t))).await;
    assert_eq!(status, 200);
    events.until(|e| *e == Event::Dropped(2.into())).await;
    assert_eq!(other.await.unwrap().0, 204);
}

/// A `MakeWriter` collecting log output into one shared buffer.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// Captures this thread's logs (the test runtime is current-thread)
    /// until the guards drop.
    fn capture() -> (Self, (tracing::subscriber::DefaultGuard, tracing::Dispatch)) {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // With a single live dispatcher, tracing-core computes a callsite's
        // interest from the default of the thread that first hits it: a
        // concurrent test's thread, with no subscriber, would disable that
        // callsite for this one too. A second live dispatcher makes it ask
        // every dispatcher (and rebuilds the cache).
        let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        (logs, (guard, second))
    }

    /// Asserts every line is short and free of control characters.
    fn assert_bounded(&self) -> String {
        let out = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        for line in out.lines() {
            assert!(line.len() < 2048, "a log line of {} bytes", line.len());
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        out
    }
}

/// A session's `notifications/cancelled` names a request id from the wire:
/// logged bounded and clean, whether the id names a request or not.
#[tokio::test]
async fn a_session_cancel_logs_a_bounded_request_id() {
    let (logs, _guard) = Logs::capture();
    let (ep, _tools, mut events) = endpoint(SessionLimits::new());
    let s = open(&ep).await;
    let huge = format!("{}\u{1b}[31m\u{85}", "i\n".repeat(500_000));
    let mut call = legacy_call(0, "hang");
    call["id"] = json!(huge);
    let running = start(&ep, post(&call, Some(&s)));
    events.until(|e| matches!(e, Event::Started(_))).await;
    for id in [json!(huge), json!(format!("{huge}-unknown"))] {
        let mut n = cancelled(0);
        n["params"]["requestId"] = id;
        let (status, _, _) = send(&ep, post(&n, Some(&s))).await;
        assert_eq!(status, 202);
    }
    assert_eq!(running.await.unwrap().0, 204);
    let out = logs.assert_bounded();
    assert!(
        out.lines()
            .filter(|l| l.contains("notifications/cancelled from a legacy session"))
            .count()
            == 2,
        "{out}"
    );
}
