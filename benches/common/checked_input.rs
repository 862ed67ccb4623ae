//! What the SDK packages' `checked_input` benches share
//! (`integrations/rmcp/benches`, `integrations/tower-mcp/benches`), included
//! by `#[path]`: the input, and the three measures of it — read raw (the
//! floor), read through the package's `CheckedInput`, and handled line by
//! line as the SDK handles every line anyway (the baseline the cost is put
//! against).

use criterion::{BatchSize, Criterion, Throughput};
use tokio::io::{AsyncRead, AsyncReadExt};

/// 1 000 lines as a client sends them: calls (one in ten with a 4 KiB
/// argument) and pings; with `notifications`, a cancel after every call
/// and a progress notification (half the lines: the worst case, where the
/// check reads each notification the SDK then reads again).
fn input(notifications: bool) -> (Vec<u8>, u64) {
    let mut out = String::new();
    let big = "x".repeat(4096);
    let mut lines = 0;
    let calls = if notifications { 250 } else { 500 };
    for i in 0..calls {
        let text = if i % 10 == 0 { big.as_str() } else { "hello" };
        out.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{text}"}},"_meta":{{"progressToken":{i}}}}}}}"#
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":"p{i}","method":"ping"}}"#
        ));
        out.push('\n');
        lines += 2;
        if notifications {
            out.push_str(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{i},"reason":"timeout"}}}}"#
            ));
            out.push('\n');
            out.push_str(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2}}"#);
            out.push('\n');
            lines += 2;
        }
    }
    (out.into_bytes(), lines)
}

/// The benches of `sdk`'s stdio input: `checked` wraps the input in its
/// `CheckedInput`, `baseline` (named `baseline_name`) does to one line what
/// the SDK does to each.
pub(crate) fn compare<R: AsyncRead + Unpin>(
    c: &mut Criterion,
    sdk: &str,
    checked: fn(&'static [u8]) -> R,
    baseline_name: &str,
    baseline: impl Fn(&[u8]) -> bool,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (name, notifications) in [("requests", false), ("half notifications", true)] {
        let (bytes, lines) = input(notifications);
        // `checked` reads it for as long as criterion runs.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let mut group = c.benchmark_group(format!("{sdk} stdio input, 1000 lines, {name}"));
        group.throughput(Throughput::Elements(lines));
        group.bench_function("read raw (floor)", |b| {
            b.iter_batched(
                || Vec::with_capacity(bytes.len()),
                |mut out| rt.block_on(async { { bytes }.read_to_end(&mut out).await.unwrap() }),
                BatchSize::SmallInput,
            )
        });
        group.bench_function("read through CheckedInput", |b| {
            b.iter_batched(
                || Vec::with_capacity(bytes.len()),
                |mut out| {
                    rt.block_on(async { checked(bytes).read_to_end(&mut out).await.unwrap() })
                },
                BatchSize::SmallInput,
            )
        });
        group.bench_function(baseline_name, |b| {
            b.iter(|| {
                bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| baseline(l) as usize)
                    .sum::<usize>()
            })
        });
        group.finish();
    }
}
