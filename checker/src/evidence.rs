//! The evidence that a cancelled request's work stopped, not only its
//! messages: the server's CPU time and memory (from [`crate::procfs`]),
//! judged the same way over stdio and HTTP.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::procfs::{self, Usage};
use crate::report::{rules, Check, Evidence};
use crate::tool::ToolSpec;
use crate::Config;

/// The id of the CPU-time check of a cancelled request.
pub(crate) const CPU_CHECK: &str = "cancel.work-stops-cpu";

/// How long a CPU-bound operation runs before it is cancelled.
pub(crate) const CPU_LEAD: Duration = Duration::from_millis(600);

/// Above this share of one core while it runs, an operation is CPU-bound
/// enough for its CPU time to show whether it stopped. (Low, because on a
/// busy machine a spinning server gets only its share of a core.)
const CPU_BOUND: f64 = 0.1;

/// The server's CPU use after a cancel that counts as stopped: under this
/// share of what it used while the operation ran (a server whose work runs
/// on keeps about the same share), or under `CPU_IDLE` of one core.
const CPU_STOPPED: f64 = 0.4;

/// CPU use that counts as idle whatever the operation used.
const CPU_IDLE: f64 = 0.05;

/// Memory the server may keep after a burst of cancelled calls beyond what
/// it held before: a quarter more, at least this many bytes (allocators
/// keep freed pages).
const RSS_SLACK: u64 = 16 << 20;

/// Check `id`: whether the CPU time of `pid`'s tree stops growing once
/// `cancelled` (which starts a call of `tool` and cancels it after
/// [`CPU_LEAD`], or says why it could not) has cancelled it.
pub(crate) async fn cpu_check(
    id: &str,
    cfg: &Config,
    pid: u32,
    tool: &ToolSpec,
    cancelled: impl Future<Output = Result<(), String>>,
) -> Check {
    let rule = rules::WORK_STOPS;
    let start = procfs::usage(pid);
    let t0 = Instant::now();
    if let Err(why) = cancelled.await {
        return Check::skip(id, rule, why);
    }
    let at_cancel = procfs::usage(pid);
    let t1 = Instant::now();
    // The cancel has been read once the race window has passed.
    tokio::time::sleep(cfg.race.max(Duration::from_millis(200))).await;
    let settled = procfs::usage(pid);
    let t2 = Instant::now();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let end = procfs::usage(pid);
    let t3 = Instant::now();
    let (Some(start), Some(at_cancel), Some(settled), Some(end)) = (start, at_cancel, settled, end)
    else {
        return Check::skip(id, rule, "the server process went away");
    };
    let rate = |a: Usage, b: Usage, d: Duration| {
        b.cpu.saturating_sub(a.cpu).as_secs_f64() / d.as_secs_f64().max(1e-3)
    };
    let running = rate(start, at_cancel, t1 - t0);
    let after = rate(settled, end, t3 - t2);
    if running < CPU_BOUND {
        return Check::skip(
            id,
            rule,
            format!(
                "{tool} is not CPU-bound ({:.0}% of a core while it ran){}",
                running * 100.0,
                if id == CPU_CHECK {
                    ": name one with --cpu"
                } else {
                    ""
                }
            ),
        );
    }
    let detail = format!(
        "{:.0}% of a core while it ran, {:.0}% in the {:.1?} after the cancel",
        running * 100.0,
        after * 100.0,
        t3 - t2
    );
    if after <= (running * CPU_STOPPED).max(CPU_IDLE) {
        Check::pass(id, rule, Evidence::Strong, detail)
    } else {
        Check::fail(id, rule, format!("{detail}: the work runs on"))
    }
}

/// Why `cancel.burst-resources` does not run for a server that stopped
/// answering in the burst: a server that is gone never passes a check.
pub(crate) const GONE_AFTER_BURST: &str =
    "the server stopped answering in the burst (cancel.burst-healthy): no memory of a live server to compare";

/// Whether the server's memory is back after a burst of cancelled calls
/// (`why_none`: why there is no measure).
pub(crate) fn rss_check(before: Option<Usage>, after: Option<Usage>, why_none: &str) -> Check {
    let (id, rule) = ("cancel.burst-resources", rules::RESOURCES_FREED);
    let (Some(b), Some(a)) = (before, after) else {
        return Check::skip(id, rule, why_none);
    };
    let allowed = b.rss + (b.rss / 4).max(RSS_SLACK);
    let mib = |x: u64| x as f64 / f64::from(1 << 20);
    let detail = format!(
        "resident memory {:.1} MiB before, {:.1} MiB after",
        mib(b.rss),
        mib(a.rss)
    );
    if a.rss <= allowed {
        Check::pass(id, rule, Evidence::Weak, detail)
    } else {
        Check::fail(
            id,
            rule,
            format!("{detail}: kept more than {:.1} MiB", mib(allowed)),
        )
    }
}
