//! Deadlines that travel, in process: the handler sees its request's
//! effective deadline; a [`DeadlineCap`] (in the extensions, or inherited
//! through a shared `Cancellation`) caps every timer layer, in every order
//! of the stack, never lengthens a deadline, and names its expiry
//! [`Limit::Inherited`].

use std::future::{pending, Future};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Cancellation, DeadlineCap, Elapsed, Limit, McpRequest,
    ProgressResetLayer, RequestContext, RequestTimeout, TimeoutLayer,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A handler that records the deadline its context shows, then never
/// finishes; its probe records the drop.
fn recording(
    probe: &DropProbe,
    seen: &Arc<Mutex<Option<Option<Instant>>>>,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> + Clone {
    let (probe, seen) = (probe.clone(), seen.clone());
    service_fn(move |req: McpRequest| {
        *seen.lock().unwrap() = Some(RequestContext::of(&req).deadline());
        let guard = probe.guard();
        async move {
            let _g = guard;
            pending::<()>().await;
            Ok::<_, BoxError>(Value::Null)
        }
    })
}

/// Calls `svc` with `req`; the limit that ended it, when, and when the
/// handler was dropped (both from the call's start).
async fn expiry<S>(mut svc: S, req: McpRequest, probe: &DropProbe) -> (Elapsed, Duration)
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    let start = Instant::now();
    let err = svc.ready().await.unwrap().call(req).await.unwrap_err();
    let e = *err
        .downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("not Elapsed: {err}"));
    let at = start.elapsed();
    assert_eq!(
        probe.dropped_at().map(|d| d - start),
        Some(at),
        "the handler is dropped at the expiry"
    );
    (e, at)
}

fn req() -> McpRequest {
    McpRequest::new(1, "tools/call")
}

#[tokio::test(start_paused = true)]
async fn the_handler_sees_the_earliest_of_its_deadlines() {
    let cases: [(Option<u64>, Option<u64>, Option<u64>); 4] = [
        // (timeout, progress max, cap) → the earliest
        (Some(10_000), Some(3_000), None),
        (Some(2_000), Some(3_000), None),
        (Some(10_000), Some(3_000), Some(1_500)),
        (None, None, None),
    ];
    for (timeout, max, cap) in cases {
        let (probe, _) = DropProbe::new();
        let seen = Arc::new(Mutex::new(None));
        let svc = ServiceBuilder::new()
            .layer(CancelOnDisconnectLayer::new())
            .option_layer(timeout.map(|t| TimeoutLayer::new(ms(t))))
            .option_layer(max.map(|m| ProgressResetLayer::new(ms(60_000)).max(ms(m))))
            .service(recording(&probe, &seen));
        let mut r = req();
        if let Some(c) = cap {
            r = r.with_extension(DeadlineCap::after(ms(c)));
        }
        let start = Instant::now();
        let mut call = Box::pin(svc.oneshot(r));
        assert!(futures_util::poll!(call.as_mut()).is_pending());
        let expected = [timeout, max, cap]
            .into_iter()
            .flatten()
            .min()
            .map(|m| start + ms(m));
        assert_eq!(
            *seen.lock().unwrap(),
            Some(expected),
            "{timeout:?} {max:?} {cap:?}"
        );
    }
    // A bare request has no deadline.
    assert_eq!(RequestContext::of(&req()).deadline(), None);
    assert_eq!(RequestContext::of(&req()).remaining(), None);
    assert_eq!(
        RequestContext::of(&req()).deadline_cap(),
        DeadlineCap::none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_cap_shortens_a_deadline_and_never_lengthens_one() {
    // Earlier than the policy: the cap fires, named as inherited.
    let (probe, _) = DropProbe::new();
    let seen = Arc::new(Mutex::new(None));
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(10_000)))
        .service(recording(&probe, &seen));
    let r = req().with_extension(DeadlineCap::after(ms(2_000)));
    let (e, at) = expiry(svc, r, &probe).await;
    assert_eq!(
        (e.limit(), e.after(), at),
        (Limit::Inherited, ms(2_000), ms(2_000))
    );
    assert!(e.to_string().contains("inherited"), "{e}");

    // Later than the policy: the policy fires, as a plain timeout.
    let (probe, _) = DropProbe::new();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(1_000)))
        .service(recording(&probe, &seen));
    let r = req().with_extension(DeadlineCap::after(ms(5_000)));
    let (e, at) = expiry(svc, r, &probe).await;
    assert_eq!((e.limit(), at), (Limit::Timeout, ms(1_000)));

    // A `RequestTimeout` lengthens the policy; a cap still bounds it.
    let (probe, _) = DropProbe::new();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(1_000)))
        .service(recording(&probe, &seen));
    let r = req()
        .with_extension(RequestTimeout::after(ms(60_000)))
        .with_extension(DeadlineCap::after(ms(3_000)));
    let (e, at) = expiry(svc, r, &probe).await;
    assert_eq!((e.limit(), at), (Limit::Inherited, ms(3_000)));

    // A method without a deadline gets the cap's.
    let (probe, _) = DropProbe::new();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(1_000)).method_unlimited("tools/call"))
        .service(recording(&probe, &seen));
    let r = req().with_extension(DeadlineCap::after(ms(4_000)));
    let (e, at) = expiry(svc, r, &probe).await;
    assert_eq!((e.limit(), at), (Limit::Inherited, ms(4_000)));

    // A tie is the local limit's.
    let (probe, _) = DropProbe::new();
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(ms(1_000)))
        .service(recording(&probe, &seen));
    let r = req().with_extension(DeadlineCap::after(ms(1_000)));
    let (e, _) = expiry(svc, r, &probe).await;
    assert_eq!(e.limit(), Limit::Timeout);
}

/// How a cap reaches the stack under test.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// No cap.
    None,
    /// A `DeadlineCap` in the request's extensions.
    Extension,
    /// A `Cancellation` shared with an outer request that inherited it.
    SharedCancellation,
}

/// Runs `stack` (built over the recording handler) for a request capped
/// at 500 ms `via`, and checks it ends at `at` with `limit`.
async fn check_order<L>(name: &str, layer: L, via: Via, limit: Limit, at: Duration)
where
    L: tower::Layer<tower::util::BoxCloneService<McpRequest, Value, BoxError>>,
    L::Service: Service<McpRequest, Response = Value, Error = BoxError> + Send + 'static,
    <L::Service as Service<McpRequest>>::Future: Send,
{
    let (probe, _) = DropProbe::new();
    let seen = Arc::new(Mutex::new(None));
    let inner = tower::util::BoxCloneService::new(recording(&probe, &seen));
    let stack = layer.layer(inner);
    let cap = DeadlineCap::after(ms(500));
    let r = match via {
        Via::None => req(),
        Via::Extension => req().with_extension(cap),
        Via::SharedCancellation => {
            // An outer request's stack read the cap; its handler passes its
            // `Cancellation` on to the call under test.
            let outer = Cancellation::new();
            let mut outer_stack = ServiceBuilder::new()
                .layer(TimeoutLayer::new(ms(60_000)))
                .service(service_fn(|_r: McpRequest| async {
                    Ok::<_, BoxError>(Value::Null)
                }));
            let outer_req = req().with_cancellation(outer.clone()).with_extension(cap);
            outer_stack
                .ready()
                .await
                .unwrap()
                .call(outer_req)
                .await
                .unwrap();
            req().with_cancellation(outer)
        }
    };
    let (e, ended) = expiry(stack, r, &probe).await;
    assert_eq!((e.limit(), ended), (limit, at), "{name} via {via:?}");
}

#[tokio::test(start_paused = true)]
async fn timers_compose_whatever_the_order_with_or_without_a_cap() {
    use tower::layer::util::{Identity, Stack};
    let t = |n| TimeoutLayer::new(ms(n));
    let pr = || ProgressResetLayer::new(ms(60_000)).without_max();
    let cd = CancelOnDisconnectLayer::new;
    type S<A, B> = Stack<A, B>;
    for via in [Via::None, Via::Extension, Via::SharedCancellation] {
        let capped = |limit: Limit, at: u64| match via {
            Via::None => (limit, ms(at)),
            _ => (Limit::Inherited, ms(500)),
        };
        // Timeout(10 s) → ProgressReset → Timeout(1 s), and its mirror.
        let (l, at) = capped(Limit::Timeout, 1_000);
        check_order(
            "T10 PR T1",
            S::new(t(1_000), S::new(pr(), S::new(t(10_000), Identity::new()))),
            via,
            l,
            at,
        )
        .await;
        check_order(
            "T1 PR T10",
            S::new(t(10_000), S::new(pr(), S::new(t(1_000), Identity::new()))),
            via,
            l,
            at,
        )
        .await;
        // Under CancelOnDisconnect (one state, the one-timer hand-off).
        check_order(
            "CD T10 PR T1",
            S::new(
                t(1_000),
                S::new(pr(), S::new(t(10_000), S::new(cd(), Identity::new()))),
            ),
            via,
            l,
            at,
        )
        .await;
        check_order(
            "CD T1 PR T10",
            S::new(
                t(10_000),
                S::new(pr(), S::new(t(1_000), S::new(cd(), Identity::new()))),
            ),
            via,
            l,
            at,
        )
        .await;
        // One timeout, on either side of the progress layer.
        check_order(
            "CD PR T1",
            S::new(t(1_000), S::new(pr(), S::new(cd(), Identity::new()))),
            via,
            l,
            at,
        )
        .await;
        check_order(
            "CD T1 PR",
            S::new(pr(), S::new(t(1_000), S::new(cd(), Identity::new()))),
            via,
            l,
            at,
        )
        .await;
        // The progress layer's own maximum, earlier than the cap, wins.
        check_order(
            "CD T10 PR(max 300)",
            S::new(
                ProgressResetLayer::new(ms(60_000)).max(ms(300)),
                S::new(t(10_000), S::new(cd(), Identity::new())),
            ),
            via,
            Limit::Max,
            ms(300),
        )
        .await;
        // A progress layer alone enforces a cap too.
        if !matches!(via, Via::None) {
            check_order(
                "CD PR",
                S::new(pr(), S::new(cd(), Identity::new())),
                via,
                Limit::Inherited,
                ms(500),
            )
            .await;
            check_order(
                "PR",
                S::new(pr(), Identity::new()),
                via,
                Limit::Inherited,
                ms(500),
            )
            .await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_outcome_names_an_inherited_deadline() {
    use tower_mcp_cancel::observe::Outcome;
    let (probe, _) = DropProbe::new();
    let seen = Arc::new(Mutex::new(None));
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(ms(10_000)))
        .layer(ProgressResetLayer::new(ms(60_000)).without_max())
        .service(recording(&probe, &seen));
    let c = Cancellation::new();
    let r = req()
        .with_cancellation(c.clone())
        .with_extension(DeadlineCap::after(ms(2_000)));
    let err = svc.ready().await.unwrap().call(r).await.unwrap_err();
    let outcome = Outcome::of_error(err.as_ref());
    assert_eq!(outcome, Outcome::TimedOut(Limit::Inherited));
    assert_eq!(outcome.kind(), "timeout_inherited");
    // The handler's token fired with that reason.
    let reason = c.reason().cloned().expect("cancelled");
    assert!(reason.to_string().contains("inherited"), "{reason}");
}
