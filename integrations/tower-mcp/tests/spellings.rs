//! `CheckedInput` and tower-mcp's own reading agree on every line, however
//! it is spelled: a line is left out exactly when tower-mcp reads it (its
//! mark and white space trimmed) as an object without an `id` member that
//! its inspection rejects, under the revision the message declares or,
//! declaring none, under every revision tower-mcp knows.

use proptest::prelude::*;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tower_mcp::inspection::{McpDirection, McpInspector, MCP_INSPECTION_PROFILES};
use tower_mcp_cancel_tower_mcp::CheckedInput;

#[path = "../../../tests/support/json_spelling.rs"]
mod json_spelling;

/// What tower-mcp's stdio transport makes of `line`: whether it reads it as
/// a notification its inspection (of a client's message) rejects.
fn tower_mcp_rejects(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    // tower-mcp's framing: the line, then its `clean_input_line`.
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_prefix('\u{feff}').unwrap_or(text).trim();
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    if !value.is_object() || value.get("id").is_some() {
        return false;
    }
    let accepts = |revision: &str| {
        McpInspector::new(revision).is_ok_and(|i| {
            i.inspect(&value, Some(McpDirection::ClientToServer))
                .is_ok()
        })
    };
    match value["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str() {
        Some(declared) => !accepts(declared),
        None => !MCP_INSPECTION_PROFILES.iter().any(|r| accepts(r)),
    }
}

/// Whether `CheckedInput` leaves `line` out, and whether it should.
fn verdicts(line: &[u8]) -> (bool, bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut passed = Vec::new();
    rt.block_on(CheckedInput::new(line).read_to_end(&mut passed))
        .unwrap();
    assert!(passed.is_empty() || passed == line);
    (passed.is_empty(), tower_mcp_rejects(line))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn checked_input_leaves_out_exactly_the_notifications_tower_mcp_rejects(
        spelled in json_spelling::spelled()
    ) {
        let (left_out, rejected) = verdicts(&spelled.line);
        prop_assert_eq!(
            left_out,
            rejected,
            "line {:?}, {}",
            String::from_utf8_lossy(&spelled.line),
            spelled.message
        );
    }
}

/// The generator reaches both verdicts, and white space tower-mcp trims.
#[test]
fn the_spellings_cover_both_verdicts() {
    let (mut rejected, mut vertical_tab) = (0, 0);
    for line in json_spelling::samples(500) {
        rejected += usize::from(verdicts(&line).1);
        vertical_tab += usize::from(line.contains(&0x0B));
    }
    assert!(
        (50..450).contains(&rejected),
        "{rejected} of 500 to leave out"
    );
    assert!(
        vertical_tab > 10,
        "{vertical_tab} of 500 with a vertical tab"
    );
}
