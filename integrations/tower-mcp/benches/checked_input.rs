//! What `CheckedInput` adds to a tower-mcp stdio server's input, per line:
//! the same bytes read through it and read raw (the floor), beside the
//! parsing and inspection tower-mcp's layered stdio transport does to
//! every line before it dispatches it (the baseline the cost is measured
//! against). The input and the measures: `benches/common/`.
//!
//! `cargo bench -p tower-mcp-cancel-tower-mcp --bench checked_input`

use criterion::{criterion_group, criterion_main, Criterion};
use tower_mcp::inspection::{McpDirection, McpInspector, McpProtocolRevision};
use tower_mcp_cancel_tower_mcp::CheckedInput;

#[path = "../../../benches/common/checked_input.rs"]
mod checked_input;

fn bench(c: &mut Criterion) {
    let inspector = McpInspector::for_revision(McpProtocolRevision::V2025_11_25);
    let inspect = move |line: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|value| {
            inspector
                .inspect(&value, Some(McpDirection::ClientToServer))
                .is_ok()
        })
    };
    checked_input::compare(
        c,
        "tower-mcp",
        CheckedInput::new,
        "tower-mcp's own parse and inspection (baseline)",
        inspect,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
