//! Figure 6: N requests in flight at once through the full stack, in
//! process, no transport. Bytes come from the counting global allocator
//! (live bytes after − before), time from issuing (call + first poll) and
//! cancelling (drop) all of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::Value;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
use tower::BoxError;
use tower_mcp_cancel::{
    CancelOnDisconnectLayer, McpRequest, ProgressResetLayer, TimeoutLayer,
};

/// The system allocator, counting live bytes and allocations.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        std::alloc::System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        std::alloc::System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        std::alloc::System.realloc(ptr, layout, new)
    }
}

type Svc = BoxCloneSyncService<McpRequest, Value, BoxError>;
type Fut = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

/// A handler that keeps its request and never finishes: a request in flight.
fn pending_handler() -> Svc {
    BoxCloneSyncService::new(service_fn(|req: McpRequest| async move {
        let _held = req;
        std::future::pending::<()>().await;
        Ok::<_, BoxError>(Value::Null)
    }))
}

/// Which service the requests go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    Bare,
    Full,
}

fn build(stack: Stack) -> Svc {
    match stack {
        Stack::Bare => pending_handler(),
        Stack::Full => BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(CancelOnDisconnectLayer::new())
                .layer(
                    TimeoutLayer::new(Duration::from_secs(60))
                        .method("tools/call", Duration::from_secs(600)),
                )
                .layer(ProgressResetLayer::new(Duration::from_secs(30)))
                .service(pending_handler()),
        ),
    }
}

/// One run: `n` requests issued and left pending, then all dropped.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub bytes: i64,
    pub allocs: u64,
    pub issue: Duration,
    pub cancel: Duration,
}

impl Run {
    pub fn ns_per_request(&self, n: usize) -> f64 {
        (self.issue + self.cancel).as_nanos() as f64 / n as f64
    }
}

/// Runs `n` in flight through `stack` on a current-thread runtime.
pub fn run(stack: Stack, n: usize) -> Run {
    // Keep freed memory in the process between the passes (glibc would
    // otherwise trim the heap top back to the kernel on free).
    // SAFETY: mallopt only sets a tuning parameter of glibc's allocator.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut svc = build(stack);
        let mut futs: Vec<Fut> = Vec::with_capacity(n);
        let waker = futures_util::task::noop_waker_ref();
        let mut cx = Context::from_waker(waker);
        // Warm the service (lazy statics, the timer wheel's first level).
        {
            let svc = svc.ready().await.unwrap();
            let mut f: Fut = Box::pin(svc.call(McpRequest::new(-1, "tools/call")));
            let _ = f.as_mut().poll(&mut cx);
        }
        // Two passes; the second is measured: the first makes the allocator
        // take the pages from the kernel (first-touch faults are the OS's
        // cost, not the stack's), the second reuses them.
        let mut measured = None;
        for _pass in 0..2 {
            let before = LIVE.load(Ordering::Relaxed);
            let allocs_before = ALLOCS.load(Ordering::Relaxed);
            let start = Instant::now();
            for i in 0..n {
                let req = McpRequest::new(i as i64, "tools/call");
                let svc = svc.ready().await.unwrap();
                let mut f: Fut = Box::pin(svc.call(req));
                if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
                    panic!("request {i} finished early: {:?}", r.err());
                }
                futs.push(f);
            }
            let issue = start.elapsed();
            let bytes = (LIVE.load(Ordering::Relaxed) - before) as i64;
            let allocs = ALLOCS.load(Ordering::Relaxed) - allocs_before;
            let start = Instant::now();
            futs.clear();
            let cancel = start.elapsed();
            measured = Some((bytes, allocs, issue, cancel));
        }
        let (bytes, allocs, issue, cancel) = measured.unwrap();
        Run {
            bytes,
            allocs,
            issue,
            cancel,
        }
    })
}

/// The median run of `reps` by time per request.
pub fn median(stack: Stack, n: usize, reps: usize) -> Run {
    let mut runs: Vec<Run> = (0..reps).map(|_| run(stack, n)).collect();
    runs.sort_by(|a, b| a.ns_per_request(n).total_cmp(&b.ns_per_request(n)));
    runs[runs.len() / 2]
}
