//! What `CheckedInput` adds to an rmcp stdio server's input, per line:
//! the same bytes read through it and read raw (the floor), beside the
//! decoding rmcp does on every line anyway (the baseline the cost is
//! measured against). The input and the measures: `benches/common/`.
//!
//! `cargo bench -p tower-mcp-cancel-rmcp --bench checked_input`

use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::service::RxJsonRpcMessage;
use rmcp::RoleServer;
use tower_mcp_cancel_rmcp::CheckedInput;

#[path = "../../../benches/common/checked_input.rs"]
mod checked_input;

fn bench(c: &mut Criterion) {
    let decode = |line: &[u8]| serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line).is_ok();
    checked_input::compare(
        c,
        "rmcp",
        CheckedInput::new,
        "rmcp's own decoding of each line (baseline)",
        decode,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
