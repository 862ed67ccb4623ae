//! Progress a handler reports through `RequestContext`: only a value that
//! increases reaches the peer (progress.md: the value MUST increase with
//! each notification), on every stack: plain, under a
//! `ProgressResetLayer`, over stdio and over HTTP.

use serde_json::{json, Value};
use tower::{service_fn, BoxError, Service, ServiceBuilder, ServiceExt};
use tower_mcp_cancel::notify::RequestContext;
use tower_mcp_cancel::transport::stdio::StdioServer;
use tower_mcp_cancel::{McpRequest, ProgressResetLayer};

use crate::support::stdio::pipe;

/// What the handler reports, in order: a repeat, a decrease, a value that
/// is not a number, and the one that increases again.
const REPORTS: [f64; 5] = [5.0, 3.0, 3.0, f64::NAN, 6.0];
/// What must reach the peer of those.
const SENT: [f64; 2] = [5.0, 6.0];

/// Reports `REPORTS` and answers with what `progress` returned for each.
fn reporter() -> impl Service<McpRequest, Response = Value, Error = BoxError, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|req: McpRequest| async move {
        let ctx = RequestContext::of(&req);
        let mut sent = Vec::new();
        for p in REPORTS {
            sent.push(ctx.progress(p, Some(10.0), None).await);
        }
        Ok::<_, BoxError>(json!({ "resultType": "complete", "sent": sent }))
    })
}

/// Serves `svc` over stdio, calls it once with a progress token, and returns
/// the progress values on the wire and the answer.
async fn over_stdio<S>(svc: S) -> (Vec<Value>, Value)
where
    S: Service<McpRequest, Response = Value, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let (mut peer, r, w) = pipe(64 * 1024);
    let served = tokio::spawn(StdioServer::new().serve(svc, r, w));
    peer.request(
        json!(1),
        "tools/call",
        json!({"name": "report", "_meta": {"progressToken": "t"}}),
    )
    .await;
    let mut lines = peer.until_response(json!(1)).await;
    let answer = lines.pop().unwrap();
    let progress = lines
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .map(|v| v["params"]["progress"].clone())
        .collect();
    peer.close().await;
    served.await.unwrap().unwrap();
    (progress, answer)
}

fn assert_only_increases_sent(progress: Vec<Value>, answer: &Value) {
    assert_eq!(progress, SENT.map(|p| json!(p)), "progress on the wire");
    assert_eq!(
        answer["result"]["sent"],
        json!([true, false, false, false, true]),
        "what progress returned: {answer}"
    );
}

#[tokio::test]
async fn progress_must_increase_on_a_plain_stdio_stack() {
    let (progress, answer) = over_stdio(reporter()).await;
    assert_only_increases_sent(progress, &answer);
}

#[tokio::test]
async fn progress_must_increase_under_a_progress_reset_layer() {
    let svc = ServiceBuilder::new()
        .layer(ProgressResetLayer::new(std::time::Duration::from_secs(60)))
        .service(reporter());
    let (progress, answer) = over_stdio(svc).await;
    assert_only_increases_sent(progress, &answer);
}

#[tokio::test]
async fn progress_must_increase_on_a_plain_http_stack() {
    use http_body_util::BodyExt;
    use tower_mcp_cancel::transport::http::StreamableHttpService;

    let svc = tower::Layer::layer(&StreamableHttpService::new(()), reporter());
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "report",
            "_meta": {
                "progressToken": "t",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    let req = http::Request::post("http://127.0.0.1/mcp")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "report")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&body).unwrap(),
        )))
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    let text = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    let messages: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let (answer, progress): (Vec<_>, Vec<_>) =
        messages.into_iter().partition(|v| v.get("id").is_some());
    let progress = progress
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .map(|v| v["params"]["progress"].clone())
        .collect();
    assert_eq!(answer.len(), 1, "{text}");
    assert_only_increases_sent(progress, &answer[0]);
}

/// `notifications/progress` sent as any notification is progress all the
/// same: it must increase, and carry the request's own token.
#[tokio::test]
async fn progress_sent_as_a_plain_notification_must_increase_too() {
    let svc = service_fn(|req: McpRequest| async move {
        let ctx = RequestContext::of(&req);
        let mut sent = Vec::new();
        for (token, p) in [("t", 5.0), ("t", 3.0), ("other", 9.0), ("t", 6.0)] {
            let params = json!({"progressToken": token, "progress": p});
            sent.push(ctx.notify("notifications/progress", &params).await);
        }
        let _ = ctx.progress(6.0, None, None).await;
        sent.push(ctx.progress(6.0, None, None).await);
        Ok::<_, BoxError>(json!({ "resultType": "complete", "sent": sent }))
    });
    let (progress, answer) = over_stdio(svc).await;
    assert_eq!(
        progress,
        vec![json!(5.0), json!(6.0)],
        "progress on the wire"
    );
    assert_eq!(
        answer["result"]["sent"],
        json!([true, false, false, true, false]),
        "{answer}"
    );
}
