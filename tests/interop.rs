//! Interop with the official MCP SDKs (TypeScript 2.4.0, Python mcp 2.3.0):
//! each cell of the matrix in `tests/interop/README.md` is one test here.
//!
//! The SDK packages are installed (idempotently) by `tests/interop/install.sh`
//! on first use; `.ci/run` runs it up front. The example servers are the ones
//! `cargo test` builds (`target/<profile>/examples/`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "interop/harness.rs"]
mod harness;
use harness::*;

macro_rules! server_cells {
    ($($name:ident: $sdk:expr, $http:expr, $scenario:literal;)*) => {$(
        #[test]
        fn $name() {
            let server = if $http { Some(our_http_server(stringify!($name))) } else { None };
            let run = run_client($sdk, $scenario, server.as_ref().map(|s| s.url.as_str()), &[]);
            let server_stderr = match &server {
                Some(s) => std::fs::read_to_string(&s.stderr).unwrap(),
                None => run.stderr.clone(),
            };
            match $scenario {
                "basic" => {}
                "timeout" | "cancel" => check_cancelled(&run, &server_stderr, !$http),
                "progress" | "progress_reset" => check_progress(&run),
                other => unreachable!("{other}"),
            }
        }
    )*};
}

// Our example servers driven by each SDK's client.
server_cells! {
    ours_stdio_ts_basic: Sdk::Ts, false, "basic";
    ours_stdio_ts_timeout: Sdk::Ts, false, "timeout";
    ours_stdio_ts_cancel: Sdk::Ts, false, "cancel";
    ours_stdio_ts_progress: Sdk::Ts, false, "progress";
    ours_stdio_ts_progress_reset: Sdk::Ts, false, "progress_reset";
    ours_stdio_py_basic: Sdk::Py, false, "basic";
    ours_stdio_py_timeout: Sdk::Py, false, "timeout";
    ours_stdio_py_cancel: Sdk::Py, false, "cancel";
    ours_stdio_py_progress: Sdk::Py, false, "progress";
    ours_http_ts_basic: Sdk::Ts, true, "basic";
    ours_http_ts_timeout: Sdk::Ts, true, "timeout";
    ours_http_ts_cancel: Sdk::Ts, true, "cancel";
    ours_http_ts_progress: Sdk::Ts, true, "progress";
    ours_http_ts_progress_reset: Sdk::Ts, true, "progress_reset";
    ours_http_py_basic: Sdk::Py, true, "basic";
    ours_http_py_timeout: Sdk::Py, true, "timeout";
    ours_http_py_cancel: Sdk::Py, true, "cancel";
    ours_http_py_progress: Sdk::Py, true, "progress";
}

// The rmcp cells (the rmcp example server in the same cells, an rmcp
// client under the layers) are the rmcp package's:
// integrations/rmcp/tests/interop.rs.

// ---------- our clients driving each SDK's server ----------

mod our_clients {
    use super::*;
    use tower::BoxError;
    use tower::{Service, ServiceBuilder, ServiceExt};
    use tower_mcp_cancel::transport::http::HttpClient;
    use tower_mcp_cancel::transport::stdio::StdioClient;
    use tower_mcp_cancel::{
        Cancellation, Elapsed, Limit, McpRequest, ProgressResetLayer, TimeoutLayer,
    };

    type Client = tower::util::BoxCloneService<McpRequest, Value, BoxError>;

    /// An SDK server and our client to it, plus where its stderr goes.
    struct Peer {
        client: Client,
        stderr: PathBuf,
        _child: Option<Kill>,
        _stdio: Option<StdioClient>,
    }

    async fn peer(sdk: Sdk, http: bool, tag: &str) -> Peer {
        install();
        let stderr =
            std::env::temp_dir().join(format!("tmc-interop-sdk-{tag}-{}.stderr", now_ns()));
        if http {
            let port = free_port();
            let mut cmd = sdk.server();
            cmd.args(["--http", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap());
            let mut child = cmd.spawn().expect("spawn SDK server");
            wait_listening(port, &mut child);
            let client = HttpClient::new(format!("http://127.0.0.1:{port}/mcp").parse().unwrap());
            Peer {
                client: Client::new(client),
                stderr,
                _child: Some(Kill(child)),
                _stdio: None,
            }
        } else {
            let std_cmd = sdk.server();
            let mut cmd = tokio::process::Command::from(std_cmd);
            cmd.stderr(std::fs::File::create(&stderr).unwrap());
            let client = StdioClient::spawn(cmd).expect("spawn SDK server over stdio");
            Peer {
                client: Client::new(client.clone()),
                stderr,
                _child: None,
                _stdio: Some(client),
            }
        }
    }

    fn call(name: &str, args: Value) -> McpRequest {
        McpRequest::without_id("tools/call").with_params(serde_json::json!({
            "name": name,
            "arguments": args,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "tower-mcp-cancel-interop", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }))
    }

    async fn warm_up(client: &mut Client) {
        let v = client
            .ready()
            .await
            .unwrap()
            .call(call("echo", serde_json::json!({"text": "warm"})))
            .await;
        let v = v.unwrap_or_else(|e| panic!("warm-up echo failed: {e}"));
        assert_eq!(v["content"][0]["text"], "warm", "echo result: {v}");
    }

    fn is_cancel_line(l: &str) -> bool {
        l.starts_with("CANCELLED ") || l.starts_with("HTTP_CLOSE ")
    }

    // 5. A call past the idle limit succeeds because progress resets it.
    async fn progress_resets(sdk: Sdk, http: bool) {
        let Peer {
            client,
            _child,
            _stdio,
            ..
        } = peer(sdk, http, "reset").await;
        let mut client = client;
        warm_up(&mut client).await;
        let mut svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(30)))
            .layer(ProgressResetLayer::new(Duration::from_millis(700)).max(Duration::from_secs(20)))
            .service(client);
        let t = Instant::now();
        let v = svc
            .ready()
            .await
            .unwrap()
            .call(call(
                "slow",
                serde_json::json!({"seconds": 2, "interval_ms": 100}),
            ))
            .await
            .unwrap_or_else(|e| panic!("slow under progress reset failed: {e}"));
        assert!(
            t.elapsed() > Duration::from_millis(1900),
            "the call really ran past the idle limit"
        );
        assert!(v.get("content").is_some(), "a tool result: {v}");
    }

    // 6/7. A fixed timeout, or the hard maximum while progress keeps coming:
    // the SDK server observes the cancellation.
    async fn server_observes_cancel(sdk: Sdk, http: bool, limit: Limit) {
        let Peer {
            client,
            stderr,
            _child,
            _stdio,
        } = peer(sdk, http, "cancel").await;
        let mut client = client;
        warm_up(&mut client).await;
        let mut svc = match limit {
            Limit::Timeout => ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(1)))
                .layer(
                    ProgressResetLayer::new(Duration::from_secs(10)).max(Duration::from_secs(20)),
                )
                .service(client)
                .boxed_clone(),
            _ => ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::from_secs(30)))
                .layer(
                    ProgressResetLayer::new(Duration::from_millis(500))
                        .max(Duration::from_millis(1500)),
                )
                .service(client)
                .boxed_clone(),
        };
        let err = svc
            .ready()
            .await
            .unwrap()
            // The reason travels in the request's cancellation, which the
            // layer that gives up cancels before it drops the call.
            .call(
                call(
                    "slow",
                    serde_json::json!({"seconds": 6, "interval_ms": 100}),
                )
                .with_cancellation(Cancellation::new()),
            )
            .await
            .expect_err("the limit fires");
        let e = err
            .downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("Elapsed, got {err}"));
        assert_eq!(e.limit(), limit);
        let t_gave_up = now_ns();
        let line = wait_for_line(&stderr, is_cancel_line).await;
        let ns: i64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(
            ns - t_gave_up < DROP_BOUND.as_nanos() as i64,
            "SDK server saw the cancel late: {line}"
        );
        if !http {
            // stdio: it received our notifications/cancelled, with a reason.
            let received = wait_for_line(&stderr, |l| l.starts_with("RECEIVED_CANCEL ")).await;
            let expect = match limit {
                Limit::Timeout => "timed out",
                _ => "maximum",
            };
            assert!(
                received.contains(expect),
                "reason names the limit: {received}"
            );
        }
    }

    // 8. A late response after our cancel is ignored by our client.
    async fn late_response_ignored(sdk: Sdk, http: bool) {
        let Peer {
            client,
            _child,
            _stdio,
            ..
        } = peer(sdk, http, "late").await;
        let mut client = client;
        warm_up(&mut client).await;
        for i in 0..20 {
            // A zero deadline: the request goes out and is cancelled at once; the
            // server may well have answered already.
            let mut hasty = ServiceBuilder::new()
                .layer(TimeoutLayer::new(Duration::ZERO))
                .service(client.clone());
            let r = hasty
                .ready()
                .await
                .unwrap()
                .call(call("echo", serde_json::json!({"text": "late"})))
                .await;
            assert!(r.is_err() || r.as_ref().unwrap()["content"][0]["text"] == "late");
            let text = format!("after-{i}");
            let v = client
                .ready()
                .await
                .unwrap()
                .call(call("echo", serde_json::json!({"text": text})))
                .await
                .unwrap_or_else(|e| panic!("the next call after a cancelled one failed: {e}"));
            assert_eq!(
                v["content"][0]["text"], text,
                "each caller gets its own response"
            );
        }
    }

    macro_rules! client_cells {
        ($($name:ident: $body:expr;)*) => {$(
            #[test]
            fn $name() {
                rt().block_on(async { tokio::time::timeout(Duration::from_secs(60), $body).await.expect("cell finished in 60 s") });
            }
        )*};
    }

    client_cells! {
        sdk_ts_stdio_progress_resets: progress_resets(Sdk::Ts, false);
        sdk_ts_stdio_timeout_cancels: server_observes_cancel(Sdk::Ts, false, Limit::Timeout);
        sdk_ts_stdio_max_cancels: server_observes_cancel(Sdk::Ts, false, Limit::Max);
        sdk_ts_stdio_late_response_ignored: late_response_ignored(Sdk::Ts, false);
        sdk_py_stdio_progress_resets: progress_resets(Sdk::Py, false);
        sdk_py_stdio_timeout_cancels: server_observes_cancel(Sdk::Py, false, Limit::Timeout);
        sdk_py_stdio_max_cancels: server_observes_cancel(Sdk::Py, false, Limit::Max);
        sdk_py_stdio_late_response_ignored: late_response_ignored(Sdk::Py, false);
        sdk_ts_http_progress_resets: progress_resets(Sdk::Ts, true);
        sdk_ts_http_timeout_cancels: server_observes_cancel(Sdk::Ts, true, Limit::Timeout);
        sdk_ts_http_max_cancels: server_observes_cancel(Sdk::Ts, true, Limit::Max);
        sdk_ts_http_late_response_ignored: late_response_ignored(Sdk::Ts, true);
        sdk_py_http_progress_resets: progress_resets(Sdk::Py, true);
        sdk_py_http_timeout_cancels: server_observes_cancel(Sdk::Py, true, Limit::Timeout);
        sdk_py_http_max_cancels: server_observes_cancel(Sdk::Py, true, Limit::Max);
        sdk_py_http_late_response_ignored: late_response_ignored(Sdk::Py, true);
    }
}

// Streamable HTTP across the eras (legacy sessions, dual-era client, HTTPS).
#[path = "interop/legacy_http.rs"]
mod legacy_http;
// The same against `server-everything`.
#[path = "interop/legacy_everything.rs"]
mod legacy_everything;

// Replicas of the example server behind HAProxy (deploy/haproxy/).
#[path = "interop/replicas.rs"]
mod replicas;
