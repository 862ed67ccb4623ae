//! The child process of a spawned [`StdioClient`](super::StdioClient): its
//! shutdown (EOF on stdin, then SIGTERM, then SIGKILL, each after the grace
//! period), also when the last clone of the client is dropped.

use std::io;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::mpsc;

use super::tasks::Queued;

pub(super) struct Handle {
    pub(super) requests: mpsc::Sender<Queued>,
    pub(super) child: Mutex<Option<Child>>,
    pub(super) grace: Duration,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut child) = child {
            // Our stdin end closes with the writer task; give the child its grace.
            let grace = self.grace;
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        let _ = reap(&mut child, grace).await;
                    });
                }
                Err(_) => {
                    let _ = child.start_kill();
                }
            }
        }
    }
}

/// The stdio transport's shutdown: stdin is already closed; wait `grace`
/// for the child to exit, then SIGTERM (Unix) and wait `grace` again, then
/// SIGKILL.
pub(super) async fn reap(child: &mut Child, grace: Duration) -> io::Result<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status;
    }
    let grace_ms = grace.as_millis() as u64;
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        tracing::warn!(
            grace_ms,
            "child did not exit after its stdin closed; sending SIGTERM"
        );
        match terminate(pid) {
            Ok(()) => {
                if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
                    return status;
                }
            }
            Err(e) => tracing::warn!(error = %e, "SIGTERM failed"),
        }
    }
    tracing::warn!(grace_ms, "child still running; killing it");
    child.kill().await?;
    child.wait().await
}

#[cfg(unix)]
fn terminate(pid: u32) -> io::Result<()> {
    use rustix::process::{kill_process, Pid, Signal};
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("child pid out of range"))?;
    kill_process(pid, Signal::TERM).map_err(io::Error::from)
}
