//! `CancelOnDisconnectLayer`: a cancel or a dropped response future drops
//! the handler and fires its token, and the in-flight registry keys by id.

use std::future::{pending, Future};
use std::sync::{Arc, Mutex};

use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::cancel::InFlight;
use tower_mcp_cancel::jsonrpc::RequestId;
use tower_mcp_cancel::test_util::{settle, DropProbe};
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, CancelReason, Cancellation, Cancelled, McpRequest,
};

use super::{call_err, futures_poll, never, ok, Value};

fn cancel_stack(
    probe: DropProbe,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> {
    ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |_r: McpRequest| never(probe.guard())))
}

#[tokio::test(start_paused = true)]
async fn cancel_during_drops_the_handler_and_fires_the_token() {
    let probe = DropProbe::default();
    let mut svc = cancel_stack(probe.clone());
    let c = Cancellation::new();
    let token = c.token();
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "tools/call").with_extension(c.clone()));
    let task = tokio::spawn(fut);
    settle().await;
    assert!(!probe.is_dropped());
    assert!(c.cancel(CancelReason::peer(Some("stop\nnow"))));
    let err = task.await.unwrap().unwrap_err();
    let cancelled = err.downcast_ref::<Cancelled>().unwrap();
    assert_eq!(
        cancelled.reason(),
        &CancelReason::Peer(Some("stop now".into()))
    );
    assert!(probe.was_cancelled());
    assert!(token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn cancel_before_the_call_never_runs_the_handler() {
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |_req: McpRequest| {
            let r = r.clone();
            async move {
                *r.lock().unwrap() += 1;
                ok()
            }
        }));
    let c = Cancellation::new();
    c.cancel(CancelReason::TransportClosed);
    let err = call_err(&mut svc, McpRequest::new(1, "x").with_extension(c)).await;
    assert!(err.is::<Cancelled>());
    assert_eq!(*runs.lock().unwrap(), 0, "the handler body never ran");
}

#[tokio::test(start_paused = true)]
async fn cancel_after_completion_is_a_noop() {
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(|_r: McpRequest| async { ok() }));
    let c = Cancellation::new();
    let token = c.token();
    let out = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "x").with_extension(c.clone()))
        .await;
    assert!(out.is_ok());
    assert!(!c.cancel(CancelReason::peer(None)));
    assert!(!token.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_response_future_fires_client_disconnected() {
    let probe = DropProbe::default();
    let mut svc = cancel_stack(probe.clone());
    let c = Cancellation::new();
    let fut = svc
        .ready()
        .await
        .unwrap()
        .call(McpRequest::new(1, "x").with_extension(c.clone()));
    let mut fut = Box::pin(fut);
    assert!(futures_poll(&mut fut).await.is_none());
    drop(fut);
    assert!(probe.was_cancelled());
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
}

#[tokio::test(start_paused = true)]
async fn layer_creates_a_cancellation_when_the_transport_gave_none() {
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .service(service_fn(move |r: McpRequest| {
            *s.lock().unwrap() = r.cancellation().cloned();
            async {
                pending::<()>().await;
                ok()
            }
        }));
    let fut = svc.ready().await.unwrap().call(McpRequest::new(1, "x"));
    drop(fut);
    let c = seen
        .lock()
        .unwrap()
        .clone()
        .expect("handler saw a Cancellation");
    assert!(c.token().is_cancelled());
    assert_eq!(c.reason(), Some(&CancelReason::ClientDisconnected));
}

#[tokio::test(start_paused = true)]
async fn registry_races_ids_and_string_vs_integer() {
    let in_flight = InFlight::new();
    let (p_int, p_str, p_zero) = (
        DropProbe::default(),
        DropProbe::default(),
        DropProbe::default(),
    );
    let mut tasks = Vec::new();
    for (id, guard) in [
        (RequestId::from(1), p_int.clone()),
        (RequestId::from("1"), p_str.clone()),
        (RequestId::from(0), p_zero.clone()),
    ] {
        let reg = in_flight.register(id.clone(), None).unwrap();
        let mut svc = cancel_stack(guard);
        let fut = svc
            .ready()
            .await
            .unwrap()
            .call(McpRequest::new(id, "x").with_cancellation(reg.cancellation().clone()));
        tasks.push(tokio::spawn(async move {
            let out = fut.await;
            drop(reg);
            out
        }));
    }
    settle().await;
    // Unknown id: nothing happens, and it leaves nothing behind.
    assert!(!in_flight.cancel(&RequestId::from(2), CancelReason::peer(None)));
    assert!(!in_flight.contains(&RequestId::from(2)));
    // Cancelling "1" cancels the string id only.
    assert!(in_flight.cancel(&RequestId::from("1"), CancelReason::peer(Some("first"))));
    // A duplicate cancel is ignored: the first reason stays.
    assert!(!in_flight.cancel(&RequestId::from("1"), CancelReason::Shutdown));
    assert_eq!(
        in_flight
            .get(&RequestId::from("1"))
            .and_then(|c| c.reason().cloned()),
        Some(CancelReason::peer(Some("first")))
    );
    settle().await;
    assert!(p_str.was_cancelled());
    assert!(!p_int.is_dropped());
    // Id 0 is an ordinary id.
    assert!(in_flight.cancel(&RequestId::from(0), CancelReason::peer(None)));
    settle().await;
    assert!(p_zero.was_cancelled());
    assert!(!p_int.is_dropped());
    assert_eq!(in_flight.cancel_all(CancelReason::TransportClosed), 1);
    for t in tasks {
        assert!(t.await.unwrap().unwrap_err().is::<Cancelled>());
    }
    assert!(p_int.was_cancelled());
    assert!(in_flight.is_empty());
}
