//! What one request in flight costs the full stack in allocations, counted
//! by a global allocator (its own test binary, one test, so nothing else
//! allocates while it counts).

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Context;
use std::time::Duration;

use tower::BoxError;
use tower::{service_fn, Service, ServiceBuilder};
use tower_mcp_cancel::{CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Calls the stack and polls the response once (the handler waits); returns
/// the allocations that took.
fn one_pending_request<S>(svc: &mut S, id: i64) -> usize
where
    S: Service<McpRequest>,
{
    let req = McpRequest::new(id, "tools/call");
    let waker = futures_util::task::noop_waker_ref();
    let mut cx = Context::from_waker(waker);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut fut = std::pin::pin!(svc.call(req));
    assert!(fut.as_mut().poll(&mut cx).is_pending(), "the handler waits");
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    after - before
}

/// A pending request through `CancelOnDisconnectLayer` + `TimeoutLayer` +
/// `ProgressResetLayer` makes two allocations: the request's shared state
/// (behind its `Cancellation`, holding the progress tap too) and one timer
/// (the progress layer's, which also enforces the timeout above it).
#[test]
fn a_pending_request_costs_the_full_stack_two_allocations() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _entered = rt.enter();
    let mut svc = ServiceBuilder::new()
        .layer(CancelOnDisconnectLayer::new())
        .layer(TimeoutLayer::new(Duration::from_secs(30)))
        .layer(ProgressResetLayer::new(Duration::from_secs(10)))
        .service(service_fn(|_req: McpRequest| async {
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(serde_json::Value::Null)
        }));
    // The first request also sets up the runtime's timer.
    one_pending_request(&mut svc, 0);
    let counts: Vec<usize> = (1..=3)
        .map(|id| one_pending_request(&mut svc, id))
        .collect();
    assert_eq!(counts, [2, 2, 2]);
}
