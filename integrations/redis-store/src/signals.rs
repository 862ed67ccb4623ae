//! Signals to a task's owner: a message on the owner's channel (at most
//! once; `SPUBLISH` on a cluster), and the owner's periodic re-read of its live tasks and their
//! inboxes (which finds what a lost message carried), with the refresh of
//! its lease.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use redis::AsyncCommands;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tower_mcp_cancel::tasks::{StoreError, TaskRecord, TaskSignal};

use crate::conn::{bounded, millis, Subscription};
use crate::store::RedisStore;

const CANCEL: &str = "c:";
const INPUT: &str = "i:";

impl RedisStore {
    /// Sends `signal` to `owner`: a cancel is a message (the record, ended
    /// already, is what a re-read finds); input answers go to the task's
    /// inbox first, then a message says so.
    pub(crate) async fn signal(&self, owner: &str, signal: TaskSignal) -> Result<(), StoreError> {
        let settings = &self.shared.settings;
        let mut conn = self.conn();
        let channel = self.channel(owner);
        match signal {
            TaskSignal::Cancel { id } => {
                bounded(
                    settings.timeout,
                    conn.publish(&channel, format!("{CANCEL}{id}")),
                )
                .await
            }
            TaskSignal::Input { id, answers } => {
                let inbox = self.inbox_key(&id);
                let mut pipe = redis::pipe();
                pipe.atomic();
                for (key, answer) in &answers {
                    pipe.hset(&inbox, key, answer.to_string()).ignore();
                }
                let keep = millis(settings.backstop.max(settings.lease));
                pipe.pexpire(&inbox, keep.cast_signed()).ignore();
                let message = format!("{INPUT}{id}");
                if !settings.tagged {
                    // One node: the message in the inbox's MULTI.
                    pipe.publish(channel, message).ignore();
                    return bounded(settings.timeout, pipe.exec_async(&mut conn)).await;
                }
                // A cluster: the inbox (in the task's slot), then the
                // message (in the owner's). The answers are stored once
                // the first part is: a lost message costs a re-read.
                bounded(settings.timeout, pipe.exec_async(&mut conn)).await?;
                if let Err(e) = bounded(settings.timeout, conn.publish(&channel, message)).await {
                    tracing::debug!(error = %e, "task signals: input message not sent; the re-read takes it");
                }
                Ok(())
            }
            // A signal this store does not know has nothing to carry.
            _ => Ok(()),
        }
    }

    /// Takes the answers in task `id`'s inbox (read and emptied at once).
    async fn take_inbox(&self, id: &str) -> Result<Option<TaskSignal>, StoreError> {
        let inbox = self.inbox_key(id);
        let mut pipe = redis::pipe();
        pipe.atomic().hgetall(&inbox).del(&inbox).ignore();
        let mut conn = self.conn();
        let (raw,): (Vec<(String, String)>,) =
            bounded(self.shared.settings.timeout, pipe.query_async(&mut conn)).await?;
        Ok(input(id.to_owned(), raw))
    }

    /// Refreshes `owner`'s lease, then re-reads its live tasks: an ended
    /// (or expired) record is a cancel, a non-empty inbox the answers.
    async fn tick(&self, owner: &str, out: &mut VecDeque<TaskSignal>) -> Result<(), StoreError> {
        let settings = &self.shared.settings;
        let mut conn = self.conn();
        let lease = millis(settings.lease);
        bounded(
            settings.timeout,
            conn.set_options::<_, _, ()>(
                self.lease_key(owner),
                1,
                redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(lease)),
            ),
        )
        .await?;
        let ids: Vec<String> = self
            .owned()
            .get(owner)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default();
        if ids.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = ids.iter().map(|id| self.record_key(id)).collect();
        let raws: Vec<Option<String>> = bounded(
            settings.timeout,
            redis::cmd("MGET").arg(&keys).query_async(&mut conn),
        )
        .await?;
        let mut live = Vec::new();
        for (id, raw) in ids.into_iter().zip(raws) {
            let ended = raw
                .and_then(|r| serde_json::from_str::<TaskRecord>(&r).ok())
                .is_none_or(|r| r.status.is_terminal());
            if ended {
                if let Some(owned) = self.owned().get_mut(owner) {
                    owned.remove(&id);
                }
                out.push_back(TaskSignal::Cancel { id });
            } else {
                live.push(id);
            }
        }
        // Every live task's inbox, each read and emptied at once (each in
        // its task's slot), all sent together on the multiplexed
        // connection.
        // Every answer taken is delivered, whatever another inbox's read
        // did (taken is emptied: dropping it would lose it).
        let inboxes =
            futures_util::future::join_all(live.iter().map(|id| self.take_inbox(id))).await;
        let mut failed = Ok(());
        for inbox in inboxes {
            match inbox {
                Ok(Some(input)) => out.push_back(input),
                Ok(None) => {}
                Err(e) => failed = Err(e),
            }
        }
        failed
    }

    async fn subscribe(&self, owner: &str) -> Result<Subscription, StoreError> {
        self.shared.subscriber.subscribe(&self.channel(owner)).await
    }
}

/// The answers read from task `id`'s inbox, if any (an unreadable one is
/// skipped: the client's answer came through this crate, as JSON).
fn input(id: String, raw: Vec<(String, String)>) -> Option<TaskSignal> {
    let answers: Map<String, Value> = raw
        .into_iter()
        .filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?)))
        .collect();
    (!answers.is_empty()).then_some(TaskSignal::Input { id, answers })
}

/// What the owner's stream keeps between two signals.
struct State {
    store: RedisStore,
    owner: String,
    messages: Option<Subscription>,
    due: VecDeque<TaskSignal>,
    next_tick: Instant,
    period: Duration,
}

/// The signals for `owner`: messages as they come, and every period the
/// lease refreshed and the live tasks re-read (a lost subscription is
/// re-made then, and the re-read finds what it missed).
pub(crate) fn stream(store: RedisStore, owner: String) -> BoxStream<'static, TaskSignal> {
    let settings = &store.shared.settings;
    let period = settings.reread.min(settings.lease / 3);
    let state = State {
        store,
        owner,
        messages: None,
        due: VecDeque::new(),
        next_tick: Instant::now(),
        period,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        let signal = s.next().await;
        Some((signal, s))
    })
    .boxed()
}

impl State {
    async fn next(&mut self) -> TaskSignal {
        loop {
            if let Some(signal) = self.due.pop_front() {
                return signal;
            }
            let message = async {
                match self.messages.as_mut() {
                    Some(m) => m.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = message => match msg {
                    Some(msg) => self.message(msg).await,
                    // The subscription is gone: re-made at the next tick.
                    None => self.messages = None,
                },
                () = tokio::time::sleep_until(self.next_tick) => {
                    self.next_tick = Instant::now() + self.period;
                    if self.messages.is_none() {
                        match self.store.subscribe(&self.owner).await {
                            Ok(m) => self.messages = Some(m),
                            Err(e) => tracing::debug!(error = %e, "task signals: not subscribed"),
                        }
                    }
                    if let Err(e) = self.store.tick(&self.owner, &mut self.due).await {
                        tracing::warn!(error = %e, "task signals: lease refresh or re-read failed");
                    }
                }
            }
        }
    }

    async fn message(&mut self, payload: String) {
        if let Some(id) = payload.strip_prefix(CANCEL) {
            self.due.push_back(TaskSignal::Cancel { id: id.to_owned() });
        } else if let Some(id) = payload.strip_prefix(INPUT) {
            match self.store.take_inbox(id).await {
                Ok(Some(input)) => self.due.push_back(input),
                Ok(None) => {}
                // The next re-read takes it.
                Err(e) => tracing::debug!(error = %e, "task signals: inbox not read"),
            }
        }
    }
}
