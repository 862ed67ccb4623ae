//! The three layers, under a paused clock, with drop probes: the helpers
//! their tests share, and the tests by rule.

mod builder;
mod cancel;
mod duration_max;
mod http_form;
mod progress;
mod shared_timer;
mod timeout;

use std::future::{pending, Future};
use std::time::Duration;

use tower::{service_fn, BoxError, Service, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{Elapsed, McpRequest};

pub(crate) type Value = serde_json::Value;

pub(crate) fn ok() -> Result<Value, BoxError> {
    Ok(serde_json::json!({"resultType": "complete"}))
}

/// A handler that never finishes and never looks at its token; its probe
/// records the drop.
pub(crate) async fn never(
    probe_guard: tower_mcp_cancel::test_util::DropGuard,
) -> Result<Value, BoxError> {
    let _g = probe_guard;
    pending::<()>().await;
    ok()
}

pub(crate) fn elapsed(e: &BoxError) -> Elapsed {
    *e.downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("not Elapsed: {e}"))
}

/// Polls once; `Some` if ready.
pub(crate) async fn futures_poll<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    futures_util::future::poll_immediate(f).await
}

pub(crate) fn progress_service(
    schedule: Vec<(u64, f64)>,
    probe: Option<DropProbe>,
) -> impl Service<
    McpRequest,
    Response = Value,
    Error = BoxError,
    Future = impl Future<Output = Result<Value, BoxError>> + Send,
> + Clone {
    service_fn(move |r: McpRequest| {
        let tap = r.progress_tap().cloned().expect("tap set by the layer");
        let schedule = schedule.clone();
        let guard = probe.as_ref().map(DropProbe::guard);
        async move {
            let _g = guard;
            for (wait_ms, value) in schedule {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                tap.record(value, None, None);
            }
            ok()
        }
    })
}

/// Calls `svc` once with `req` and returns its error (the call must fail).
pub(crate) async fn call_err<S>(svc: &mut S, req: McpRequest) -> BoxError
where
    S: Service<McpRequest, Response = Value, Error = BoxError>,
{
    svc.ready().await.unwrap().call(req).await.unwrap_err()
}
