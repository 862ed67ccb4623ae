//! The stdio server's drain grace, under a paused clock: after the shutdown
//! signal (or the end of input) work in flight may finish within the grace
//! and is answered, a listen stream gets its graceful result at once, new
//! requests are refused with an error, and what still runs when the grace
//! is over is cancelled with "shutdown" (handler dropped, token fired,
//! nothing written for it).

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{Event, Recorder};
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::CancelReason;

use crate::support::drain::{service, GRACE};
use crate::support::stdio::{mentions, pipe};

#[tokio::test(start_paused = true)]
async fn shutdown_lets_work_finish_within_the_grace_and_cancels_the_rest() {
    let (recorder, mut events) = Recorder::new();
    let (mut peer, r, w) = pipe(64 * 1024);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(
        StdioServer::new()
            .shutdown(shutdown.clone())
            .drain_grace(GRACE)
            .serve(service(recorder), r, w),
    );
    peer.request(json!(1), "work", json!({"ms": 1000})).await;
    peer.request(json!(2), "work", json!({"ms": 60_000})).await;
    peer.request(json!(3), "subscriptions/listen", json!({}))
        .await;
    for _ in 0..3 {
        assert!(matches!(events.next().await, Event::Started(_)));
    }

    let t0 = Instant::now();
    shutdown.cancel();
    // The listen stream ends at once, gracefully.
    let listen = peer.until_response(json!(3)).await;
    assert_eq!(listen.last().unwrap()["result"]["resultType"], "complete");
    assert_eq!(Instant::now(), t0, "the listen stream does not wait");

    // No new work: a request during the drain is refused, not run.
    peer.request(json!(4), "work", json!({"ms": 1})).await;
    let refused = peer.until_response(json!(4)).await;
    let refused = refused.last().unwrap();
    assert_eq!(refused["error"]["code"], -32603);
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("shutting down"));

    // Work that fits in the grace is answered.
    let done = peer.until_response(json!(1)).await;
    assert_eq!(done.last().unwrap()["result"]["slept"], 1000);
    assert_eq!(Instant::now() - t0, std::time::Duration::from_secs(1));

    // Work that does not is cancelled when the grace is over.
    served.await.unwrap().unwrap();
    assert_eq!(Instant::now() - t0, GRACE);
    let mut seen = events.drain();
    seen.retain(|e| !matches!(e, Event::Token(i, _) if *i == RequestId::from(3)));
    seen.retain(|e| !matches!(e, Event::Dropped(i) if *i == RequestId::from(3)));
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
    assert!(!seen
        .iter()
        .any(|e| matches!(e, Event::Started(i) if *i == RequestId::from(4))));
    let rest = peer.close().await;
    assert!(
        !rest.iter().any(|v| mentions(v, &json!(2))),
        "nothing written for the cancelled request: {rest:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn end_of_input_lets_work_finish_within_the_grace() {
    let (recorder, mut events) = Recorder::new();
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(
        StdioServer::new()
            .drain_grace(GRACE)
            .serve(service(recorder), r, w),
    );
    peer.request(json!(1), "work", json!({"ms": 1000})).await;
    peer.request(json!(2), "work", json!({"ms": 60_000})).await;
    for _ in 0..2 {
        assert!(matches!(events.next().await, Event::Started(_)));
    }
    let t0 = Instant::now();
    let rest = peer.close().await;
    served.await.unwrap().unwrap();
    assert_eq!(Instant::now() - t0, GRACE);
    assert_eq!(rest.len(), 1, "only the answer of 1: {rest:?}");
    assert_eq!(rest[0]["id"], 1);
    assert_eq!(rest[0]["result"]["slept"], 1000);
    let seen = events.drain();
    assert!(
        seen.contains(&Event::Token(
            RequestId::from(2),
            Some(CancelReason::TransportClosed)
        )),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_ends_the_grace_after_end_of_input() {
    let (recorder, mut events) = Recorder::new();
    let (mut peer, r, w) = pipe(64 * 1024);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(
        StdioServer::new()
            .shutdown(shutdown.clone())
            .drain_grace(GRACE)
            .serve(service(recorder), r, w),
    );
    peer.request(json!(1), "work", json!({"ms": 60_000})).await;
    assert!(matches!(events.next().await, Event::Started(_)));
    peer.w.shutdown().await.unwrap(); // end of input: the grace starts
    tower_mcp_cancel::test_util::settle().await;
    assert!(!served.is_finished());
    let t0 = Instant::now();
    shutdown.cancel();
    served.await.unwrap().unwrap();
    assert_eq!(
        Instant::now(),
        t0,
        "the shutdown did not wait out the grace"
    );
    let seen = events.drain();
    assert!(
        seen.contains(&Event::Dropped(RequestId::from(1))),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_grace_shutdown_cancels_at_once() {
    let (recorder, mut events) = Recorder::new();
    let (mut peer, r, w) = pipe(64 * 1024);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(StdioServer::new().shutdown(shutdown.clone()).serve(
        service(recorder),
        r,
        w,
    ));
    peer.request(json!(1), "work", json!({"ms": 1000})).await;
    assert!(matches!(events.next().await, Event::Started(_)));
    let t0 = Instant::now();
    shutdown.cancel();
    served.await.unwrap().unwrap();
    assert_eq!(Instant::now(), t0);
    let seen = events.drain();
    assert!(
        seen.contains(&Event::Dropped(RequestId::from(1))),
        "{seen:?}"
    );
    assert!(!seen.contains(&Event::Done(RequestId::from(1))), "{seen:?}");
}
