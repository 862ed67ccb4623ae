//! `CheckedInput` and rmcp's own reader agree on every line, however it
//! is spelled: a line is left out exactly when it is an object without an
//! `id` member that rmcp's reader answers with an error.

use proptest::prelude::*;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tower_mcp_cancel_rmcp::CheckedInput;

#[path = "../../../tests/support/json_spelling.rs"]
mod json_spelling;

/// What rmcp's own reader writes back for `line`: its answers, if any.
async fn rmcp_answers(line: &[u8]) -> Vec<u8> {
    let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
    let mut transport = AsyncRwTransport::<RoleServer, _, _>::new_server(line, ours);
    while Transport::<RoleServer>::receive(&mut transport)
        .await
        .is_some()
    {}
    Transport::<RoleServer>::close(&mut transport)
        .await
        .unwrap();
    drop(transport);
    let mut out = Vec::new();
    theirs.read_to_end(&mut out).await.unwrap();
    out
}

/// Whether the value `line` starts with (as rmcp's reader sees the line:
/// ending and byte-order mark off) is an object without an `id` member.
fn object_without_id(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let first = serde_json::Deserializer::from_slice(line)
        .into_iter::<Value>()
        .next();
    matches!(first, Some(Ok(Value::Object(m))) if !m.contains_key("id"))
}

/// What `CheckedInput` passes on of `line`.
async fn checked(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    CheckedInput::new(line).read_to_end(&mut out).await.unwrap();
    out
}

/// Whether `CheckedInput` leaves `line` out, and whether it should: the
/// value is an object without `id` and rmcp's reader answers it with an
/// error (without an id); with what rmcp wrote.
fn verdicts(line: &[u8]) -> (bool, bool, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (passed, answers) = rt.block_on(async { (checked(line).await, rmcp_answers(line).await) });
    assert!(
        passed.is_empty() || passed == line,
        "a line passes whole or not at all: {:?}",
        String::from_utf8_lossy(line)
    );
    let answered = !answers.is_empty()
        && serde_json::from_slice::<Value>(&answers[..answers.len() - 1])
            .is_ok_and(|a| a["error"].is_object() && a["id"].is_null());
    (
        passed.is_empty(),
        object_without_id(line) && answered,
        answers,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn checked_input_leaves_out_exactly_the_notifications_rmcp_answers(
        spelled in json_spelling::spelled()
    ) {
        let (left_out, answered, answers) = verdicts(&spelled.line);
        prop_assert_eq!(
            left_out,
            answered,
            "line {:?}, {} (rmcp wrote {:?})",
            String::from_utf8_lossy(&spelled.line),
            spelled.message,
            String::from_utf8_lossy(&answers)
        );
    }
}

/// The generator reaches both verdicts, and the spellings that matter.
#[test]
fn the_spellings_cover_both_verdicts() {
    let (mut answered, mut escaped_slash) = (0, 0);
    for line in json_spelling::samples(500) {
        answered += usize::from(verdicts(&line).1);
        escaped_slash += usize::from(line.windows(2).any(|w| w == b"\\/"));
    }
    assert!(
        (50..450).contains(&answered),
        "{answered} of 500 to leave out"
    );
    assert!(
        escaped_slash > 20,
        "{escaped_slash} of 500 with an escaped solidus"
    );
}
