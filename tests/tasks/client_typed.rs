//! [`TaskClient`]: `tasks/*` by task id, typed, each declaring the
//! extension, each answer checked as the layer checks it.

use serde_json::{json, Map, Value};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::tasks::{
    declare_extension, InvalidTaskAnswer, KeepTaskHandle, TaskCallLayer, TaskClient, TaskStatus,
    EXTENSION,
};
use tower_mcp_cancel::McpRequest;

use crate::mock::{completed, got, rpc_error, Mock};

fn declared(params: &Value) -> bool {
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"][EXTENSION]
        .is_object()
}

#[tokio::test]
async fn get_update_and_cancel_are_typed_and_declare_the_extension() {
    let mock = Mock::new();
    let ask = json!({"name": {"method": "elicitation/create", "params": {}}});
    mock.then(
        "tasks/get",
        Ok(got(
            "t1",
            "input_required",
            json!({"inputRequests": ask, "statusMessage": "waiting"}),
        )),
    )
    .then("tasks/get", Ok(completed("t1")))
    .then(
        "tasks/get",
        Ok(got(
            "t1",
            "failed",
            json!({"error": {"code": -32000.0, "message": "boom"}}),
        )),
    )
    .then("tasks/update", Ok(json!({"resultType": "complete"})))
    .then("tasks/cancel", Ok(json!({"resultType": "complete"})));
    let mut tasks = TaskClient::new(mock.service());
    let task = tasks.get("t1").await.unwrap();
    assert_eq!(task.id, "t1");
    assert_eq!(task.status, TaskStatus::InputRequired);
    assert_eq!(task.status_message.as_deref(), Some("waiting"));
    assert_eq!(task.created_at, "2026-07-28T10:00:00Z");
    assert_eq!(
        (task.ttl_ms, task.poll_interval_ms),
        (Some(60_000), Some(100))
    );
    assert!(task.input_requests.contains_key("name"));
    assert_eq!((task.result, task.error), (None, None));
    let task = tasks.get("t1").await.unwrap();
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(task.result.unwrap()["content"][0]["text"], "done");
    let task = tasks.get("t1").await.unwrap();
    let error = task.error.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32000, "boom"));
    let mut answers = Map::new();
    answers.insert("name".into(), json!({"action": "accept"}));
    tasks.update("t1", answers).await.unwrap();
    tasks.cancel("t1").await.unwrap();
    let seen = mock.seen();
    assert_eq!(seen.len(), 5);
    for s in &seen {
        assert!(declared(&s.params), "{} declares: {}", s.method, s.params);
        assert_eq!(s.params["taskId"], "t1");
    }
    assert_eq!(seen[3].params["inputResponses"]["name"]["action"], "accept");
}

#[tokio::test]
async fn answers_are_checked_and_errors_passed_on() {
    let mock = Mock::new();
    mock.then("tasks/get", Ok(completed("t2")))
        .then("tasks/get", Ok(got("t1", "completed", json!({}))))
        .then("tasks/get", Err(rpc_error(ErrorObject::INVALID_PARAMS)))
        .then("tasks/cancel", Ok(json!("ok")))
        .then(
            "tasks/update",
            Ok(json!({"resultType": "task", "taskId": "t1"})),
        );
    let mut tasks = TaskClient::new(mock.service());
    let invalid = |e: BoxError| e.downcast_ref::<InvalidTaskAnswer>().is_some();
    assert!(invalid(tasks.get("t1").await.unwrap_err()), "another task");
    assert!(invalid(tasks.get("t1").await.unwrap_err()), "no result");
    let err = tasks.get("t1").await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<ErrorObject>().unwrap().code,
        ErrorObject::INVALID_PARAMS
    );
    assert!(
        invalid(tasks.cancel("t1").await.unwrap_err()),
        "not an object"
    );
    assert!(
        invalid(tasks.update("t1", Map::new()).await.unwrap_err()),
        "a task"
    );
}

#[tokio::test]
async fn a_kept_handle_is_followed_with_the_typed_client() {
    let (transport, handle, _probes) = crate::calls::server();
    let mut client = ServiceBuilder::new()
        .layer(TaskCallLayer::new())
        .service(transport);
    let req = McpRequest::without_id("tools/call")
        .with_params(json!({"name": "sleep", "arguments": {"ms": 60_000}}))
        .with_extension(KeepTaskHandle);
    let created = client.ready().await.unwrap().call(req).await.unwrap();
    let id = created["taskId"].as_str().unwrap().to_owned();
    let mut tasks = TaskClient::new(client);
    assert_eq!(tasks.get(&id).await.unwrap().status, TaskStatus::Working);
    tasks.cancel(&id).await.unwrap();
    handle.drained().await;
    assert_eq!(tasks.get(&id).await.unwrap().status, TaskStatus::Cancelled);
}

#[test]
fn declare_extension_keeps_what_the_request_says() {
    let mut req = McpRequest::new(1, "tools/call").with_params(json!({
        "name": "t",
        "_meta": {
            "progressToken": 7,
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "extensions": {"x/y": {"a": 1}}}
        }
    }));
    declare_extension(&mut req).unwrap();
    let p: Value = req.params_as().unwrap();
    assert_eq!(p["name"], "t");
    assert_eq!(p["_meta"]["progressToken"], 7);
    let caps = &p["_meta"]["io.modelcontextprotocol/clientCapabilities"];
    assert_eq!(caps["sampling"], json!({}));
    assert_eq!(caps["extensions"]["x/y"], json!({"a": 1}));
    assert!(declared(&p));
    // Absent params become an object; params that are not one are refused
    // and left as they were.
    let mut req = McpRequest::new(1, "tasks/get");
    declare_extension(&mut req).unwrap();
    assert!(declared(&req.params_as().unwrap()));
    let mut req = McpRequest::new(1, "tasks/get").with_params(json!([1]));
    let err = declare_extension(&mut req).unwrap_err();
    assert_eq!(err.code, ErrorObject::INVALID_PARAMS);
    assert_eq!(req.params_as::<Value>().unwrap(), json!([1]));
}
