//! Streamable HTTP across the eras, against
//! `@modelcontextprotocol/server-everything` 2026.8.31 in Streamable HTTP mode
//! (through a recording proxy, which shows what reached it), one test per
//! cell: our `HttpClient` and `mcp_call --url` fall back to `initialize`,
//! call, get progress, and a timeout's cancel reaches the server in the
//! session, which is deleted at the end. The helpers they share with the
//! other legacy cells are [`super::legacy_http`]'s.

use super::legacy_http::{legacy_session, mcp_call, runtime, text, tool};
use super::*;

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::transport::http::HttpClient;
use tower_mcp_cancel::{
    Cancellation, Elapsed, Limit, ProgressObserver, ProgressResetLayer, TimeoutLayer,
};

/// What the recording proxy saw of one HTTP request, with the status the
/// server answered.
#[derive(Clone, Debug)]
struct Seen {
    http_method: http::Method,
    session: Option<String>,
    version: Option<String>,
    body: Value,
    status: u16,
}

/// A proxy in front of a server that records every request and its status.
struct Proxy {
    url: String,
    seen: mpsc::UnboundedReceiver<Seen>,
    log: Vec<Seen>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        use http_body_util::{BodyExt, Full};
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let (tx, seen) = mpsc::unbounded_channel();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http::<Full<bytes::Bytes>>();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (client, tx, upstream) = (client.clone(), tx.clone(), upstream.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let (client, tx, upstream) =
                                (client.clone(), tx.clone(), upstream.clone());
                            async move {
                                let (parts, body) = req.into_parts();
                                let bytes = body
                                    .collect()
                                    .await
                                    .map_err(std::io::Error::other)?
                                    .to_bytes();
                                let header = |n: &str| {
                                    parts
                                        .headers
                                        .get(n)
                                        .and_then(|v| v.to_str().ok())
                                        .map(str::to_owned)
                                };
                                let mut seen = Seen {
                                    http_method: parts.method.clone(),
                                    session: header("mcp-session-id"),
                                    version: header("mcp-protocol-version"),
                                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                                    status: 0,
                                };
                                let mut up =
                                    http::Request::builder().method(parts.method).uri(&upstream);
                                for (k, v) in &parts.headers {
                                    if k != http::header::HOST {
                                        up = up.header(k, v);
                                    }
                                }
                                let res = client.request(up.body(Full::new(bytes)).unwrap()).await;
                                let res = match res {
                                    Ok(r) => r,
                                    Err(e) => {
                                        return Err::<http::Response<hyper::body::Incoming>, _>(
                                            std::io::Error::other(e),
                                        )
                                    }
                                };
                                seen.status = res.status().as_u16();
                                let _ = tx.send(seen);
                                Ok(res)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Proxy {
            url: format!("http://{addr}/mcp"),
            seen,
            log: Vec::new(),
        }
    }

    /// Waits (bounded) for a request matching `pred`; everything seen on
    /// the way is kept in `log`.
    async fn wait_for(&mut self, what: &str, pred: impl Fn(&Seen) -> bool) -> Seen {
        if let Some(s) = self.log.iter().find(|s| pred(s)) {
            return s.clone();
        }
        loop {
            let next = tokio::time::timeout(Duration::from_secs(10), self.seen.recv())
                .await
                .unwrap_or_else(|_| panic!("the server never saw {what}; saw {:#?}", self.log))
                .expect("proxy running");
            self.log.push(next.clone());
            if pred(&next) {
                return next;
            }
        }
    }
}

fn rpc(s: &Seen, method: &str) -> bool {
    s.http_method == http::Method::POST && s.body["method"] == method
}

/// `server-everything` in Streamable HTTP mode on a free port.
fn server_everything() -> (Kill, String) {
    install();
    let port = free_port();
    let mut child = Command::new("node")
        .arg(
            interop_dir()
                .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        )
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn server-everything");
    wait_listening(port, &mut child);
    (Kill(child), format!("http://127.0.0.1:{port}/mcp"))
}

/// The modern request went first and was refused, then `initialize`.
async fn check_fallback(proxy: &mut Proxy) {
    let first = proxy.wait_for("a first request", |_| true).await;
    assert_eq!(first.version.as_deref(), Some("2026-07-28"), "{first:?}");
    assert!((400..500).contains(&first.status), "{first:?}");
    let init = proxy.wait_for("initialize", |s| rpc(s, "initialize")).await;
    assert_eq!(init.status, 200);
    proxy
        .wait_for("notifications/initialized", |s| {
            rpc(s, "notifications/initialized")
        })
        .await;
}

#[test]
fn legacy_http_ours_to_everything_call_progress_timeout() {
    let (_server, upstream) = server_everything();
    runtime().block_on(async {
        let mut proxy = Proxy::start(upstream).await;
        let client = HttpClient::new(proxy.url.parse().unwrap());

        // A call: the fallback, then the answer.
        let v = client
            .clone()
            .oneshot(tool("echo", serde_json::json!({"message": "hi"})))
            .await
            .unwrap();
        assert_eq!(text(&v), "Echo: hi");
        check_fallback(&mut proxy).await;
        let session = legacy_session(&client);

        // Progress: a 3 s operation in 6 steps under a 1.5 s idle limit.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let observed = seen.clone();
        let req = tool(
            "trigger-long-running-operation",
            serde_json::json!({"duration": 3, "steps": 6}),
        )
        .with_extension(ProgressObserver::new(move |p| {
            observed.lock().unwrap().push(p.progress)
        }));
        let mut stack = ServiceBuilder::new()
            .layer(
                ProgressResetLayer::new(Duration::from_millis(1500)).max(Duration::from_secs(20)),
            )
            .service(client.clone());
        let v = stack.ready().await.unwrap().call(req).await.unwrap();
        assert!(text(&v).contains("Steps: 6"), "{v}");
        let p = seen.lock().unwrap().clone();
        assert_eq!(
            p,
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "progress seen in order"
        );

        // A timeout: the cancel is posted in the session and accepted.
        let mut stack = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(1)))
            .service(client.clone());
        let err = stack
            .ready()
            .await
            .unwrap()
            // The reason travels in the request's cancellation, which the
            // layer cancels before it drops the call.
            .call(
                tool(
                    "trigger-long-running-operation",
                    serde_json::json!({"duration": 10, "steps": 10}),
                )
                .with_cancellation(Cancellation::new()),
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.downcast_ref::<Elapsed>().map(Elapsed::limit),
            Some(Limit::Timeout)
        );
        let call = proxy
            .wait_for("the long call", |s| {
                rpc(s, "tools/call") && s.body["params"]["arguments"]["duration"] == 10
            })
            .await;
        let cancel = proxy
            .wait_for("notifications/cancelled", |s| {
                rpc(s, "notifications/cancelled")
            })
            .await;
        assert_eq!(cancel.body["params"]["requestId"], call.body["id"]);
        assert!(
            cancel.body["params"]["reason"]
                .as_str()
                .unwrap_or("")
                .contains("timed out"),
            "{cancel:?}"
        );
        assert_eq!(cancel.session.as_deref(), Some(session.as_str()));
        assert_eq!(cancel.status, 202, "the server accepted the cancel");

        // The session still serves, and close() ends it.
        let v = client
            .clone()
            .oneshot(tool("echo", serde_json::json!({"message": "after"})))
            .await
            .unwrap();
        assert_eq!(text(&v), "Echo: after");
        client.close().await.unwrap();
        let delete = proxy
            .wait_for("DELETE", |s| s.http_method == http::Method::DELETE)
            .await;
        assert_eq!(delete.session.as_deref(), Some(session.as_str()));
        assert!((200..300).contains(&delete.status), "{delete:?}");
    });
}

#[test]
fn legacy_http_mcp_call_to_everything_call_progress_timeout() {
    let (_server, upstream) = server_everything();
    let rt = runtime();
    let mut proxy = rt.block_on(Proxy::start(upstream));
    let (code, out, err) = mcp_call(&["--url", &proxy.url, "echo", "message=hi"], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Echo: hi"), "{out}");
    rt.block_on(check_fallback(&mut proxy));

    // Progress: a 3 s operation in 6 steps succeeds under a 1.5 s idle
    // limit only because its progress resets the limit.
    let (code, out, err) = mcp_call(
        &[
            "--idle",
            "1500ms",
            "--url",
            &proxy.url,
            "trigger-long-running-operation",
            "duration=3",
            "steps=6",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Steps: 6"), "{out}");

    let (code, out, err) = mcp_call(
        &[
            "--timeout",
            "1s",
            "--url",
            &proxy.url,
            "trigger-long-running-operation",
            "duration=10",
            "steps=10",
        ],
        &[],
    );
    assert_eq!(code, 124, "{out}\n{err}");
    assert!(err.contains("posted notifications/cancelled"), "{err}");
    rt.block_on(async {
        let call = proxy
            .wait_for("the long call", |s| {
                rpc(s, "tools/call") && s.body["params"]["arguments"]["duration"] == 10
            })
            .await;
        let cancel = proxy
            .wait_for("notifications/cancelled", |s| {
                rpc(s, "notifications/cancelled")
            })
            .await;
        assert_eq!(cancel.body["params"]["requestId"], call.body["id"]);
        assert_eq!(cancel.session, call.session);
        assert_eq!(cancel.status, 202);
        // Each run ends its own session.
        let delete = proxy
            .wait_for("the DELETE of the session", |s| {
                s.http_method == http::Method::DELETE && s.session == call.session
            })
            .await;
        assert!((200..300).contains(&delete.status), "{delete:?}");
    });
}
