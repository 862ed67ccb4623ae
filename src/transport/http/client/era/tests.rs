use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::super::{lock, HttpClient, Lease};
use super::*;

/// A server that takes connections and never answers: each request head
/// it reads is reported on the channel; it holds every connection.
async fn silent_server() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<()>) {
    let (addr, heads, _closed) = silent_server_closes().await;
    (addr, heads)
}

/// [`silent_server`], which also reports each connection the client
/// closed.
async fn silent_server_closes() -> (
    std::net::SocketAddr,
    mpsc::UnboundedReceiver<()>,
    mpsc::UnboundedReceiver<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, rx) = mpsc::unbounded_channel();
    let (closed, closed_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let (heads, closed) = (heads.clone(), closed.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => {
                            let _ = closed.send(());
                            return;
                        }
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        let _ = heads.send(());
                        buf.clear();
                    }
                }
            });
        }
    });
    (addr, rx, closed_rx)
}

fn session() -> Arc<Legacy> {
    Arc::new(Legacy {
        version: HeaderValue::from_static("2025-06-18"),
        session: Some(HeaderValue::from_static("s")),
    })
}

/// A `notifications/cancelled` POST the server never answers ends
/// after its timer (10 s), which gives its id and its place back.
#[tokio::test]
async fn a_cancel_post_the_server_never_answers_ends_after_its_timer() {
    let (addr, mut heads) = silent_server().await;
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let inner = &client.inner;
    let start = tokio::time::Instant::now();
    spawn_cancel(
        inner,
        &session(),
        Lease::fresh(inner),
        &CancelReason::Peer(None),
    );
    // Real time until the post is on the server, then the paused clock.
    tokio::time::timeout(Duration::from_secs(5), heads.recv())
        .await
        .expect("the post reached the server");
    tokio::time::pause();
    assert_eq!(lock(&inner.in_flight).len(), 1, "its id is still in flight");
    let all = inner
        .pending_cancels
        .acquire_many(MAX_PENDING_CANCELS as u32);
    let _all = tokio::time::timeout(2 * BACKGROUND_POST_TIMEOUT, all)
        .await
        .expect("the post ended after its timer")
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= BACKGROUND_POST_TIMEOUT && took < BACKGROUND_POST_TIMEOUT + Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(lock(&inner.in_flight).len(), 0, "its id was given back");
}

/// The `DELETE` a dropped client sends in the background gives up
/// after its timer (10 s) on a server that never answers: its
/// connection is closed then.
#[tokio::test]
async fn a_background_delete_the_server_never_answers_ends_after_its_timer() {
    let (addr, mut heads, mut closed) = silent_server_closes().await;
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    *client.inner.era.lock() = State::Legacy(session());
    let start = tokio::time::Instant::now();
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), heads.recv())
        .await
        .expect("the DELETE reached the server");
    tokio::time::pause();
    tokio::time::timeout(2 * BACKGROUND_POST_TIMEOUT, closed.recv())
        .await
        .expect("the DELETE gave up after its timer");
    let took = start.elapsed();
    assert!(
        took >= BACKGROUND_POST_TIMEOUT && took < BACKGROUND_POST_TIMEOUT + Duration::from_secs(5),
        "{took:?}"
    );
}

/// At most `MAX_PENDING_CANCELS` posts are under way: past that a
/// cancel is not sent, its id is given back at once, and no task is
/// spawned for it.
#[tokio::test]
async fn past_the_bound_a_cancel_is_not_sent_and_nothing_grows() {
    let (addr, mut heads) = silent_server().await;
    let client = HttpClient::new(format!("http://{addr}/mcp").parse().unwrap());
    let inner = &client.inner;
    let legacy = session();
    for _ in 0..MAX_PENDING_CANCELS {
        spawn_cancel(
            inner,
            &legacy,
            Lease::fresh(inner),
            &CancelReason::Peer(None),
        );
    }
    for _ in 0..MAX_PENDING_CANCELS {
        tokio::time::timeout(Duration::from_secs(5), heads.recv())
            .await
            .expect("each post reached the server");
    }
    assert_eq!(inner.pending_cancels.available_permits(), 0);
    assert_eq!(lock(&inner.in_flight).len(), MAX_PENDING_CANCELS);
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks = metrics.num_alive_tasks();

    spawn_cancel(
        inner,
        &legacy,
        Lease::fresh(inner),
        &CancelReason::Peer(None),
    );
    assert_eq!(
        metrics.num_alive_tasks(),
        tasks,
        "no task for the cancel past the bound"
    );
    assert_eq!(
        lock(&inner.in_flight).len(),
        MAX_PENDING_CANCELS,
        "its id was given back at once"
    );
    assert_eq!(inner.pending_cancels.available_permits(), 0);

    // Then every post ends by its timer, and the one past the bound was
    // never sent.
    tokio::time::pause();
    let all = inner
        .pending_cancels
        .acquire_many(MAX_PENDING_CANCELS as u32);
    let _all = tokio::time::timeout(2 * BACKGROUND_POST_TIMEOUT, all)
        .await
        .expect("the posts ended after their timer")
        .unwrap();
    assert_eq!(lock(&inner.in_flight).len(), 0);
    assert!(heads.try_recv().is_err(), "a post past the bound was sent");
}
