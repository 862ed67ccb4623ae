//! A stdio server under test: the child process (in a process group of its
//! own), the crate's `StdioClient` talking to it through two relays that log
//! every line (the [`Log`]), and the handshake of its era.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tower::{BoxError, ServiceExt};
use tower_mcp_cancel::jsonrpc::ErrorObject;
use tower_mcp_cancel::transport::stdio::StdioClient;
use tower_mcp_cancel::{CancelReason, Cancellation, McpRequest};

use crate::mcp::{self, Era};
use crate::report::{short, RunError};
use crate::wire::{Dir, Entry, Log};

/// How long the era probe (`server/discover`) may take before the
/// `initialize` handshake is tried.
const PROBE: Duration = Duration::from_secs(10);

/// A running stdio server and the client talking to it.
#[derive(Debug)]
pub(crate) struct Session {
    client: StdioClient,
    pub(crate) log: Log,
    child: Child,
    /// The relay of the child's stdout: it ends when that output does.
    output: tokio::task::JoinHandle<()>,
    /// The child's process id (for its CPU time and memory).
    pub(crate) pid: Option<u32>,
    /// The era it speaks.
    pub(crate) era: Era,
    /// The capabilities it declared.
    pub(crate) capabilities: Value,
    next: AtomicU64,
}

/// A request the checker sent, with the names it finds it by on the wire.
#[derive(Debug)]
pub(crate) struct Sent {
    /// Its id.
    pub(crate) id: Value,
    /// Its progress token.
    pub(crate) token: Option<Value>,
    /// The request.
    pub(crate) request: McpRequest,
}

/// When to cancel a call.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Trigger {
    /// As soon as the request was written: the cancel right behind it.
    Written,
    /// At its first progress, or after this long without any.
    FirstProgressOr(Duration),
    /// After this long.
    After(Duration),
}

/// A call the checker cancelled (or that ended before it could).
#[derive(Debug)]
pub(crate) struct CancelledCall {
    /// The request's id.
    pub(crate) id: Value,
    /// Its progress token.
    pub(crate) token: Option<Value>,
    /// When its `notifications/cancelled` went out.
    pub(crate) cancelled: Option<Instant>,
    /// How it ended on its own, when it did before the cancel.
    pub(crate) ended_first: Option<String>,
}

impl Session {
    /// Starts `command` and finds its era: `server/discover` (2026-07-28),
    /// else the `initialize` handshake; `era` forces one.
    pub(crate) async fn start(
        command: &[String],
        era: Option<Era>,
        bound: Duration,
    ) -> Result<Self, RunError> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| RunError::Usage("no server command".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        // A group of its own: a terminal's Ctrl-C stops the checker, which
        // then ends the server, not the server in the middle of a check.
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| RunError::Usage(format!("cannot start {program:?}: {e}")))?;
        let pid = child.id();
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => return Err("the child's stdin/stdout are not piped".to_owned().into()),
        };
        let log = Log::new();
        let (client_end, relay_end) = tokio::io::duplex(1 << 16);
        let (client_read, client_write) = tokio::io::split(client_end);
        let (relay_read, relay_write) = tokio::io::split(relay_end);
        tokio::spawn(log.clone().relay(Dir::Out, relay_read, stdin));
        let output = tokio::spawn(log.clone().relay(Dir::In, stdout, relay_write));
        let client = StdioClient::builder()
            .shutdown_grace(Duration::from_secs(2))
            .connect(client_read, client_write);
        let mut session = Self {
            client,
            log,
            child,
            output,
            pid,
            era: Era::Modern,
            capabilities: Value::Null,
            next: AtomicU64::new(1),
        };
        session.handshake(era, bound).await?;
        Ok(session)
    }

    async fn handshake(&mut self, era: Option<Era>, bound: Duration) -> Result<(), String> {
        if era == Some(Era::Legacy) {
            return self.initialize(bound).await;
        }
        let probe = self.request("server/discover", json!({}), false);
        let probed =
            tokio::time::timeout(PROBE.min(bound), self.client.clone().oneshot(probe.request))
                .await;
        match probed {
            Ok(Ok(r)) if mcp::speaks_modern(&r) => {
                self.capabilities = r["capabilities"].clone();
                return Ok(());
            }
            Ok(Err(e)) => match e.downcast_ref::<ErrorObject>() {
                Some(o) if mcp::is_modern_error(o) => {
                    return Err(format!("server/discover refused: {o}"))
                }
                Some(_) => {}
                None => return Err(format!("the server did not answer server/discover: {e}")),
            },
            // No answer in time, an odd one, or versions without 2026-07-28:
            // the 2025 handshake, then.
            Ok(Ok(_)) | Err(_) => {}
        }
        if era == Some(Era::Modern) {
            return Err("the server does not answer server/discover as a 2026-07-28 server".into());
        }
        self.initialize(bound).await
    }

    /// The 2025 handshake: `initialize`, then `notifications/initialized`.
    async fn initialize(&mut self, bound: Duration) -> Result<(), String> {
        self.era = Era::Legacy;
        let init = self.request("initialize", mcp::initialize_params(), false);
        let answer = tokio::time::timeout(bound, self.client.clone().oneshot(init.request))
            .await
            .map_err(|_| "no answer to server/discover nor to initialize".to_owned())?
            .map_err(|e| format!("initialize failed: {e}"))?;
        self.capabilities = answer["capabilities"].clone();
        self.client
            .notify("notifications/initialized", &json!({}))
            .map_err(|e| format!("cannot send notifications/initialized: {e}"))
    }

    /// Whether the connection is gone (the server exited, or closed its output).
    pub(crate) fn gone(&self) -> bool {
        self.client.is_closed()
    }

    /// Whether the server declared the tools capability.
    pub(crate) fn has_tools(&self) -> bool {
        self.capabilities.get("tools").is_some()
    }

    /// A request with an id of the checker's own (and a progress token when
    /// `progress`), with the era's `_meta`.
    pub(crate) fn request(&self, method: &str, params: Value, progress: bool) -> Sent {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("mcc-{n}");
        let token = progress.then(|| format!("mcc-progress-{n}"));
        let params = mcp::params(self.era, params, token.as_deref());
        Sent {
            id: Value::from(id.clone()),
            token: token.map(Value::from),
            request: McpRequest::new(id, method).with_params(params),
        }
    }

    /// Sends a notification as it is (a cancel the checker makes up).
    pub(crate) fn notify(&self, method: &str, params: &Value) -> Result<(), BoxError> {
        self.client.notify(method, params)
    }

    /// Sends `request` and waits for its answer.
    pub(crate) async fn call(&self, request: McpRequest) -> Result<Value, BoxError> {
        self.client.clone().oneshot(request).await
    }

    /// Sends `request` on a task of its own, which holds it open until it
    /// is answered or the connection ends: a long-lived request (a
    /// `subscriptions/listen`) the checker must not cancel by dropping it.
    pub(crate) fn open(&self, request: McpRequest) -> tokio::task::JoinHandle<()> {
        let client = self.client.clone();
        tokio::spawn(async move {
            let _ = client.oneshot(request).await;
        })
    }

    /// Sends SIGTERM to the server's process group (the shutdown a host
    /// asks of it while its stdin stays open); `false` where there is no
    /// process id or no signals (not Unix).
    pub(crate) fn terminate(&self) -> bool {
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            signal_group(pid, rustix::process::Signal::TERM);
            return true;
        }
        false
    }

    /// Whether the server's output ended (every line of it logged) within `bound`.
    pub(crate) async fn output_ended(&mut self, bound: Duration) -> bool {
        // A finished handle must not be awaited again.
        self.output.is_finished() || tokio::time::timeout(bound, &mut self.output).await.is_ok()
    }

    /// Whether the server answers a `ping` (with anything) within `bound`.
    pub(crate) async fn responsive(&self, bound: Duration) -> Result<(), String> {
        let ping = self.request("ping", json!({}), false);
        match tokio::time::timeout(bound, self.call(ping.request)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.is::<ErrorObject>() => Ok(()),
            Ok(Err(e)) => Err(format!("the server no longer answers: {e}")),
            Err(_) => Err(format!("no answer to a ping within {bound:?}")),
        }
    }

    /// Calls `params` (a `tools/call`'s) with a progress token and cancels
    /// it at `trigger` by dropping the call, as a caller that gives up
    /// does: the client writes `notifications/cancelled`.
    pub(crate) async fn cancel_call(
        &self,
        params: Value,
        trigger: Trigger,
        bound: Duration,
    ) -> CancelledCall {
        let sent = self.request("tools/call", params, true);
        let cancellation = Cancellation::new();
        let request = sent.request.with_cancellation(cancellation.clone());
        let (id, token) = (sent.id, sent.token);
        let start = Instant::now();
        let deadline = start + bound;
        let written = |e: &Entry| e.dir == Dir::Out && e.msg.get("id") == Some(&id);
        let mut call = Box::pin(self.call(request));
        let log = &self.log;
        let trigger = async {
            match trigger {
                Trigger::Written => {
                    log.wait_for(deadline, written).await;
                }
                Trigger::FirstProgressOr(wait) => {
                    let until = (start + wait).min(deadline);
                    log.wait_for(until, |e| {
                        e.progress().is_some_and(|(t, _)| Some(t) == token.as_ref())
                    })
                    .await;
                }
                Trigger::After(wait) => tokio::time::sleep(wait.min(bound)).await,
            }
        };
        let ended_first = tokio::select! {
            r = &mut call => Some(match r {
                Ok(v) => format!("it answered before the cancel: {}", short(&v)),
                Err(e) => format!("it ended before the cancel: {e}"),
            }),
            () = trigger => None,
        };
        let mut cancelled = None;
        if ended_first.is_none() {
            cancellation.cancel(CancelReason::Other(mcp::REASON.into()));
            drop(call);
            let cancel_deadline = Instant::now() + Duration::from_secs(5);
            cancelled = self
                .log
                .wait_for(cancel_deadline, |e| {
                    e.dir == Dir::Out
                        && e.method() == Some("notifications/cancelled")
                        && e.msg["params"]["requestId"] == id
                })
                .await
                .map(|e| e.at);
        }
        CancelledCall {
            id,
            token,
            cancelled,
            ended_first,
        }
    }

    /// Ends the session: the server's stdin is closed (the stdio transport's
    /// shutdown); it gets four seconds to exit. Then its process group (on
    /// Unix: the group it was started in, with whatever it started, such as
    /// the real server behind a launcher) gets SIGTERM, and two seconds
    /// later whatever is left is killed.
    pub(crate) async fn close(mut self) {
        let _ = self.client.shutdown().await;
        let exited = tokio::time::timeout(Duration::from_secs(4), self.child.wait())
            .await
            .is_ok();
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            signal_group(pid, rustix::process::Signal::TERM);
        }
        if !exited
            && tokio::time::timeout(Duration::from_secs(2), self.child.wait())
                .await
                .is_err()
        {
            #[cfg(unix)]
            if let Some(pid) = self.pid {
                signal_group(pid, rustix::process::Signal::KILL);
            }
            let _ = self.child.kill().await;
        }
    }
}

impl crate::tasks::Peer for Session {
    async fn send(&self, method: &str, params: Value, bound: Duration) -> crate::tasks::Answer {
        let sent = self.request(method, params, false);
        let answer = tokio::time::timeout(bound, self.call(sent.request)).await;
        crate::tasks::Answer::of(answer.ok(), bound)
    }

    fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// No headers over stdio.
    async fn name_header(
        &self,
        _: &crate::Config,
        _: Result<&str, &str>,
    ) -> Option<crate::report::Check> {
        None
    }
}

/// Sends `signal` to the process group `pid` leads (the server's, started
/// with `process_group(0)`); a group that is gone is no error.
#[cfg(unix)]
fn signal_group(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}
