//! `x-mcp-header` over real loopback sockets: our `HttpClient` learns the
//! annotations from `tools/list` (dropping invalid tools with a warning) and
//! mirrors arguments into `Mcp-Param-*` headers; our server checks them
//! against the body and answers `400` / `-32020` naming the header.
#![cfg(feature = "http")]

use crate::support::http as http_support;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderValue};
use http_support::*;
use serde_json::{json, Value};
use tower::BoxError;
use tower::{service_fn, Service, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::http::{
    HttpClient, HttpClientBuilder, HttpClientError, StreamableHttpService,
};
use tower_mcp_cancel::McpRequest;

fn query_schema() -> Value {
    json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "limit": {"type": "integer", "x-mcp-header": "Limit"},
        "opts": {"type": "object", "properties": {
            "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}},
        "sql": {"type": "string"}
    }})
}

fn tools_list() -> Value {
    json!({"tools": [
        {"name": "query", "inputSchema": query_schema()},
        {"name": "bad_number", "inputSchema": {"type": "object", "properties": {
            "x": {"type": "number", "x-mcp-header": "X"}}}},
        {"name": "bad_items", "inputSchema": {"type": "object", "properties": {
            "l": {"type": "array", "items": {"type": "string", "x-mcp-header": "L"}}}}},
        {"name": "plain", "inputSchema": {"type": "object"}}
    ]})
}

/// A server whose `tools/call` answers with the `Mcp-Param-*` headers it
/// received; `calls` counts the calls that reached it.
async fn start(proto: Proto) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let mcp = service_fn(move |req: McpRequest| {
        let counter = counter.clone();
        async move {
            match req.method() {
                "tools/list" => Ok::<_, BoxError>(tools_list()),
                "tools/call" => {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let mut seen = serde_json::Map::new();
                    if let Some(h) = req.extensions().get::<HeaderMap>() {
                        for (k, v) in h {
                            if k.as_str().starts_with("mcp-param-") {
                                seen.insert(
                                    k.as_str().to_owned(),
                                    String::from_utf8_lossy(v.as_bytes()).into(),
                                );
                            }
                        }
                    }
                    Ok(json!({"resultType": "complete", "headers": seen}))
                }
                _ => Err(Box::new(ErrorObject::new(-32601, "Method not found")) as BoxError),
            }
        }
    });
    let svc = StreamableHttpService::new(mcp).tools(&tools_list());
    // Connection events are not needed here.
    let (tx, _) = tower_mcp_cancel::test_util::Recorder::new();
    (serve(svc, proto, tx).await, calls)
}

fn builder(addr: std::net::SocketAddr, proto: Proto) -> HttpClientBuilder {
    let b = HttpClient::builder(format!("http://{addr}/mcp").parse().unwrap());
    match proto {
        Proto::H1 => b,
        Proto::H2 => b.http2_prior_knowledge(),
    }
}

fn client(addr: std::net::SocketAddr, proto: Proto) -> HttpClient {
    builder(addr, proto).build()
}

async fn call(c: &mut HttpClient, method: &str, params: Value) -> Result<Value, BoxError> {
    bounded(
        c.ready()
            .await
            .unwrap()
            .call(McpRequest::without_id(method).with_params(params)),
    )
    .await
}

/// Collects the `warn` events (their fields, as text).
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        struct Fields<'a>(&'a mut String);
        impl tracing::field::Visit for Fields<'_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                let _ = write!(self.0, "{}={:?} ", f.name(), v);
            }
        }
        let mut s = String::new();
        event.record(&mut Fields(&mut s));
        self.0.lock().unwrap().push(s);
    }
}

#[tokio::test]
async fn client_learns_from_tools_list_and_mirrors_into_headers() {
    use tracing_subscriber::layer::SubscriberExt;
    let warnings = Warnings::default();
    // Current-thread runtime: server tasks and the client run on this thread.
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));

    for proto in [Proto::H1, Proto::H2] {
        let (addr, calls) = start(proto).await;
        let args =
            json!({"region": "Hello, 世界", "limit": 42, "opts": {"dry": true}, "sql": "SELECT 1"});

        // By default a refused call makes the client list the tools and
        // send it again, with the headers: the caller sees the answer, and
        // the handler ran once.
        let mut fresh = client(addr, proto);
        let r = call(
            &mut fresh,
            "tools/call",
            json!({"name": "query", "arguments": args}),
        )
        .await
        .expect("sent again after listing the tools");
        assert_eq!(r["headers"]["mcp-param-limit"], "42", "{r}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
        assert_eq!(fresh.param_headers().headers("query").unwrap().len(), 3);
        calls.store(0, Ordering::SeqCst);

        let mut c = builder(addr, proto)
            .relist_on_header_mismatch(false)
            .build();
        // Before the client knows the schema it sends no Mcp-Param-*: the
        // server, which knows it, refuses the call naming the header.
        let err = call(
            &mut c,
            "tools/call",
            json!({"name": "query", "arguments": args}),
        )
        .await
        .unwrap_err();
        let e = err.downcast_ref::<ErrorObject>().expect("typed error");
        assert_eq!(e.code, ErrorObject::HEADER_MISMATCH, "{e:?}");
        assert!(
            e.message.contains("Mcp-Param-Limit header is missing")
                || e.message.contains("Mcp-Param-Region header is missing"),
            "{}",
            e.message
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "rejected before the handler"
        );

        // tools/list: the invalid tools are gone from what the caller gets.
        warnings.0.lock().unwrap().clear();
        let list = call(&mut c, "tools/list", json!({})).await.unwrap();
        let names: Vec<&str> = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["query", "plain"]);
        let w = warnings.0.lock().unwrap().clone();
        let about = |tool: &str| {
            w.iter()
                .find(|l| l.contains(&format!("tool={tool} ")))
                .cloned()
                .unwrap_or_else(|| panic!("no warning for {tool}: {w:?}"))
        };
        assert!(about("bad_number").contains("type number"), "{w:?}");
        assert!(about("bad_items").contains("`items`"), "{w:?}");
        assert!(!w.iter().any(|l| l.contains("tool=query ")), "{w:?}");
        assert_eq!(c.param_headers().headers("query").unwrap().len(), 3);

        // Now the call carries the headers: Base64 for the non-ASCII string,
        // the integer in decimal, the nested boolean.
        let r = call(
            &mut c,
            "tools/call",
            json!({"name": "query", "arguments": args}),
        )
        .await
        .unwrap();
        assert_eq!(
            r["headers"],
            json!({
                "mcp-param-region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
                "mcp-param-limit": "42",
                "mcp-param-dry-run": "true"
            })
        );
        // null and absent values: no header, and the server expects none.
        let r = call(
            &mut c,
            "tools/call",
            json!({"name": "query", "arguments": {"region": null, "sql": "x"}}),
        )
        .await
        .unwrap();
        assert_eq!(r["headers"], json!({}));
        // A plain value goes as-is; an integral float as an integer.
        let r = call(
            &mut c,
            "tools/call",
            json!({"name": "query", "arguments": {"region": "us-west1", "limit": 7.0}}),
        )
        .await
        .unwrap();
        assert_eq!(
            r["headers"],
            json!({"mcp-param-region": "us-west1", "mcp-param-limit": "7"})
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        // A value that cannot be mirrored is refused before anything is sent.
        let err = call(
            &mut c,
            "tools/call",
            json!({"name": "query", "arguments": {"limit": 9007199254740992u64}}),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<HttpClientError>(),
                Some(HttpClientError::InvalidRequest(m)) if m.contains("Mcp-Param-Limit")
            ),
            "{err}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        // A schema registered by hand works without a tools/list; clones of
        // a client share what it learnt, other clients do not.
        let mut by_hand = builder(addr, proto)
            .tool_schema("query", &query_schema())
            .build();
        let r = call(
            &mut by_hand,
            "tools/call",
            json!({"name": "query", "arguments": {"region": "eu"}}),
        )
        .await
        .unwrap();
        assert_eq!(r["headers"], json!({"mcp-param-region": "eu"}));
        let mut clone = c.clone();
        assert!(call(
            &mut clone,
            "tools/call",
            json!({"name": "query", "arguments": {"region": "eu"}})
        )
        .await
        .is_ok());
        let mut fresh = builder(addr, proto)
            .relist_on_header_mismatch(false)
            .build();
        assert!(call(
            &mut fresh,
            "tools/call",
            json!({"name": "query", "arguments": {"region": "eu"}})
        )
        .await
        .is_err());
        let bad =
            json!({"type": "object", "properties": {"x": {"type": "number", "x-mcp-header": "X"}}});
        assert!(fresh.register_tool_schema("bad_number", &bad).is_err());
    }
}

fn query_call(id: i64, args: Value) -> Value {
    tool_call(id, "query", args)
}

async fn post_with(
    conn: &mut Conn,
    body: &Value,
    tool: &str,
    params: &[(&str, &[u8])],
) -> (u16, Value) {
    let mut req = post(body, &modern_headers(tool));
    for (k, v) in params {
        req.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_bytes(v).unwrap(),
        );
    }
    let res = bounded(conn.send(req)).await.unwrap();
    let status = res.status().as_u16();
    let body = text(res).await;
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}")),
    )
}

#[tokio::test]
async fn server_rejects_missing_mismatched_and_invalid_param_headers() {
    let (addr, calls) = start(Proto::H1).await;
    let mut conn = Conn::connect(addr, Proto::H1).await;
    let args = json!({"region": "us-west1", "limit": 42});

    type Case<'a> = (&'a str, Value, Vec<(&'a str, &'a [u8])>, &'a str);
    let rejected: Vec<Case> = vec![
        (
            "missing header for a value in the body",
            args.clone(),
            vec![("Mcp-Param-Limit", b"42")],
            "the Mcp-Param-Region header is missing",
        ),
        (
            "mismatched string",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"us-east1"),
                ("Mcp-Param-Limit", b"42"),
            ],
            "Mcp-Param-Region header value 'us-east1' does not match body value 'us-west1'",
        ),
        (
            "mismatched Base64 value",
            args.clone(),
            // "us-west2"
            vec![
                ("Mcp-Param-Region", b"=?base64?dXMtd2VzdDI=?="),
                ("Mcp-Param-Limit", b"42"),
            ],
            "does not match",
        ),
        (
            "malformed Base64",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"=?base64?***?="),
                ("Mcp-Param-Limit", b"42"),
            ],
            "Mcp-Param-Region header has a malformed Base64 value",
        ),
        (
            "invalid characters",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"us\xffwest1"),
                ("Mcp-Param-Limit", b"42"),
            ],
            "the Mcp-Param-Region header contains invalid characters",
        ),
        (
            "integer differs numerically",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"us-west1"),
                ("Mcp-Param-Limit", b"43"),
            ],
            "Mcp-Param-Limit header value '43' does not match body value '42'",
        ),
        (
            "header without a value in the body",
            json!({"limit": 42}),
            vec![
                ("Mcp-Param-Region", b"us-west1"),
                ("Mcp-Param-Limit", b"42"),
            ],
            "the Mcp-Param-Region header is present but arguments.region has no value",
        ),
        (
            "header repeated",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"us-west1"),
                ("mcp-param-region", b"us-west1"),
                ("Mcp-Param-Limit", b"42"),
            ],
            "appears more than once",
        ),
    ];
    for (i, (what, args, headers, message)) in rejected.into_iter().enumerate() {
        let id = i as i64 + 1;
        let (status, v) = post_with(&mut conn, &query_call(id, args), "query", &headers).await;
        assert_eq!(status, 400, "{what}: {v}");
        assert_eq!(v["id"], id, "{what}");
        assert_eq!(v["error"]["code"], -32020, "{what}: {v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains(message), "{what}: {m}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "none reached the handler");

    let accepted: Vec<Case> = vec![
        (
            "exact headers, header names in any case",
            args.clone(),
            vec![
                ("mcp-param-region", b"us-west1"),
                ("MCP-PARAM-LIMIT", b"42"),
            ],
            "",
        ),
        (
            "42.0 equals 42",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"us-west1"),
                ("Mcp-Param-Limit", b"42.0"),
            ],
            "",
        ),
        (
            "Base64 of the same value, unknown Mcp-Param-* ignored",
            args.clone(),
            vec![
                ("Mcp-Param-Region", b"=?base64?dXMtd2VzdDE=?="),
                ("Mcp-Param-Limit", b"42"),
                ("Mcp-Param-Tenant", b"whatever"),
            ],
            "",
        ),
        (
            "null and absent need no header",
            json!({"region": null}),
            vec![],
            "",
        ),
    ];
    let n = accepted.len();
    for (i, (what, args, headers, _)) in accepted.into_iter().enumerate() {
        let id = 100 + i as i64;
        let (status, v) = post_with(&mut conn, &query_call(id, args), "query", &headers).await;
        assert_eq!(status, 200, "{what}: {v}");
        assert_eq!(v["result"]["resultType"], "complete", "{what}: {v}");
    }
    // A tool without annotations, and a tool the server rejected, are not checked.
    for tool in ["plain", "bad_number"] {
        let (status, v) = post_with(
            &mut conn,
            &tool_call(200, tool, json!({"x": 1})),
            tool,
            &[("Mcp-Param-Region", b"anything")],
        )
        .await;
        assert_eq!(status, 200, "{tool}: {v}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), n + 2);
}
