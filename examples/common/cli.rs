//! What the example binaries' command lines share (clap's derive does the
//! rest): the refusal with a usage line, and the duration syntax. Included
//! by `common` (the example servers) and by `mcp_call` (`#[path]`); each
//! uses what it needs. Not by the single-file examples a reader copies
//! (`stdio_service_fn`, `axum_router`, `client_progress`: tests/examples.rs
//! keeps them single files), which state their own few flags.
#![allow(dead_code)]

use std::time::Duration;

use clap::error::{ContextKind, ContextValue};

/// The command line as `T` reads it; `--help` prints the flags and exits
/// 0. clap refuses an unknown flag or a malformed value with exit status 2;
/// this adds the usage line to the refusals it prints without one (a value
/// that does not parse).
pub(crate) fn parse<T: clap::Parser>() -> T {
    T::try_parse().unwrap_or_else(|mut e| {
        if e.use_stderr() && e.get(ContextKind::Usage).is_none() {
            let usage = T::command().render_usage();
            e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
        }
        e.exit()
    })
}

/// Parses `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let (num, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| "expected a duration such as 500ms, 30s, 5m".to_owned())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit {unit:?}: use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("not a duration: {e}"))
}
