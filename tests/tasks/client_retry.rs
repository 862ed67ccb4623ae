//! The task client keeps polling through transient failures (tasks.md §
//! Task Polling: poll until the task is terminal): a failed `tasks/get` or
//! `tasks/update` that may succeed when sent again is retried with
//! backoff; only the caller's drop, its timer or the retries running out
//! cancel the task. What is not transient fails the call at once.

use std::time::Duration;

use serde_json::json;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::error::Elapsed;
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::TaskCallLayer;
use tower_mcp_cancel::transport::http::HttpClientError;
use tower_mcp_cancel::TimeoutLayer;

use crate::mock::{call, completed, created, got, rpc_error, Mock};

fn status(code: u16) -> BoxError {
    Box::new(HttpClientError::Status {
        status: http::StatusCode::from_u16(code).unwrap(),
        body: "bad gateway".into(),
    })
}

/// The errors a poll may meet that sending it again may cure.
fn transient() -> Vec<(&'static str, BoxError)> {
    vec![
        ("-32603", rpc_error(ErrorObject::INTERNAL_ERROR)),
        ("HTTP 502", status(502)),
        ("HTTP 503", status(503)),
        ("HTTP 504", status(504)),
        ("stream ended", Box::new(HttpClientError::StreamEnded)),
        (
            "connection refused",
            Box::new(HttpClientError::ConnectionRefused {
                target: "localhost:1".into(),
                detail: "refused".into(),
            }),
        ),
        (
            "connection reset",
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_poll_that_fails_once_is_retried_and_the_task_is_not_cancelled() {
    for (what, error) in transient() {
        let mock = Mock::new();
        mock.then("tools/call", Ok(created("t1")))
            .then("tasks/get", Err(error))
            .then("tasks/get", Ok(completed("t1")));
        let layer = TaskCallLayer::new();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mock.service());
        let out = client.oneshot(call()).await;
        let out = out.unwrap_or_else(|e| panic!("{what}: the call failed: {e}"));
        assert_eq!(out["content"][0]["text"], "done", "{what}");
        layer.cancels_sent().await;
        let gets = mock.calls("tasks/get");
        assert_eq!(gets.len(), 2, "{what}: polled again");
        // At the task's interval (100 ms), then after twice that.
        assert_eq!(gets[0].at, Duration::from_millis(100), "{what}");
        assert_eq!(gets[1].at, Duration::from_millis(300), "{what}: backoff");
        assert!(
            mock.calls("tasks/cancel").is_empty(),
            "{what}: not cancelled"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_unknown_task_fails_the_call_at_once_without_a_cancel() {
    let mock = Mock::new();
    mock.then("tools/call", Ok(created("t1")))
        .then("tasks/get", Err(rpc_error(ErrorObject::INVALID_PARAMS)));
    let layer = TaskCallLayer::new();
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(mock.service());
    let err = client.oneshot(call()).await.unwrap_err();
    let e = err.downcast_ref::<ErrorObject>().expect("a JSON-RPC error");
    assert_eq!(e.code, ErrorObject::INVALID_PARAMS);
    assert!(e.message.contains("t1"), "names the task: {}", e.message);
    layer.cancels_sent().await;
    assert_eq!(mock.calls("tasks/get").len(), 1, "not retried");
    assert!(
        mock.calls("tasks/cancel").is_empty(),
        "the server says the task is gone: nothing to cancel"
    );
}

#[tokio::test(start_paused = true)]
async fn errors_that_are_not_transient_fail_the_call_at_once_and_cancel() {
    let cases: Vec<(&str, BoxError)> = vec![
        (
            "-32021",
            rpc_error(ErrorObject::MISSING_REQUIRED_CLIENT_CAPABILITY),
        ),
        ("-32601", rpc_error(ErrorObject::METHOD_NOT_FOUND)),
        ("HTTP 400", status(400)),
        (
            "too large",
            Box::new(HttpClientError::ResponseTooLarge { limit: 10 }),
        ),
        (
            "closed stdio pipe",
            Box::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        ),
    ];
    for (what, error) in cases {
        let mock = Mock::new();
        mock.then("tools/call", Ok(created("t1")))
            .then("tasks/get", Err(error));
        let layer = TaskCallLayer::new();
        let client = ServiceBuilder::new()
            .layer(layer.clone())
            .service(mock.service());
        client.oneshot(call()).await.unwrap_err();
        layer.cancels_sent().await;
        assert_eq!(mock.calls("tasks/get").len(), 1, "{what}: not retried");
        assert_eq!(mock.calls("tasks/cancel").len(), 1, "{what}: cancelled");
    }
}

#[tokio::test(start_paused = true)]
async fn a_tasks_update_that_fails_once_is_sent_again() {
    let mock = Mock::new();
    let ask = json!({"name": {"method": "elicitation/create", "params": {"message": "name?"}}});
    mock.then("tools/call", Ok(created("t1")))
        .then(
            "tasks/get",
            Ok(got("t1", "input_required", json!({"inputRequests": ask}))),
        )
        .then("tasks/update", Err(status(503)))
        .then("tasks/update", Ok(json!({"resultType": "complete"})))
        .then("tasks/get", Ok(completed("t1")));
    let layer = TaskCallLayer::new().on_input(|_requests| async move {
        let mut answers = serde_json::Map::new();
        answers.insert(
            "name".into(),
            json!({"action": "accept", "content": {"name": "Luca"}}),
        );
        answers
    });
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(mock.service());
    let out = client.oneshot(call()).await.unwrap();
    assert_eq!(out["content"][0]["text"], "done");
    let updates = mock.calls("tasks/update");
    assert_eq!(updates.len(), 2, "sent again");
    assert_eq!(
        updates[0].params["inputResponses"],
        updates[1].params["inputResponses"]
    );
    assert_eq!(
        updates[1].params["inputResponses"]["name"]["content"]["name"],
        "Luca"
    );
    layer.cancels_sent().await;
    assert!(mock.calls("tasks/cancel").is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_callers_timeout_still_ends_a_call_that_keeps_retrying() {
    let mock = Mock::new();
    mock.then("tools/call", Ok(created("t1")));
    for _ in 0..50 {
        mock.then("tasks/get", Err(rpc_error(ErrorObject::INTERNAL_ERROR)));
    }
    let layer = TaskCallLayer::new();
    let mut client = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(1)))
        .layer(layer.clone())
        .service(mock.service());
    let start = tokio::time::Instant::now();
    let err = client
        .ready()
        .await
        .unwrap()
        .call(call())
        .await
        .unwrap_err();
    assert!(
        err.downcast_ref::<Elapsed>().is_some(),
        "the timer's error: {err}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    layer.cancels_sent().await;
    assert_eq!(mock.calls("tasks/cancel").len(), 1, "the drop cancels");
}
