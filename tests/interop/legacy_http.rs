//! Streamable HTTP across the eras (issue 15), one test per cell:
//!
//! * the TypeScript SDK v1 client (`@modelcontextprotocol/sdk` 1.32.2) and
//!   the v2 client in its default (legacy) negotiation against our example
//!   HTTP server (legacy sessions on): initialize, call; a timeout and an
//!   explicit cancel drop the uncooperative `slow` handler (its `DROPPED`
//!   event) through the session's `notifications/cancelled`;
//! * our `HttpClient` and `mcp_call --url` against the Python SDK's 2025
//!   path (`py/legacy_server.py`): the fallback to `initialize`, a call,
//!   progress, a timeout whose cancel reaches the server in the session, the
//!   session deleted at the end (the same against `server-everything` is
//!   [`super::legacy_everything`]'s);
//! * `mcp_call --url https://…` with a self-signed certificate trusted
//!   through `SSL_CERT_FILE` (and refused, saying why, without it).

use super::*;

use std::sync::{Arc, Mutex};

use tower::BoxError;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::http::{HttpClient, ServerEra};
use tower_mcp_cancel::{
    Cancellation, Elapsed, McpRequest, ProgressObserver, ProgressResetLayer, TimeoutLayer,
};

// ---------- TS clients (v1, v2 default) against our example server ----------

pub(super) fn ts_legacy_client(sdk: &str, scenario: &str, url: &str) -> Run {
    install();
    let mut cmd = Command::new("node");
    cmd.arg(interop_dir().join("ts/legacy_client.mjs"))
        .args([scenario, "--sdk", sdk, "--url", url]);
    let out = run_bounded(cmd, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("{sdk} {scenario}: no JSON line\n{stdout}\n{stderr}"));
    let json: Value = serde_json::from_str(line).expect("client result is JSON");
    assert!(
        out.status.success() && json["ok"] == true,
        "{sdk} {scenario}: SDK client reported failure: {json}\nstderr:\n{stderr}"
    );
    assert!(
        json["protocol_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("2025-")),
        "a 2025 revision was negotiated: {json}"
    );
    Run {
        out: json,
        stderr,
        stdout_log: Vec::new(),
    }
}

macro_rules! ts_legacy_cells {
    ($($name:ident: $sdk:literal, $scenario:literal;)*) => {$(
        #[test]
        fn $name() {
            let server = our_http_server(stringify!($name));
            let run = ts_legacy_client($sdk, $scenario, &server.url);
            let server_stderr = std::fs::read_to_string(&server.stderr).unwrap();
            assert!(
                server_stderr.contains("legacy session opened by initialize"),
                "the client initialized a session"
            );
            if $scenario != "call" {
                check_cancelled(&run, &server_stderr, false);
            }
        }
    )*};
}

ts_legacy_cells! {
    legacy_http_ts_v1_call: "v1", "call";
    legacy_http_ts_v1_timeout: "v1", "timeout";
    legacy_http_ts_v1_cancel: "v1", "cancel";
    legacy_http_ts_v2_default_call: "v2", "call";
    legacy_http_ts_v2_default_timeout: "v2", "timeout";
    legacy_http_ts_v2_default_cancel: "v2", "cancel";
}

// ---------- legacy servers: the Python SDK's 2025 path ----------

/// The Python SDK's 2025 path on a free port; its stderr file.
fn python_legacy_server(tag: &str) -> (Kill, String, PathBuf) {
    install();
    let port = free_port();
    let stderr =
        std::env::temp_dir().join(format!("tmc-interop-pylegacy-{tag}-{}.stderr", now_ns()));
    let mut child = Command::new(python())
        .arg(interop_dir().join("py/legacy_server.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("spawn py/legacy_server.py");
    wait_listening(port, &mut child);
    (Kill(child), format!("http://127.0.0.1:{port}/mcp"), stderr)
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub(super) fn tool(name: &str, args: Value) -> McpRequest {
    McpRequest::without_id("tools/call")
        .with_params(serde_json::json!({"name": name, "arguments": args}))
}

pub(super) fn text(v: &Value) -> String {
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(super) fn legacy_session(c: &HttpClient) -> String {
    match c.server_era() {
        ServerEra::Stateful {
            protocol_version,
            session_id,
        } => {
            assert!(protocol_version.starts_with("2025-"), "{protocol_version}");
            session_id.expect("a session id")
        }
        other => panic!("the client did not fall back: {other:?}"),
    }
}

/// Runs `mcp_call` with `args` (bounded); (exit code, stdout, stderr).
pub(super) fn mcp_call(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(example("mcp_call"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_bounded(cmd, Duration::from_secs(60));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn legacy_http_ours_to_python_call_progress_timeout() {
    let (_server, url, stderr) = python_legacy_server("client");
    runtime().block_on(async {
        let client = HttpClient::new(url.parse().unwrap());
        let v = client
            .clone()
            .oneshot(tool("echo", serde_json::json!({"text": "hi"})))
            .await
            .unwrap();
        assert_eq!(text(&v), "hi");
        let session = legacy_session(&client);
        let refused = std::fs::read_to_string(&stderr).unwrap();
        assert!(
            refused.contains("REFUSED_MODERN 2026-07-28"),
            "the modern request went first"
        );

        // Progress: 2 s in 200 ms steps under a 1 s idle limit.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let observed = seen.clone();
        let req = tool(
            "slow",
            serde_json::json!({"seconds": 2, "interval_ms": 200}),
        )
        .with_extension(ProgressObserver::new(move |p| {
            observed.lock().unwrap().push(p.progress)
        }));
        let mut stack = ServiceBuilder::new()
            .layer(ProgressResetLayer::new(Duration::from_secs(1)).max(Duration::from_secs(20)))
            .service(client.clone());
        stack.ready().await.unwrap().call(req).await.unwrap();
        let p = seen.lock().unwrap().clone();
        assert_eq!(p.len(), 10, "{p:?}");
        assert!(p.windows(2).all(|w| w[1] > w[0]), "{p:?}");

        // A timeout: the Python handler is cancelled by the session's cancel.
        let mut stack = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(1)))
            .service(client.clone());
        let err = stack
            .ready()
            .await
            .unwrap()
            .call(
                tool("slow", serde_json::json!({"seconds": 10}))
                    .with_cancellation(Cancellation::new()),
            )
            .await
            .unwrap_err();
        assert!(err.is::<Elapsed>(), "{err}");
        let line = our_clients_wait_for_line(&stderr, |l| l.starts_with("CANCELLED ")).await;
        assert!(
            line.contains("timed out"),
            "the reason reached the server: {line}"
        );
        let v = client
            .clone()
            .oneshot(tool("echo", serde_json::json!({"text": "after"})))
            .await
            .unwrap();
        assert_eq!(text(&v), "after");
        assert_eq!(
            legacy_session(&client),
            session,
            "the same session throughout"
        );
        client.close().await.unwrap();
    });
}

#[test]
fn legacy_http_mcp_call_to_python_call_progress_timeout() {
    let (_server, url, stderr) = python_legacy_server("mcp_call");
    let (code, out, err) = mcp_call(&["--url", &url, "echo", "text=hi"], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("\"hi\""), "{out}");
    // Progress: 2 s in 200 ms steps under a 1 s idle limit.
    let (code, out, err) = mcp_call(
        &[
            "--idle",
            "1s",
            "--url",
            &url,
            "slow",
            "seconds=2",
            "interval_ms=200",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("slept 2"), "{out}");
    let (code, out, err) = mcp_call(
        &["--timeout", "1s", "--url", &url, "slow", "seconds=10"],
        &[],
    );
    assert_eq!(code, 124, "{out}\n{err}");
    let line = runtime().block_on(our_clients_wait_for_line(&stderr, |l| {
        l.starts_with("CANCELLED ")
    }));
    assert!(line.contains("timed out"), "{line}");
}

/// Waits (bounded) until a peer's stderr file has a line matching `pred`.
async fn our_clients_wait_for_line(path: &Path, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(f) = std::fs::File::open(path) {
            if let Some(l) = BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .find(|l| pred(l))
            {
                return l;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no matching line in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------- HTTPS: mcp_call --url https://… ----------

/// The HTTPS cell's MCP service: discovery, and `tools/call` echoing `text`.
#[cfg(feature = "tls")]
async fn tls_echo(req: McpRequest) -> Result<Value, BoxError> {
    let params: Value = req.params_as().unwrap_or_default();
    Ok(match req.method() {
        "server/discover" => serde_json::json!({
            "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}
        }),
        _ => serde_json::json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": params["arguments"]["text"]}]
        }),
    })
}

#[cfg(feature = "tls")]
#[test]
fn legacy_http_mcp_call_over_https_with_ssl_cert_file() {
    use std::sync::Arc;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let pem = std::env::temp_dir().join(format!("tmc-interop-cert-{}.pem", now_ns()));
    std::fs::write(&pem, ck.cert.pem()).unwrap();
    let rt = runtime();
    let port = rt.block_on(async {
        use tokio_rustls::rustls;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![ck.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mcp = tower::service_fn(tls_echo);
        let svc = StreamableHttpService::new(mcp);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, svc) = (acceptor.clone(), svc.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let hyper_svc = hyper::service::service_fn(move |req| svc.clone().oneshot(req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), hyper_svc)
                        .await;
                });
            }
        });
        port
    });
    let url = format!("https://localhost:{port}/mcp");
    let pem_path = pem.to_str().unwrap();
    let (code, out, err) = mcp_call(
        &["--url", &url, "echo", "text=secure"],
        &[("SSL_CERT_FILE", pem_path)],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("\"secure\""), "{out}");

    // Trusting only another certificate: refused, and the message says why.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let other_pem = std::env::temp_dir().join(format!("tmc-interop-other-{}.pem", now_ns()));
    std::fs::write(&other_pem, other.cert.pem()).unwrap();
    let (code, out, err) = mcp_call(
        &["--url", &url, "echo", "text=secure"],
        &[("SSL_CERT_FILE", other_pem.to_str().unwrap())],
    );
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("TLS handshake failed"), "{err}");
    assert!(
        err.contains("UnknownIssuer") || err.contains("BadSignature"),
        "{err}"
    );
    let _ = std::fs::remove_file(pem);
    let _ = std::fs::remove_file(other_pem);
    drop(rt);
}
