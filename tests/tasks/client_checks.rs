//! The task client trusts only what it asked for: each `tasks/get` answer
//! is checked (the task polled, a known status, the fields that status
//! requires, integers where the schema has integers) before it becomes the
//! call's result, and so is the `CreateTaskResult`. A mismatch fails the
//! call at once (it is not retried) and cancels the task.

use std::time::Duration;

use serde_json::{json, Value};
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::TaskCallLayer;

use crate::mock::{call, completed, created, got, with, without, Mock};

/// Runs a call whose `CreateTaskResult` is `create` and whose polls are
/// answered by `gets`; its outcome, and the transport.
async fn run(create: Value, gets: Vec<Value>) -> (Result<Value, BoxError>, Mock) {
    let mock = Mock::new();
    mock.then("tools/call", Ok(create));
    for g in gets {
        mock.then("tasks/get", Ok(g));
    }
    let layer = TaskCallLayer::new();
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .service(mock.service());
    let out = client.oneshot(call()).await;
    layer.cancels_sent().await;
    (out, mock)
}

/// The call failed on an invalid answer: at once, with an error that says
/// so, and the task was cancelled (when the answer named it).
fn assert_refused(out: Result<Value, BoxError>, mock: &Mock, gets: usize, what: &str) {
    let cancels = usize::from(!what.starts_with("taskId"));
    let err = match out {
        Ok(v) => panic!("{what}: accepted: {v}"),
        Err(e) => e,
    };
    assert!(
        err.downcast_ref::<tower_mcp_cancel::tasks::InvalidTaskAnswer>()
            .is_some(),
        "{what}: {err}"
    );
    assert!(err.to_string().contains("invalid"), "{what}: {err}");
    assert_eq!(mock.calls("tasks/get").len(), gets, "{what}: not retried");
    assert_eq!(
        mock.calls("tasks/cancel").len(),
        cancels,
        "{what}: cancelled"
    );
}

#[tokio::test(start_paused = true)]
async fn a_get_answer_that_is_not_the_tasks_own_is_refused() {
    let text = json!({"content": []});
    let cases = [
        ("another task", completed("t2")),
        ("no taskId", without(completed("t1"), "taskId")),
        (
            "an unknown status",
            got("t1", "done", json!({"result": text})),
        ),
        (
            "completed without its result",
            got("t1", "completed", json!({})),
        ),
        (
            "a result that is not an object",
            got("t1", "completed", json!({"result": "done"})),
        ),
        ("failed without its error", got("t1", "failed", json!({}))),
        (
            "an error without a code",
            got("t1", "failed", json!({"error": {"message": "x"}})),
        ),
        (
            "an error code that is not an integer",
            got(
                "t1",
                "failed",
                json!({"error": {"code": 1.5, "message": "x"}}),
            ),
        ),
        (
            "input_required without inputRequests",
            got("t1", "input_required", json!({})),
        ),
        (
            "inputRequests not an object",
            got("t1", "input_required", json!({"inputRequests": []})),
        ),
        (
            "pollIntervalMs a string",
            with(completed("t1"), json!({"pollIntervalMs": "500"})),
        ),
        (
            "pollIntervalMs negative",
            with(completed("t1"), json!({"pollIntervalMs": -1})),
        ),
        (
            "pollIntervalMs fractional",
            with(completed("t1"), json!({"pollIntervalMs": 0.5})),
        ),
        ("ttlMs absent", without(completed("t1"), "ttlMs")),
        (
            "ttlMs a string",
            with(completed("t1"), json!({"ttlMs": "1h"})),
        ),
        ("createdAt absent", without(completed("t1"), "createdAt")),
        (
            "statusMessage a number",
            with(completed("t1"), json!({"statusMessage": 7})),
        ),
    ];
    for (what, answer) in cases {
        let (out, mock) = run(created("t1"), vec![answer]).await;
        assert_refused(out, &mock, 1, what);
    }
}

#[tokio::test(start_paused = true)]
async fn a_create_task_result_is_checked_before_it_is_polled() {
    let cases = [
        ("taskId a number", with(created("t1"), json!({"taskId": 7}))),
        (
            "an unknown status",
            with(created("t1"), json!({"status": "queued"})),
        ),
        (
            "pollIntervalMs negative",
            with(created("t1"), json!({"pollIntervalMs": -100})),
        ),
        ("ttlMs absent", without(created("t1"), "ttlMs")),
        (
            "lastUpdatedAt absent",
            without(created("t1"), "lastUpdatedAt"),
        ),
    ];
    for (what, answer) in cases {
        let (out, mock) = run(answer, vec![completed("t1")]).await;
        assert_refused(out, &mock, 0, what);
    }
}

#[tokio::test(start_paused = true)]
async fn numbers_are_read_as_the_schema_types_them() {
    // An integral float is an integer.
    let (out, mock) = run(
        with(
            created("t1"),
            json!({"pollIntervalMs": 500.0, "ttlMs": 60000.0}),
        ),
        vec![completed("t1")],
    )
    .await;
    out.unwrap();
    assert_eq!(mock.calls("tasks/get")[0].at, Duration::from_millis(500));
    // ttlMs may be null (unlimited); a huge interval is held to the bound
    // (5 s), and so is an absent one.
    for interval in [json!(u64::MAX), json!(1e300), Value::Null] {
        let mut seed = with(created("t1"), json!({"ttlMs": null}));
        seed = match interval.is_null() {
            true => without(seed, "pollIntervalMs"),
            false => with(seed, json!({ "pollIntervalMs": interval })),
        };
        let (out, mock) = run(seed, vec![completed("t1")]).await;
        out.unwrap_or_else(|e| panic!("{interval}: {e}"));
        assert_eq!(
            mock.calls("tasks/get")[0].at,
            Duration::from_secs(5),
            "{interval}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_that_ended_is_not_cancelled() {
    let error = json!({"code": -32000, "message": "boom", "data": {"why": "x"}});
    let (out, mock) = run(
        created("t1"),
        vec![got("t1", "failed", json!({"error": error}))],
    )
    .await;
    let err = out.unwrap_err();
    let e = err.downcast_ref::<ErrorObject>().expect("the task's error");
    assert_eq!((e.code, e.message.as_str()), (-32000, "boom"));
    assert!(mock.calls("tasks/cancel").is_empty(), "a failed task ended");
    let (out, mock) = run(created("t1"), vec![got("t1", "cancelled", json!({}))]).await;
    assert!(out.unwrap_err().to_string().contains("cancelled"));
    assert!(
        mock.calls("tasks/cancel").is_empty(),
        "a cancelled task ended"
    );
}

#[tokio::test(start_paused = true)]
async fn a_create_task_result_that_already_ended_is_read_at_once() {
    // A CreateTaskResult carries no result: the client asks for it at once.
    let (out, mock) = run(
        with(created("t1"), json!({"status": "completed"})),
        vec![completed("t1")],
    )
    .await;
    assert_eq!(out.unwrap()["content"][0]["text"], "done");
    assert_eq!(mock.calls("tasks/get")[0].at, Duration::ZERO);
}
