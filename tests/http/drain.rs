//! The Streamable HTTP adapter's drain grace, under a paused clock (the
//! adapter called as a tower service, as hyper calls it): after the
//! shutdown token fires new requests get `503` without reaching the
//! service, a listen stream gets its graceful result at once, work that
//! fits in the grace is answered, and what still runs after it is cancelled
//! with "shutdown" (`503` before the first byte, handler dropped, token
//! fired).

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::http::StreamableHttpService;
use tower_mcp_cancel::CancelReason;

use crate::support::drain::{service, GRACE};

fn post(id: i64, method: &str, ms: Option<u64>) -> Request<Full<bytes::Bytes>> {
    let mut params = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }});
    if let Some(ms) = ms {
        params["ms"] = ms.into();
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(Full::new(serde_json::to_vec(&body).unwrap().into()))
        .unwrap()
}

/// Status and body of a response, and the time it was complete.
async fn answer(
    svc: StreamableHttpService<impl tower_mcp_cancel::transport::McpService + Sync>,
    req: Request<Full<bytes::Bytes>>,
) -> (StatusCode, String, Instant) {
    let res = svc.oneshot(req).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        String::from_utf8_lossy(&body).into_owned(),
        Instant::now(),
    )
}

/// The JSON-RPC message in a JSON body or the last SSE `data:` line.
fn message(body: &str) -> Value {
    let text = body
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(body);
    serde_json::from_str(text.trim()).unwrap_or(Value::Null)
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_work_finish_within_the_grace_and_cancels_the_rest() {
    let (recorder, mut events) = Recorder::new();
    let shutdown = CancellationToken::new();
    let svc = StreamableHttpService::new(service(recorder))
        .shutdown(shutdown.clone())
        .drain_grace(GRACE);

    let fits = tokio::spawn(answer(svc.clone(), post(1, "work", Some(1000))));
    let too_long = tokio::spawn(answer(svc.clone(), post(2, "work", Some(60_000))));
    let listen = tokio::spawn(answer(svc.clone(), post(3, "subscriptions/listen", None)));
    for _ in 0..3 {
        assert!(matches!(events.next().await, Event::Started(_)));
    }

    let t0 = Instant::now();
    shutdown.cancel();

    // No new work: 503 at once, the service never sees it.
    let (status, _, at) = answer(svc.clone(), post(4, "work", Some(1))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(at, t0);

    // The listen stream ends at once with its graceful result.
    let (status, body, at) = listen.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&body)["result"]["resultType"], "complete", "{body}");
    assert_eq!(at, t0);

    // Work that fits in the grace is answered.
    let (status, body, at) = fits.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&body)["result"]["slept"], 1000, "{body}");
    assert_eq!(at - t0, std::time::Duration::from_secs(1));

    // Work that does not is cancelled when the grace is over: 503 (no byte
    // was sent yet), its handler dropped, its token fired with "shutdown".
    let (status, body, at) = too_long.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(at - t0, GRACE);
    let seen = events.drain();
    assert!(seen.contains(&Event::Done(RequestId::from(1))), "{seen:?}");
    assert!(
        seen.contains(&Event::Dropped(RequestId::from(2))),
        "{seen:?}"
    );
    assert!(
        seen.contains(&Event::Token(
            RequestId::from(2),
            Some(CancelReason::Shutdown)
        )),
        "{seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, Event::Started(i) if *i == RequestId::from(4))),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_grace_shutdown_cancels_at_once() {
    let (recorder, mut events) = Recorder::new();
    let shutdown = CancellationToken::new();
    let svc = StreamableHttpService::new(service(recorder)).shutdown(shutdown.clone());
    let work = tokio::spawn(answer(svc.clone(), post(1, "work", Some(1000))));
    assert!(matches!(events.next().await, Event::Started(_)));
    let t0 = Instant::now();
    shutdown.cancel();
    let (status, _, at) = work.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(at, t0);
}
