//! The rmcp cells of the interop matrix (`tests/interop/README.md` at the
//! repository's root): `examples/rmcp_server` (an rmcp server written with
//! rmcp's macros, wrapped in [`Cancellable`](tower_mcp_cancel_rmcp::Cancellable)) driven by
//! the TypeScript and Python SDK clients over stdio and Streamable HTTP —
//! an explicit cancel and a client timeout each drop the uncooperative
//! `slow` handler's future (a `DROPPED` event within [`DROP_BOUND`] of the
//! cancel, before the client closes), which rmcp alone never does; the
//! handler's progress reaches a TS client that resets its timeout on it; an
//! rmcp client (`RmcpClient`) under `TimeoutLayer` + `ProgressResetLayer`
//! calling the same example server over stdio, whose cancels on the wire
//! are checked against the spec.
//!
//! The SDK drivers and the harness are the repository's (`tests/interop/`):
//! this test is not part of the published package.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

#[path = "../../../tests/interop/harness.rs"]
mod harness;
use harness::*;

macro_rules! rmcp_server_cells {
    ($($name:ident: $sdk:expr, $http:expr, $scenario:literal;)*) => {$(
        #[test]
        fn $name() {
            let server = if $http {
                Some(our_http_server_with("rmcp_server", stringify!($name)))
            } else {
                None
            };
            let url = server.as_ref().map(|s| s.url.as_str());
            let run = run_client_with("rmcp_server", $sdk, $scenario, url, &[]);
            let server_stderr = match &server {
                Some(s) => std::fs::read_to_string(&s.stderr).unwrap(),
                None => run.stderr.clone(),
            };
            match $scenario {
                "timeout" | "cancel" => check_cancelled(&run, &server_stderr, !$http),
                "progress_reset" => check_progress(&run),
                other => unreachable!("{other}"),
            }
        }
    )*};
}

rmcp_server_cells! {
    rmcp_stdio_ts_timeout: Sdk::Ts, false, "timeout";
    rmcp_stdio_ts_cancel: Sdk::Ts, false, "cancel";
    rmcp_stdio_py_timeout: Sdk::Py, false, "timeout";
    rmcp_stdio_py_cancel: Sdk::Py, false, "cancel";
    rmcp_http_ts_timeout: Sdk::Ts, true, "timeout";
    rmcp_http_ts_cancel: Sdk::Ts, true, "cancel";
    rmcp_http_py_timeout: Sdk::Py, true, "timeout";
    rmcp_http_py_cancel: Sdk::Py, true, "cancel";
    rmcp_stdio_ts_progress_reset: Sdk::Ts, false, "progress_reset";
    rmcp_http_ts_progress_reset: Sdk::Ts, true, "progress_reset";
}

mod rmcp_client {
    use std::sync::{Arc, Mutex};

    use ::rmcp::service::RunningService;
    use ::rmcp::RoleClient;
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use tower::{ServiceBuilder, ServiceExt as _};
    use tower_mcp_cancel::{
        Cancellation, Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
    };
    use tower_mcp_cancel_rmcp::{RmcpClient, RouteProgress};

    use super::*;

    /// The example server (over stdio) as a child process, an initialized rmcp
    /// client to it, and every line the client wrote: (ns, message).
    struct Session {
        running: RunningService<RoleClient, RouteProgress<()>>,
        wire: Arc<Mutex<Vec<(i64, Value)>>>,
        stderr: PathBuf,
        _child: tokio::process::Child,
    }

    async fn session() -> Session {
        let stderr =
            std::env::temp_dir().join(format!("tmc-interop-rmcp-client-{}.stderr", now_ns()));
        let mut child = tokio::process::Command::new(example("rmcp_server"))
            .arg("--events")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn rmcp_server");
        let mut server_in = child.stdin.take().unwrap();
        let server_out = child.stdout.take().unwrap();
        // The client writes into a pipe; a relay records each line and
        // passes it on to the server.
        let (client_w, relay_r) = tokio::io::duplex(64 * 1024);
        let wire = Arc::new(Mutex::new(Vec::new()));
        let log = wire.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(relay_r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    log.lock().unwrap().push((now_ns(), v));
                }
                let sent = server_in.write_all(format!("{line}\n").as_bytes()).await;
                if sent.is_err() || server_in.flush().await.is_err() {
                    break;
                }
            }
        });
        let running = ::rmcp::serve_client(RouteProgress::new(()), (server_out, client_w))
            .await
            .expect("initialized");
        Session {
            running,
            wire,
            stderr,
            _child: child,
        }
    }

    fn slow(interval_ms: u64) -> McpRequest {
        McpRequest::without_id("tools/call").with_params(
            json!({"name": "slow", "arguments": {"seconds": 30, "interval_ms": interval_ms}}),
        )
    }

    /// The id of the `n`th `tools/call` the client wrote.
    fn call_id(wire: &[(i64, Value)], n: usize) -> Value {
        wire.iter()
            .filter(|(_, m)| m["method"] == "tools/call")
            .nth(n)
            .map(|(_, m)| m["id"].clone())
            .expect("the call on the wire")
    }

    /// Exactly one `notifications/cancelled` for `id`, after its request, a
    /// notification (no `id`), naming the request and giving `reason_has`
    /// in its reason; the client wrote nothing else for `id` after it.
    fn check_cancel(wire: &[(i64, Value)], id: &Value, reason_has: &str) {
        let sent = wire
            .iter()
            .position(|(_, m)| m["method"] == "tools/call" && &m["id"] == id)
            .expect("the request");
        let cancels: Vec<usize> = wire
            .iter()
            .enumerate()
            .filter(|(_, (_, m))| {
                m["method"] == "notifications/cancelled" && &m["params"]["requestId"] == id
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(cancels.len(), 1, "one cancel for {id}: {wire:?}");
        let (_, cancel) = &wire[cancels[0]];
        assert!(cancels[0] > sent, "the cancel follows its request");
        assert_eq!(cancel["jsonrpc"], "2.0", "{cancel}");
        assert!(cancel.get("id").is_none(), "a notification: {cancel}");
        let reason = cancel["params"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(reason_has), "reason {reason:?} for {id}");
        assert!(
            !wire[cancels[0] + 1..]
                .iter()
                .any(|(_, m)| &m["id"] == id || &m["params"]["requestId"] == id),
            "nothing more for {id}: {wire:?}"
        );
    }

    #[test]
    fn rmcp_client_under_timeout_and_progress_reset_cancels_on_the_wire() {
        install();
        rt().block_on(async {
            let s = session().await;
            let client = ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_millis(1500)))
                .layer(ProgressResetLayer::new(Duration::from_millis(400)))
                .service(RmcpClient::new(&s.running));
            // Progress every 100 ms keeps the idle limit away: the deadline ends it.
            // The reason travels in the request's cancellation, which the
            // layer that gives up cancels before it drops the call.
            let req = slow(100).with_cancellation(Cancellation::new());
            let err = client.clone().oneshot(req).await.unwrap_err();
            let e = err.downcast_ref::<Elapsed>().expect("a limit");
            assert_eq!(e.limit(), Limit::Timeout, "{err}");
            // Progress every second: the idle limit ends it.
            let err = client.oneshot(slow(1000)).await.unwrap_err();
            let e = err.downcast_ref::<Elapsed>().expect("a limit");
            assert_eq!(e.limit(), Limit::Idle, "{err}");

            let wire = s.wire.lock().unwrap().clone();
            let (deadline, idle) = (call_id(&wire, 0), call_id(&wire, 1));
            // The server dropped both handlers: the cancels reached it.
            for id in [&deadline, &idle] {
                let needle = format!("DROPPED {id} ");
                wait_for_line(&s.stderr, |l| l.starts_with(&needle)).await;
            }
            let wire = s.wire.lock().unwrap().clone();
            check_cancel(&wire, &deadline, "timed out after");
            check_cancel(&wire, &idle, "no progress");
            let _ = s.running.cancel().await;
        });
    }
}
