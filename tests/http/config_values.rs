//! Configuration values at their extremes (`0`, `1`, `MAX`,
//! `Duration::ZERO`, `Duration::MAX`) neither panic nor overflow: each
//! setter's value is exercised on a request path, on a paused clock.
#![cfg(feature = "http")]

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower::ServiceExt;
use tower_mcp_cancel::transport::http::StreamableHttpService;

use crate::support::http::{modern_headers, tool_call, Tools};

fn post(body: &serde_json::Value, headers: &[(&str, String)]) -> Request<Full<Bytes>> {
    let mut b = Request::builder()
        .method(http::Method::POST)
        .uri("http://127.0.0.1/mcp");
    for (k, v) in headers {
        b = b.header(*k, v);
    }
    b.body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

/// `keep_alive(Some(Duration::MAX))` means "never": a streamed response
/// (a notification first) goes out whole, and a keep-alive is never sent.
#[tokio::test(start_paused = true)]
async fn a_keep_alive_of_duration_max_never_fires_and_never_panics() {
    let (tools, _events) = Tools::new();
    let ep = StreamableHttpService::new(tools.service()).keep_alive(Some(Duration::MAX));
    let res = ep
        .oneshot(post(
            &tool_call(1, "notify", json!({})),
            &modern_headers("notify"),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"notified\":true"), "{text}");
    assert!(!text.contains("\n:"), "no keep-alive comment: {text}");
}
