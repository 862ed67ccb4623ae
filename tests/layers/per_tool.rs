//! Limits per tool: a `tools/call`'s tool entry comes before the
//! `tools/call` method entry, which comes before the default, in both
//! timer layers (a paused clock; drop probes show when the handler went);
//! a per-request value comes before them all; a `name` of any other method
//! is no tool.

use std::future::pending;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};
use tower_mcp_cancel::test_util::DropProbe;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, Elapsed, Limit, McpRequest, ProgressLimits, ProgressResetLayer,
    RequestTimeout, TimeoutLayer,
};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn call(id: i64, tool: &str) -> McpRequest {
    McpRequest::new(id, "tools/call").with_params(json!({"name": tool, "arguments": {}}))
}

/// A handler that never ends; `probe` sees its drop.
fn hang(
    probe: &DropProbe,
) -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send> + Clone {
    let probe = probe.clone();
    service_fn(move |_req: McpRequest| {
        let guard = probe.guard();
        async move {
            let _g = guard;
            pending::<()>().await;
            Ok::<_, BoxError>(Value::Null)
        }
    })
}

type Inner = BoxCloneService<McpRequest, Value, BoxError>;

/// Runs `req` through `layer` (under `CancelOnDisconnectLayer`) over a
/// handler that never ends: the limit that ended it and when, checked
/// against when the handler was dropped.
async fn ended_by<L>(layer: &L, req: McpRequest) -> (Limit, Duration)
where
    L: Layer<Inner>,
    L::Service: Service<McpRequest, Response = Value, Error = BoxError>,
{
    let probe = DropProbe::default();
    let inner = BoxCloneService::new(CancelOnDisconnectLayer::new().layer(hang(&probe)));
    let svc = layer.layer(inner);
    let start = Instant::now();
    let err = svc.oneshot(req).await.unwrap_err();
    let e = *err
        .downcast_ref::<Elapsed>()
        .unwrap_or_else(|| panic!("not Elapsed: {err}"));
    let at = start.elapsed();
    assert_eq!(
        probe.dropped_at().map(|d| d - start),
        Some(at),
        "the handler is dropped at the expiry"
    );
    assert!(probe.was_cancelled());
    assert_eq!(e.after(), at);
    (e.limit(), at)
}

#[tokio::test(start_paused = true)]
async fn a_tools_deadline_comes_before_its_methods() {
    let layer = TimeoutLayer::new(secs(60))
        .method("tools/call", secs(10))
        .tool("slow", secs(2));
    assert_eq!(
        ended_by(&layer, call(1, "slow")).await,
        (Limit::Timeout, secs(2))
    );
    // Another tool: the method's deadline, not dropped at 2 s.
    assert_eq!(
        ended_by(&layer, call(2, "echo")).await,
        (Limit::Timeout, secs(10))
    );
    // Another method: the default.
    assert_eq!(
        ended_by(&layer, McpRequest::new(3, "prompts/get")).await,
        (Limit::Timeout, secs(60))
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_entry_without_a_method_entry_comes_before_the_default() {
    let layer = TimeoutLayer::new(secs(60)).tool("slow", secs(2));
    assert_eq!(
        ended_by(&layer, call(1, "slow")).await,
        (Limit::Timeout, secs(2))
    );
    assert_eq!(
        ended_by(&layer, call(2, "echo")).await,
        (Limit::Timeout, secs(60))
    );
}

#[tokio::test(start_paused = true)]
async fn a_requests_own_timeout_comes_before_its_tools() {
    let layer = TimeoutLayer::new(secs(60)).tool("slow", secs(2));
    let req = call(1, "slow").with_extension(RequestTimeout::after(secs(5)));
    assert_eq!(ended_by(&layer, req).await, (Limit::Timeout, secs(5)));
}

#[tokio::test(start_paused = true)]
async fn a_name_of_another_method_is_no_tool() {
    let layer = TimeoutLayer::new(secs(60)).tool("slow", secs(2));
    // `prompts/get` has a `name` too: the prompt's.
    let req = McpRequest::new(1, "prompts/get").with_params(json!({"name": "slow"}));
    assert_eq!(ended_by(&layer, req).await, (Limit::Timeout, secs(60)));
}

#[tokio::test(start_paused = true)]
async fn a_tools_idle_limit_comes_before_its_methods() {
    let quick = ProgressLimits {
        idle: secs(2),
        max: Some(secs(100)),
    };
    let layer = ProgressResetLayer::new(secs(30))
        .method(
            "tools/call",
            ProgressLimits {
                idle: secs(10),
                max: Some(secs(100)),
            },
        )
        .tool("slow", quick);
    assert_eq!(
        ended_by(&layer, call(1, "slow")).await,
        (Limit::Idle, secs(2))
    );
    assert_eq!(
        ended_by(&layer, call(2, "echo")).await,
        (Limit::Idle, secs(10))
    );
    assert_eq!(
        ended_by(&layer, McpRequest::new(3, "tools/list")).await,
        (Limit::Idle, secs(30))
    );
}

#[tokio::test(start_paused = true)]
async fn a_tools_hard_maximum_comes_before_its_methods() {
    // Idle limits longer than the maxima: the maximum ends each call.
    let layer = ProgressResetLayer::new(secs(300)).max(secs(60)).tool(
        "slow",
        ProgressLimits {
            idle: secs(300),
            max: Some(secs(3)),
        },
    );
    assert_eq!(
        ended_by(&layer, call(1, "slow")).await,
        (Limit::Max, secs(3))
    );
    assert_eq!(
        ended_by(&layer, call(2, "echo")).await,
        (Limit::Max, secs(60))
    );
}

/// Over `http::Request` (a layer around a Streamable HTTP endpoint, before
/// the body is read): the tool is the `Mcp-Name` header's claim, which, as
/// a claimed method, can shorten the deadline and never lengthen it.
#[tokio::test(start_paused = true)]
async fn over_http_a_claimed_tool_can_only_shorten_its_deadline() {
    async fn ended_after(layer: &TimeoutLayer, tool: &str) -> Duration {
        let probe = DropProbe::default();
        let guards = probe.clone();
        let svc = layer.layer(service_fn(move |_req: http::Request<()>| {
            let guard = guards.guard();
            async move {
                let _g = guard;
                pending::<()>().await;
                Ok::<_, BoxError>(http::Response::new(()))
            }
        }));
        let req = http::Request::builder()
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", tool)
            .body(())
            .unwrap();
        let start = Instant::now();
        let err = svc.oneshot(req).await.unwrap_err();
        assert!(err.downcast_ref::<Elapsed>().is_some(), "{err}");
        assert!(probe.was_cancelled());
        start.elapsed()
    }
    let layer = TimeoutLayer::new(secs(60))
        .tool("slow", secs(2))
        .tool("export", secs(600));
    assert_eq!(ended_after(&layer, "slow").await, secs(2));
    // A claim never earns more time than the default.
    assert_eq!(ended_after(&layer, "export").await, secs(60));
    assert_eq!(ended_after(&layer, "echo").await, secs(60));
}
