//! Exhaustive interleavings of the cancel state machine (run with
//! `RUSTFLAGS="--cfg tower_mcp_cancel_loom" cargo test --lib loom_model`, see `.ci/run`).
//!
//! Covered: the one-shot outcome (who wins between cancel, cancel and
//! complete), the publication of the reason with it, the token's
//! creation racing a cancel, and the registration of the layer's waker
//! against the wake on cancel (a lost wake-up is a loom deadlock).
//! Not covered: the insides of `std`'s `OnceLock` and of `futures`'
//! `AtomicWaker` (modelled by their documented contracts, see `sync`) nor
//! of tokio's `CancellationToken` (a real one, whose calls loom sees as
//! atomic steps; only the order in which this file calls it is checked).

use std::future::poll_fn;

use loom::thread;

use super::*;

/// A driver that gets `complete() == false` must already see the reason:
/// otherwise it would write a response for a request it counts cancelled.
#[test]
fn complete_refused_by_cancel_sees_reason() {
    loom::model(|| {
        let c = Cancellation::new();
        let c2 = c.clone();
        let canceller = thread::spawn(move || c2.cancel(CancelReason::Shutdown));
        let completed = c.complete();
        if !completed {
            assert!(c.is_cancelled(), "complete() refused, not cancelled");
            assert_eq!(c.reason(), Some(&CancelReason::Shutdown));
        }
        let cancelled = canceller.join().unwrap();
        assert_ne!(completed, cancelled, "exactly one of them wins");
        assert_eq!(c.reason().is_some(), cancelled);
    });
}

/// Of two cancels and a complete, one wins, and a loser sees the
/// winner's outcome as soon as it lost.
#[test]
fn first_of_cancel_cancel_complete_wins() {
    loom::model(|| {
        let c = Cancellation::new();
        let (c1, c2) = (c.clone(), c.clone());
        let a = thread::spawn(move || {
            let won = c1.cancel(CancelReason::Shutdown);
            assert!(c1.is_finished());
            won
        });
        let b = thread::spawn(move || {
            let won = c2.cancel(CancelReason::TransportClosed);
            assert!(c2.is_finished());
            won
        });
        let completed = c.complete();
        if !completed {
            assert!(c.reason().is_some(), "complete() refused, no reason");
        }
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(u8::from(a) + u8::from(b) + u8::from(completed), 1);
        let expected = match (a, b) {
            (true, _) => Some(&CancelReason::Shutdown),
            (_, true) => Some(&CancelReason::TransportClosed),
            _ => None,
        };
        assert_eq!(c.reason(), expected);
    });
}

/// A token asked for while (or after) a cancel is seen is cancelled at
/// once; one asked for before it is cancelled by the time `cancel()`
/// returns.
#[test]
fn token_fires_on_cancel_whenever_created() {
    loom::model(|| {
        let c = Cancellation::new();
        let c2 = c.clone();
        let asker = thread::spawn(move || {
            let seen = c2.is_cancelled();
            let token = c2.token();
            if seen {
                assert!(token.is_cancelled(), "token of a cancelled request");
            }
            token
        });
        assert!(c.cancel(CancelReason::Shutdown));
        assert!(c.token().is_cancelled());
        assert!(asker.join().unwrap().is_cancelled());
    });
}

/// The layer's waker, registered by `poll_cancelled`, is woken by a
/// concurrent cancel (if the wake-up were lost, `block_on` would never
/// return and loom reports a deadlock).
#[test]
fn cancel_wakes_registered_poller() {
    loom::model(|| {
        let c = Cancellation::new();
        let c2 = c.clone();
        let poller =
            thread::spawn(move || loom::future::block_on(poll_fn(|cx| c2.poll_cancelled(cx))));
        assert!(c.cancel(CancelReason::ClientDisconnected));
        assert_eq!(poller.join().unwrap(), CancelReason::ClientDisconnected);
    });
}
