//! A client under `TimeoutLayer` + `ProgressResetLayer`, with a progress
//! observer: the call may run as long as the server keeps reporting progress
//! (at most 30 s of silence), but never longer than 5 minutes. When either
//! limit fires, the call's future is dropped and the client transport tells
//! the server (`notifications/cancelled` on stdio).
//!
//! ```sh
//! cargo build --features stdio --examples && cargo run --features stdio --example client_progress
//! cargo run --features stdio --example client_progress -- path/to/server --its-flags
//! ```
//!
//! It spawns the server given on its command line (by default the
//! `stdio_service_fn` example, built next to it) and calls its `count` tool.

use std::time::Duration;

use clap::Parser;
use serde_json::json;
use tokio::process::Command;
use tower::BoxError;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{Elapsed, McpRequest, ProgressObserver, ProgressResetLayer, TimeoutLayer};

/// Calls the `count` tool of a stdio MCP server under TimeoutLayer (5 min)
/// and ProgressResetLayer (30 s of silence), printing each progress
/// notification.
#[derive(Parser, Debug)]
#[command(name = "client_progress")]
struct Cli {
    /// The server to spawn, then its own arguments (flags included) [default:
    /// the stdio_service_fn example, built next to this one].
    #[arg(value_name = "SERVER", trailing_var_arg = true)]
    server: Vec<std::ffi::OsString>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // `--help`, or a refusal of an unknown flag before SERVER (exit status 2).
    let Cli { server: command } = Cli::parse();
    // The server: the command given, or the `stdio_service_fn` example
    // built next to this one.
    let mut args = command.into_iter();
    let program = match args.next() {
        Some(program) => program.into(),
        None => std::env::current_exe()?.with_file_name("stdio_service_fn"),
    };
    let mut server = Command::new(program);
    server.args(args);
    let transport = StdioClient::spawn(server)?;

    let mut client = ServiceBuilder::new()
        // A hard cap that progress never extends.
        .layer(TimeoutLayer::new(Duration::from_secs(300)))
        // An idle limit that each (increasing) progress value restarts.
        .layer(ProgressResetLayer::new(Duration::from_secs(30)))
        .service(transport);

    // The observer sees each progress notification the server sends for
    // this call; the client gives the call a progress token for it.
    let call = McpRequest::new(1, "tools/call")
        .with_params(json!({ "name": "count", "arguments": { "to": 3 } }))
        .with_extension(ProgressObserver::new(|p| {
            eprintln!("progress {} of {}", p.progress, p.total.unwrap_or(0.0));
        }));

    match client.ready().await?.call(call).await {
        Ok(result) => println!("{result}"),
        // Which limit fired: the idle limit or the hard cap.
        Err(e) if e.is::<Elapsed>() => eprintln!("gave up: {e}"),
        Err(e) => return Err(e),
    }
    Ok(())
}
