use super::*;

#[test]
fn only_strict_increase_counts() {
    let tap = ProgressTap::new(ProgressToken::from(1), None);
    assert!(tap.record(1.0, None, None));
    assert!(!tap.record(1.0, None, None), "a repeat");
    assert!(!tap.record(0.5, None, None), "a decrease");
    assert!(!tap.record(f64::NAN, None, None), "not a number");
    assert!(!tap.is_closed());
    assert!(tap.record(1.5, None, None));
    tap.close();
    assert!(!tap.record(9.0, None, None), "after the end");
    assert_eq!(tap.last(), Some(1.5));
}

fn tap_for(c: &Cancellation, token: i64, started: Instant) -> ProgressTap {
    let request = TapRequest::new(started, Duration::from_secs(1), None, None);
    ProgressTap::for_request(c, ProgressToken::from(token), None, request)
}

/// The first layer's tap lives in the request's state; a second (a
/// layer inside another) gets a state of its own, with the request's
/// label, sees the progress recorded on the first, and cancels the
/// request's cancellation too.
#[tokio::test(start_paused = true)]
async fn a_second_tap_gets_a_state_of_its_own() {
    let c = RequestState::start(Some(RequestId::from(7)), Some(Method::new("tools/call")));
    let started = Instant::now();
    let outer = tap_for(&c, 1, started);
    assert!(outer.lives_in(&c));
    let inner = tap_for(&c, 2, started);
    assert!(!inner.lives_in(&c));
    assert_eq!(inner.label().0, Some(&RequestId::from(7)));
    assert_eq!(inner.label().1.map(|m| m.as_str()), Some("tools/call"));
    let idle_deadline = |tap: &ProgressTap| tap.deadlines().and_then(|d| d.first());
    assert_eq!(
        idle_deadline(&inner),
        Some(started + Duration::from_secs(1))
    );
    // Progress recorded on the request's tap restarts the inner idle clock.
    tokio::time::advance(Duration::from_millis(500)).await;
    outer.record(1.0, None, None);
    assert_eq!(inner.last(), None);
    assert_eq!(
        idle_deadline(&inner),
        Some(started + Duration::from_millis(1500))
    );
    inner.cancel(&CancelReason::Shutdown);
    assert_eq!(c.reason(), Some(&CancelReason::Shutdown));
}

#[test]
fn observers_and_subscribers_see_accepted_only() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let tap = ProgressTap::new(
        ProgressToken::from("t"),
        Some(ProgressObserver::new(move |p| {
            s2.lock().unwrap().push(p.progress)
        })),
    );
    let rx = tap.subscribe();
    tap.record(0.0, Some(2.0), Some("start".into()));
    tap.record(0.0, None, None);
    tap.record(2.0, Some(2.0), None);
    assert_eq!(*seen.lock().unwrap(), vec![0.0, 2.0]);
    assert_eq!(rx.borrow().as_ref().unwrap().progress, 2.0);
}
