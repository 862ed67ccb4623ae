//! What `CheckedInput` adds to an rmcp stdio server's input, per line:
//! the same bytes read through it and read raw (the floor), beside the
//! decoding rmcp does on every line anyway (the baseline the cost is
//! measured against).
//!
//! `cargo bench -p tower-mcp-cancel-rmcp --bench checked_input`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rmcp::service::RxJsonRpcMessage;
use rmcp::RoleServer;
use tokio::io::AsyncReadExt;
use tower_mcp_cancel_rmcp::CheckedInput;

/// 1 000 lines as a client sends them: calls (one in ten with a 4 KiB
/// argument) and pings; with `notifications`, a cancel after every call
/// and a progress notification (half the lines: the worst case, where
/// the check decodes each notification rmcp decodes again).
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (name, notifications) in [("requests", false), ("half notifications", true)] {
        let (bytes, lines) = input(notifications);
        let mut group = c.benchmark_group(format!("rmcp stdio input, 1000 lines, {name}"));
        group.throughput(Throughput::Elements(lines));
        group.bench_function("read raw (floor)", |b| {
            b.iter_batched(
                || Vec::with_capacity(bytes.len()),
                |mut out| rt.block_on(async { (&bytes[..]).read_to_end(&mut out).await.unwrap() }),
                BatchSize::SmallInput,
            )
        });
        group.bench_function("read through CheckedInput", |b| {
            b.iter_batched(
                || Vec::with_capacity(bytes.len()),
                |mut out| {
                    rt.block_on(async {
                        CheckedInput::new(&bytes[..])
                            .read_to_end(&mut out)
                            .await
                            .unwrap()
                    })
                },
                BatchSize::SmallInput,
            )
        });
        group.bench_function("rmcp's own decoding of each line (baseline)", |b| {
            b.iter(|| {
                bytes
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(l).is_ok() as usize
                    })
                    .sum::<usize>()
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
