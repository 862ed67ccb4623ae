//! The helpers' forms for handlers that are not `McpRequest` services: an
//! awaited drop, events keyed by a name.

use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{settle, DropProbe, Event, Recorder};

/// `dropped()` is pending while the guard lives, and resolves with the
/// drop's instant once a task that is not a service drops it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn dropped_waits_for_the_drop_and_says_when() {
    let (probe, guard) = DropProbe::new();
    let (release, released) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _guard = guard;
        let _ = released.await;
    });
    let start = tokio::time::Instant::now();
    let mut waiting = Box::pin(probe.dropped());
    assert!((&mut waiting).now_or_never().is_none(), "no drop yet");
    settle().await;
    assert!((&mut waiting).now_or_never().is_none(), "no drop yet");

    tokio::time::advance(Duration::from_secs(3)).await;
    release.send(()).unwrap();
    let at = waiting.await;
    assert_eq!(at - start, Duration::from_secs(3));
    assert_eq!(probe.dropped_at(), Some(at));
    assert!(probe.was_cancelled(), "dropped before finish");
}

/// A drop that happened before the wait began is returned at once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn dropped_after_the_drop_returns_at_once() {
    let (probe, guard) = DropProbe::new();
    guard.finish();
    drop(guard);
    let at = probe.dropped().now_or_never().expect("resolved at once");
    assert_eq!(probe.dropped_at(), Some(at));
    assert!(probe.is_finished() && !probe.was_cancelled());
}

/// Without a drop the wait ends in a panic, not a hang (the paused clock
/// runs to the bound once nothing else can run).
#[tokio::test(flavor = "current_thread", start_paused = true)]
#[should_panic(expected = "timed out waiting for a guard of the probe to be dropped")]
async fn dropped_without_a_drop_panics_at_the_bound() {
    let (probe, _guard) = DropProbe::new();
    probe.dropped().await;
}

/// A handler keyed by a name: started, then done, under that name.
#[tokio::test(flavor = "current_thread")]
async fn start_as_records_under_the_given_name() {
    let (recorder, mut events) = Recorder::new();
    let guard = recorder.start_as("slow");
    assert_eq!(events.next().await, Event::Started("slow".into()));
    assert_eq!(events.try_next(), None);
    guard.finish();
    drop(guard);
    assert_eq!(events.next().await, Event::Done("slow".into()));

    let guard = recorder.start_as(7);
    drop(guard);
    assert_eq!(events.next().await, Event::Started(7.into()));
    assert_eq!(events.next().await, Event::Dropped(7.into()));
}

/// Any token: nothing while it is live, `Token(id, None)` once it fires.
#[tokio::test(flavor = "current_thread")]
async fn watch_token_as_reports_when_the_token_fires() {
    let (recorder, mut events) = Recorder::new();
    let ct = CancellationToken::new();
    recorder.watch_token_as("req-1", ct.clone());
    settle().await;
    assert_eq!(events.try_next(), None, "the token has not fired");
    ct.cancel();
    assert_eq!(events.next().await, Event::Token("req-1".into(), None));
}
