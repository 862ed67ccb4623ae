//! `mcp-cancel-check`: does an MCP server honour cancellation? Runs a
//! server (stdio) or talks to one (`--url`, Streamable HTTP), cancels its
//! calls the ways the spec allows, and checks each rule the server owes a
//! cancel, citing it, with its level and how strong the evidence is.
//!
//! ```text
//! mcp-cancel-check [options] --slow "<tool> [key=value…]" -- <server command…>
//! mcp-cancel-check [options] --slow "<tool> [key=value…]" --url http://host/mcp
//! ```
//!
//! Exit status: 1 when a MUST check failed (with `--strict`, a SHOULD too),
//! 2 for a usage error, 0 otherwise. See checker/README.md.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

mod evidence;
mod http;
mod mcp;
mod number;
mod procfs;
mod rawhttp;
mod report;
mod session;
mod stdio;
mod tasks;
mod tool;
mod watch2025;
mod wire;

use tool::ToolSpec;

/// Checks that an MCP server honours cancellation, rule by rule.
#[derive(Debug, Parser)]
#[command(
    name = "mcp-cancel-check",
    version,
    after_help = "Examples:\n  mcp-cancel-check --slow \"slow seconds=2\" -- my-server --stdio\n  mcp-cancel-check --slow \"slow seconds=2\" --url http://127.0.0.1:8080/mcp --json"
)]
struct Cli {
    /// A slow operation to call and cancel: "TOOL [KEY=VALUE…]" (a value
    /// that parses as JSON is JSON, else a string). Without it, the checks
    /// that need a tool are skipped.
    #[arg(long, value_name = "TOOL ARGS", value_parser = ToolSpec::parse)]
    slow: Option<ToolSpec>,
    /// An operation that reports progress (default: the slow one, asked for progress).
    #[arg(long, value_name = "TOOL ARGS", value_parser = ToolSpec::parse)]
    progress: Option<ToolSpec>,
    /// A CPU-bound operation, whose CPU time shows whether its work stops
    /// at the cancel (stdio on Linux; default: the slow one).
    #[arg(long, value_name = "TOOL ARGS", value_parser = ToolSpec::parse)]
    cpu: Option<ToolSpec>,
    /// A long operation the server runs as a task (the
    /// io.modelcontextprotocol/tasks extension), to cancel with
    /// tasks/cancel and to leave to its TTL. Without it, the task checks
    /// that need a task are skipped.
    #[arg(long, value_name = "TOOL ARGS", value_parser = ToolSpec::parse)]
    task: Option<ToolSpec>,
    /// The protocol era to speak: auto (server/discover, else the 2025
    /// initialize handshake), 2026 or 2025.
    #[arg(long, value_name = "ERA", default_value = "auto", value_parser = parse_era)]
    era: EraChoice,
    /// Streamable HTTP endpoint to check, instead of a stdio server command.
    #[arg(long, value_name = "URL", conflicts_with = "server", value_parser = parse_url)]
    url: Option<::http::Uri>,
    /// With --url: the server's process id (a server on this machine,
    /// Linux), whose CPU time and memory show whether cancelled work stops.
    #[arg(long, value_name = "PID", requires = "url")]
    pid: Option<u32>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 when a SHOULD fails too, not only a MUST.
    #[arg(long)]
    strict: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// The longest any one step may take (500ms, 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    check_timeout: Duration,
    /// How long to watch for messages after a cancel when the operation's
    /// own length is unknown (it did not end within --check-timeout).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    window: Duration,
    /// How soon after a cancel a result still counts as having crossed it.
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = parse_duration)]
    race: Duration,
    /// How many call+cancel pairs the burst sends.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    burst: u16,
    /// The stdio server command and its arguments, after `--`.
    #[arg(last = true, value_name = "SERVER COMMAND")]
    server: Vec<String>,
}

/// `--url`: an absolute `http://` URL (`https://` is not built in).
fn parse_url(s: &str) -> Result<::http::Uri, String> {
    let uri: ::http::Uri = s.parse().map_err(|e| format!("{e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) => Ok(uri),
        (Some("https"), _) => Err("https is not supported by this build: use http://".into()),
        _ => Err("expected http://host[:port]/path".into()),
    }
}

/// `--era`: `None` is auto.
#[derive(Clone, Copy, Debug)]
struct EraChoice(Option<mcp::Era>);

fn parse_era(s: &str) -> Result<EraChoice, String> {
    match s {
        "auto" => Ok(EraChoice(None)),
        "2026" | "2026-07-28" => Ok(EraChoice(Some(mcp::Era::Modern))),
        "2025" | "2025-11-25" => Ok(EraChoice(Some(mcp::Era::Legacy))),
        other => Err(format!("unknown era {other:?}: auto, 2026 or 2025")),
    }
}

/// What the checks are run with.
#[derive(Debug)]
pub(crate) struct Config {
    /// The era to speak, when forced.
    pub(crate) era: Option<mcp::Era>,
    /// The slow operation.
    pub(crate) slow: Option<ToolSpec>,
    /// The progress operation, if other than the slow one.
    pub(crate) progress: Option<ToolSpec>,
    /// The CPU-bound operation, if other than the slow one.
    pub(crate) cpu: Option<ToolSpec>,
    /// The operation the server runs as a task.
    pub(crate) task: Option<ToolSpec>,
    /// The bound of each step.
    pub(crate) check_timeout: Duration,
    /// The watch after a cancel when the operation's length is unknown.
    pub(crate) window: Duration,
    /// The race window.
    pub(crate) race: Duration,
    /// The burst's size.
    pub(crate) burst: usize,
    /// No progress lines.
    pub(crate) quiet: bool,
}

impl Config {
    /// A progress line on stderr (one write, so it does not interleave
    /// with a stdio server's own stderr lines).
    pub(crate) fn say(&self, what: &str) {
        if !self.quiet {
            let _ = std::io::stderr().write_all(format!("mcp-cancel-check: {what}…\n").as_bytes());
        }
    }
}

/// Parses `500ms`, `30s`, `5m`, `1h`, or seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?}")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("bad duration {s:?}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.url.is_none() && cli.server.is_empty() {
        eprintln!("mcp-cancel-check: give a server command after `--`, or --url");
        return ExitCode::from(2);
    }
    let cfg = Config {
        era: cli.era.0,
        slow: cli.slow,
        progress: cli.progress,
        cpu: cli.cpu,
        task: cli.task,
        check_timeout: cli.check_timeout,
        window: cli.window,
        race: cli.race,
        burst: usize::from(cli.burst),
        quiet: cli.quiet,
    };
    let report = match &cli.url {
        Some(url) => http::run(&cfg, url.clone(), cli.pid).await,
        None => stdio::run(&cfg, &cli.server).await,
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-cancel-check: {e}");
            let usage = matches!(e, report::RunError::Usage(_));
            return ExitCode::from(if usage { 2 } else { 1 });
        }
    };
    let mut stdout = std::io::stdout();
    let text = if cli.json {
        format!("{:#}\n", report.to_json())
    } else {
        let colour = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        report.table(colour)
    };
    let _ = stdout.write_all(text.as_bytes());
    ExitCode::from(report.exit_code(cli.strict))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn command_line() {
        let cli = Cli::try_parse_from([
            "mcp-cancel-check",
            "--slow",
            "slow seconds=1",
            "--strict",
            "--",
            "srv",
            "--flag",
        ])
        .unwrap();
        assert_eq!(cli.server, ["srv", "--flag"]);
        assert_eq!(cli.slow.unwrap().name, "slow");
        assert!(cli.strict);
        let cli = Cli::try_parse_from([
            "mcp-cancel-check",
            "--task",
            "slow_compute seconds=30",
            "--url",
            "http://127.0.0.1:8080/mcp",
        ])
        .unwrap();
        assert_eq!(cli.task.unwrap().name, "slow_compute");
        let bad = Cli::try_parse_from(["mcp-cancel-check", "--slow", "a=1", "--", "srv"]);
        assert_eq!(bad.unwrap_err().exit_code(), 2);
        let both = Cli::try_parse_from(["mcp-cancel-check", "--url", "http://x/mcp", "--", "srv"]);
        assert!(both.is_err());
        for bad in ["not a url", "/mcp", "https://x/mcp", "ftp://x/mcp"] {
            let e = Cli::try_parse_from(["mcp-cancel-check", "--url", bad]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
        let ok = Cli::try_parse_from(["mcp-cancel-check", "--url", "http://127.0.0.1:8080/mcp"]);
        assert!(ok.is_ok());
    }
}
