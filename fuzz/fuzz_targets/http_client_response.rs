//! The HTTP client's reading of a response: arbitrary status, content type
//! and body bytes (delivered in chunks of a chosen size, optionally ending
//! in a transport error) through `HttpClient`'s JSON / SSE decoding, for a
//! request with id `1` and progress token `"p"` feeding a `ProgressTap`.
//!
//! Input, text-like so seeds are readable:
//!
//! ```text
//! 200 text/event-stream chunk=3 err
//! <body bytes>
//! ```
//!
//! Checked: nothing panics; the call ends (the body is finite); a success
//! comes only with a 2xx status and only from the response with id `1`; the
//! tap only ever accepts strictly increasing progress.
#![no_main]

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::StreamBody;
use libfuzzer_sys::fuzz_target;
use tower_mcp_cancel::__fuzz::read_http_response;
use tower_mcp_cancel::jsonrpc::{ProgressToken, RequestId};
use tower_mcp_cancel::{ProgressObserver, ProgressTap};

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let mut words = head.split(|b| *b == b' ').filter(|w| !w.is_empty());
    let status = words
        .next()
        .and_then(|w| std::str::from_utf8(w).ok())
        .and_then(|w| w.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let content_type = words.next().map(<[u8]>::to_vec);
    let mut chunk = 0usize;
    let mut err = false;
    for w in words {
        if let Some(n) = w.strip_prefix(b"chunk=") {
            chunk = std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if w == b"err" {
            err = true;
        }
    }
    let chunk = if chunk == 0 { body.len().max(1) } else { chunk };
    let mut frames: Vec<Result<Frame<Bytes>, std::io::Error>> = body
        .chunks(chunk)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    if err {
        frames.push(Err(std::io::Error::other("connection reset")));
    }
    let mut res = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    *res.status_mut() = status;
    if let Some(ct) = content_type.and_then(|ct| HeaderValue::from_bytes(&ct).ok()) {
        res.headers_mut().insert(http::header::CONTENT_TYPE, ct);
    }

    let seen: Arc<Mutex<Vec<f64>>> = Arc::default();
    let seen2 = seen.clone();
    let token = ProgressToken::from("p");
    let tap = ProgressTap::new(
        token.clone(),
        Some(ProgressObserver::new(move |p| {
            seen2.lock().unwrap().push(p.progress)
        })),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let out = rt.block_on(read_http_response(
        res,
        &RequestId::from(1),
        Some(tap),
        Some(token),
    ));
    if out.is_ok() {
        assert!(status.is_success(), "a success from a {status} response");
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "progress not strictly increasing: {seen:?}"
    );
});
