//! Hearing the Sentinels announce a failover (`+switch-master` on their
//! pub/sub): a store through Sentinel stops writing to the old primary as
//! soon as they name the new one, not only once the old one is demoted
//! (the Sentinels' next look at it, seconds later), which would lose
//! every write it took meanwhile.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::Client;
use tokio::sync::watch;

/// What a switch of the watched primary calls.
pub(crate) type OnSwitch = Arc<dyn Fn() + Send + Sync>;

/// Listens, on each Sentinel of `sentinels`, for the switches of `master`,
/// calling `on_switch` for each; until `stop`'s sender is dropped. A
/// listener whose Sentinel is away tries again every `timeout`.
pub(crate) fn follow_switches(
    sentinels: &[String],
    master: &str,
    timeout: Duration,
    stop: &watch::Receiver<()>,
    on_switch: &OnSwitch,
) {
    for url in sentinels {
        // An invalid URL was refused before (the Sentinel client's build).
        let Ok(client) = Client::open(url.as_str()) else {
            continue;
        };
        tokio::spawn(listen(
            client,
            master.to_owned(),
            timeout,
            stop.clone(),
            on_switch.clone(),
        ));
    }
}

async fn listen(
    client: Client,
    master: String,
    timeout: Duration,
    mut stop: watch::Receiver<()>,
    on_switch: OnSwitch,
) {
    loop {
        let heard = async {
            let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, client.get_async_pubsub()).await
            else {
                return;
            };
            let subscribed = tokio::time::timeout(timeout, pubsub.subscribe("+switch-master"));
            if !matches!(subscribed.await, Ok(Ok(()))) {
                return;
            }
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                // `<name> <old ip> <old port> <new ip> <new port>`.
                let Ok(payload) = message.get_payload::<String>() else {
                    continue;
                };
                if payload.split(' ').next() == Some(master.as_str()) {
                    on_switch();
                }
            }
        };
        // The store gone (the sender dropped): the listener ends.
        tokio::select! {
            () = heard => {}
            _ = stop.changed() => return,
        }
        // The Sentinel away or the subscription lost: again after a while.
        tokio::select! {
            () = tokio::time::sleep(timeout) => {}
            _ = stop.changed() => return,
        }
    }
}
