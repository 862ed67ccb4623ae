//! Shared pieces of the comparison servers and the bench driver: a
//! `CLOCK_MONOTONIC` clock readable from both sides of a pipe, the handler
//! events (`START`, `DROPPED`, `DONE`, `TOKEN`), and the drop probe every
//! server's `slow` tool holds.
//!
//! Event lines (stderr of the stdio servers): `<KIND> <id as JSON> <ns>`,
//! the same shape as the example server's `--events` lines, but with
//! `CLOCK_MONOTONIC` nanoseconds so that the driver (another process) can
//! subtract its own readings.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::mpsc;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process on the
/// machine, unlike `Instant`, whose raw value is not exposed.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What happened to a handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The handler future started running.
    Start,
    /// The handler future was dropped before it finished.
    Dropped,
    /// The handler future ran to completion.
    Done,
    /// The request's cancellation token fired (seen by a watcher task).
    Token,
}

impl Kind {
    /// The word used on event lines.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Start => "START",
            Kind::Dropped => "DROPPED",
            Kind::Done => "DONE",
            Kind::Token => "TOKEN",
        }
    }

    /// Parses the word of an event line.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "START" => Kind::Start,
            "DROPPED" => Kind::Dropped,
            "DONE" => Kind::Done,
            "TOKEN" => Kind::Token,
            _ => return None,
        })
    }
}

/// One handler event: kind, request id (as JSON text), monotonic ns.
#[derive(Clone, Debug)]
pub struct Event {
    /// What happened.
    pub kind: Kind,
    /// The request id as JSON text (`7`, `"a"`).
    pub id: String,
    /// [`mono_ns`] when it happened.
    pub ns: u64,
}

impl Event {
    /// Parses `<KIND> <id> <ns>`.
    pub fn parse(line: &str) -> Option<Self> {
        let mut it = line.split_whitespace();
        let kind = Kind::parse(it.next()?)?;
        let id = it.next()?.to_owned();
        let ns = it.next()?.parse().ok()?;
        Some(Event { kind, id, ns })
    }
}

static SINK: OnceLock<mpsc::UnboundedSender<Event>> = OnceLock::new();

/// Sends this process's events to a channel instead of stderr (for servers
/// run in the bench process itself). Call once, before any event.
pub fn capture_events() -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    SINK.set(tx).expect("capture_events called twice");
    rx
}

/// Records one event: to the channel of [`capture_events`], else to stderr.
pub fn emit(kind: Kind, id: &str) {
    let ns = mono_ns();
    match SINK.get() {
        Some(tx) => {
            let _ = tx.send(Event {
                kind,
                id: id.to_owned(),
                ns,
            });
        }
        None => eprintln!("{} {id} {ns}", kind.word()),
    }
}

/// Held by a handler future: `START` when made, `DONE` on [`Probe::finish`],
/// `DROPPED` if it is dropped unfinished.
pub struct Probe {
    id: String,
    done: bool,
}

impl Probe {
    /// Starts watching the handler of request `id` (JSON text).
    pub fn start(id: String) -> Self {
        emit(Kind::Start, &id);
        Probe { id, done: false }
    }

    /// The handler finished.
    pub fn finish(mut self) {
        self.done = true;
        emit(Kind::Done, &self.id);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.done {
            emit(Kind::Dropped, &self.id);
        }
    }
}

/// Spawns a task that reports `TOKEN` when `token` fires. It never stops
/// the handler: the `slow` tools never look at their token themselves.
pub fn watch_token(id: String, token: tokio_util::sync::CancellationToken) {
    watch(id, async move { token.cancelled_owned().await });
}

/// [`watch_token`] for an SDK's own token type: reports `TOKEN` when
/// `fired` completes.
pub fn watch<F>(id: String, fired: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        fired.await;
        emit(Kind::Token, &id);
    });
}

/// `seconds` and `interval_ms` of a `slow` call → (steps, step length), the
/// same arithmetic as the example server.
pub fn steps_of(args: &serde_json::Value) -> (u64, Duration) {
    let seconds = args["seconds"]
        .as_f64()
        .unwrap_or(10.0)
        .clamp(0.0, 86_400.0);
    let interval_ms = args["interval_ms"]
        .as_f64()
        .unwrap_or(100.0)
        .clamp(1.0, 3_600_000.0);
    let steps = ((seconds * 1000.0) / interval_ms).ceil().max(1.0) as u64;
    (steps, Duration::from_secs_f64(interval_ms / 1000.0))
}

pub mod load;
pub mod ours;
#[cfg(feature = "peers")]
pub mod peer_rmcp;
#[cfg(feature = "peers")]
pub mod peer_tower_mcp;
