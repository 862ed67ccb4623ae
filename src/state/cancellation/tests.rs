use super::*;

/// The grace lives in what was padding: the per-request state stays
/// at its size (280 bytes on 64-bit targets).
#[test]
#[cfg(target_pointer_width = "64")]
fn grace_slot_does_not_grow_the_state() {
    assert!(
        std::mem::size_of::<RequestState>() <= 280,
        "{}",
        std::mem::size_of::<RequestState>()
    );
}

#[test]
fn grace_slot_rounds_up_clamps_and_keeps_the_owner_bit() {
    let c = Cancellation::new();
    assert!(!c.grace_handed());
    assert!(c.set_grace(Duration::from_micros(1)));
    assert_eq!(c.grace(), Some(Duration::from_millis(1)));
    assert!(!c.grace_handed(), "no lifecycle owns it");
    #[cfg(any(feature = "stdio", feature = "http"))]
    {
        c.own_grace(Duration::from_secs(5));
        assert_eq!(c.grace(), Some(Duration::from_millis(1)), "set first, kept");
        assert!(c.grace_handed());
        assert!(c.set_grace(Duration::ZERO));
        assert!(!c.grace_handed(), "a zero grace hands nothing");
        let d = Cancellation::new();
        d.own_grace(Duration::ZERO);
        assert_eq!(d.grace(), Some(Duration::ZERO));
        assert!(!d.grace_handed());
        assert!(!d.cancelled_owned());
        d.cancel(CancelReason::Shutdown);
        assert!(d.cancelled_owned());
    }
    assert!(c.set_grace(Duration::from_secs(u64::MAX)));
    assert_eq!(
        c.grace(),
        Some(Duration::from_millis(u64::from(GraceSlot::MAX_MS)))
    );
    c.complete();
    assert!(!c.set_grace(Duration::from_secs(1)));
}

#[test]
fn token_created_after_cancel_is_cancelled() {
    let c = Cancellation::new();
    assert!(c.cancel(CancelReason::TransportClosed));
    assert!(c.token().is_cancelled());
}

#[test]
fn complete_then_cancel_is_noop() {
    let c = Cancellation::new();
    let t = c.token();
    assert!(c.complete());
    assert!(!c.cancel(CancelReason::Shutdown));
    assert!(!t.is_cancelled());
    assert!(c.reason().is_none());
    assert!(c.is_finished());
}

#[test]
fn concurrent_cancel_and_token_always_fire() {
    for _ in 0..2000 {
        let c = Cancellation::new();
        let c2 = c.clone();
        let h = std::thread::spawn(move || c2.token());
        c.cancel(CancelReason::Shutdown);
        assert!(h.join().unwrap().is_cancelled());
    }
}

/// The same rule as `loom_model::complete_refused_by_cancel_sees_reason`,
/// on real threads: the driver waits until the request is finished, then
/// a refused `complete()` must come with the reason.
#[test]
fn complete_refused_by_cancel_sees_reason_across_threads() {
    for _ in 0..20_000 {
        let c = Cancellation::new();
        let c2 = c.clone();
        let h = std::thread::spawn(move || c2.cancel(CancelReason::Shutdown));
        while !c.is_finished() {
            std::thread::yield_now();
        }
        if !c.complete() {
            assert!(c.reason().is_some(), "complete() refused, reason() None");
        }
        assert!(h.join().unwrap());
    }
}

#[tokio::test]
async fn cancelled_future_yields_reason() {
    let c = Cancellation::new();
    let c2 = c.clone();
    let w = tokio::spawn(async move { c2.cancelled().await });
    tokio::task::yield_now().await;
    c.cancel(CancelReason::ClientDisconnected);
    assert_eq!(w.await.unwrap(), CancelReason::ClientDisconnected);
}
