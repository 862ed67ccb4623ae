//! The floor of figure 8: a bare hyper server (the same hyper-util loop and
//! runtime as every server of the figure) that reads the body, parses the
//! JSON-RPC request with serde_json and answers the echo result as
//! `application/json`. No validation, no MCP: the least an HTTP server of
//! this load can cost.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use tower_mcp_cancel_benchmarks::load;

async fn answer(req: http::Request<Incoming>) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("");
    let answer = json!({
        "jsonrpc": "2.0",
        "id": msg["id"],
        "result": { "content": [{ "type": "text", "text": text }], "isError": false },
    });
    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
    Ok(http::Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .expect("response"))
}

fn main() {
    load::http_runtime().block_on(load::serve_http(tower::service_fn(answer)));
}
