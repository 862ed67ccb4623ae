//! Figure 6: memory and cost per in-flight request, bare handler against
//! the full stack.

use std::fmt::Write as _;

use crate::mem;
use crate::report::{verdict, Tables};

pub(crate) fn figure6(smoke: bool, t: &mut Tables) {
    use mem::Stack;
    let big = 100_000;
    let small = 1_000;
    let (reps_big, reps_small) = if smoke { (1, 5) } else { (5, 101) };
    eprintln!("figure 6: {big} and {small} in flight, bare vs full stack");
    let bare_big = mem::median(Stack::Bare, big, reps_big);
    let full_big = mem::median(Stack::Full, big, reps_big);
    let bare_small = mem::median(Stack::Bare, small, reps_small);
    let full_small = mem::median(Stack::Full, small, reps_small);
    let per = |r: &mem::Run, n: usize| r.bytes as f64 / n as f64;
    let stack_bytes = per(&full_big, big) - per(&bare_big, big);
    let stack_allocs = (full_big.allocs as f64 - bare_big.allocs as f64) / big as f64;
    // What the stack adds per request (full − bare), at each size.
    let stack_big = full_big.ns_per_request(big) - bare_big.ns_per_request(big);
    let stack_small = full_small.ns_per_request(small) - bare_small.ns_per_request(small);
    let ratio = stack_big / stack_small;
    let bare_ratio = bare_big.ns_per_request(big) / bare_small.ns_per_request(small);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| in flight | service | bytes per in-flight request | allocations per request | issue + cancel per request |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    for (n, name, r) in [
        (big, "bare handler", &bare_big),
        (big, "full stack", &full_big),
        (small, "bare handler", &bare_small),
        (small, "full stack", &full_small),
    ] {
        let _ = writeln!(
            out,
            "| {n} | {name} | {:.0} B | {:.1} | {:.0} ns ({:.0} + {:.0}) |",
            per(r, n),
            r.allocs as f64 / n as f64,
            r.ns_per_request(n),
            r.issue.as_nanos() as f64 / n as f64,
            r.cancel.as_nanos() as f64 / n as f64,
        );
    }
    let _ = writeln!(
        out,
        "\nAttributable to the stack at {big} in flight: **{stack_bytes:.0} B** and {stack_allocs:.1} allocations per request — target ≤ 512 B: {}.",
        verdict(stack_bytes <= 512.0)
    );
    let _ = writeln!(
        out,
        "The stack's cost per request (full − bare: {stack_big:.0} ns at {big}, {stack_small:.0} ns at {small}) grows **{ratio:.2}×** from {small} to {big} in flight; the bare handler's own cost grows {bare_ratio:.2}× — target: within 1.1× of the bare handler's growth: {}.",
        verdict(ratio <= 1.1 * bare_ratio)
    );
    t.insert("fig6", out);
}
