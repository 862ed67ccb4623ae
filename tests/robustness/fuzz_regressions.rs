//! Regression tests for the fuzz targets in `fuzz/` (see `fuzz/README.md`).
//!
//! The fuzzers need nightly; these tests do not. They replay the committed
//! seed corpora through the same entry points on stable, so a change that
//! makes one of those inputs panic fails `cargo test --all-features`, and
//! they hold every input a fuzzer found crashing (none so far: see the
//! README's table), each as its own named test.

use std::path::Path;

#[cfg(feature = "fuzzing")]
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

/// Every line of every stdio seed decodes (or is refused) with one of the
/// two codes the server answers with, and the mix of outcomes the seeds
/// were written for is there: requests, notifications, responses, errors.
#[cfg(feature = "fuzzing")]
#[test]
fn stdio_seed_lines_decode_or_are_refused() {
    use tower_mcp_cancel::__fuzz::Message;
    use tower_mcp_cancel::jsonrpc::ErrorObject;

    let (mut requests, mut notifications, mut responses, mut errors) = (0, 0, 0, 0);
    for (name, data) in seeds("stdio_framing") {
        let payload = &data[4..]; // max, capacity, 2 seed bytes
        for line in payload.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match Message::decode(line) {
                Ok(Message::Request(_)) => requests += 1,
                Ok(Message::Notification(_)) => notifications += 1,
                Ok(Message::Response(_)) => responses += 1,
                Err(e) => {
                    assert!(
                        [ErrorObject::PARSE_ERROR, ErrorObject::INVALID_REQUEST].contains(&e.code),
                        "{name}: code {}",
                        e.code
                    );
                    errors += 1;
                }
            }
        }
    }
    assert!(requests >= 5 && notifications >= 3 && responses >= 2 && errors >= 8,
        "requests {requests}, notifications {notifications}, responses {responses}, errors {errors}");
}

#[cfg(all(feature = "fuzzing", feature = "http"))]
mod client {
    use bytes::Bytes;
    use http::{HeaderValue, Response, StatusCode};
    use http_body::Frame;
    use http_body_util::StreamBody;
    use tower_mcp_cancel::__fuzz::read_http_response;
    use tower_mcp_cancel::jsonrpc::{ProgressToken, RequestId};
    use tower_mcp_cancel::ProgressTap;

    /// Replays one `http_client_response` input (first line: status,
    /// content type, `chunk=N`, `err`; then the body).
    async fn replay(data: &[u8]) -> (StatusCode, Result<serde_json::Value, String>, Option<f64>) {
        let (head, body) = match data.iter().position(|b| *b == b'\n') {
            Some(i) => (&data[..i], &data[i + 1..]),
            None => (data, &b""[..]),
        };
        let head = String::from_utf8_lossy(head);
        let mut words = head.split(' ').filter(|w| !w.is_empty());
        let status = words
            .next()
            .and_then(|w| w.parse::<u16>().ok())
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        let ct = words.next().map(str::to_owned);
        let (mut chunk, mut err) = (0usize, false);
        for w in words {
            if let Some(n) = w.strip_prefix("chunk=") {
                chunk = n.parse().unwrap_or(0);
            }
            err |= w == "err";
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
        if let Some(ct) = ct.and_then(|c| HeaderValue::from_str(&c).ok()) {
            res.headers_mut().insert(http::header::CONTENT_TYPE, ct);
        }
        let token = ProgressToken::from("p");
        let tap = ProgressTap::new(token.clone(), None);
        let out = read_http_response(res, &RequestId::from(1), Some(tap.clone()), Some(token))
            .await
            .map_err(|e| e.to_string());
        (status, out, tap.last())
    }

    #[tokio::test]
    async fn client_seeds_end_without_panicking() {
        for (name, data) in super::seeds("http_client_response") {
            let (status, out, _) = replay(&data).await;
            if out.is_ok() {
                assert!(status.is_success(), "{name}: a success from {status}");
            }
        }
    }

    #[tokio::test]
    async fn sse_progress_counts_only_increases_for_our_token() {
        let (name, data) = super::seeds("http_client_response")
            .into_iter()
            .find(|(n, _)| n == "sse_progress_then_result")
            .unwrap();
        let (_, out, last) = replay(&data).await;
        assert!(out.is_ok(), "{name}: {out:?}");
        // 1, then 0.5 (ignored), then 2; 9 was for another token.
        assert_eq!(last, Some(2.0));
    }

    #[tokio::test]
    async fn responses_for_other_ids_do_not_answer_the_call() {
        let (_, out, _) = replay(
            b"200 text/event-stream\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n\n",
        )
        .await;
        assert!(out.unwrap_err().contains("ended without a response"));
        let (_, out, _) =
            replay(b"200 application/json\n{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}").await;
        assert!(out.unwrap_err().contains("does not match"));
    }
}
