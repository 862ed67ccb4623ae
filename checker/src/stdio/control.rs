//! The burst's control run: when a server stops answering after a burst
//! of call+cancel pairs, a fresh server (the same command, the same era)
//! gets the same calls without their cancels. A server that dies of those
//! too dies of the load, not of the cancels, and the cancel rule is not
//! the one it broke.

use std::time::Duration;

use crate::mcp::Era;
use crate::report::{rules, Check};
use crate::session::Session;
use crate::tool::ToolSpec;
use crate::Config;

/// What the same calls, uncancelled, did to a fresh server.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Control {
    /// It still answered: the cancels are what the server did not survive.
    Survived,
    /// It stopped answering too (why): the load is what it did not survive.
    Died(String),
    /// No control run could be made (why).
    NotRun(String),
}

/// Starts `command` afresh in `era`, sends it `cfg.burst` calls of `slow`
/// at once, uncancelled, waits `window` (the burst's own watch), and asks
/// whether it still answers.
pub(super) async fn run(
    cfg: &Config,
    command: &[String],
    era: Era,
    slow: &ToolSpec,
    window: Duration,
) -> Control {
    cfg.say(&format!(
        "control run: {} calls of {slow} without cancels, on a fresh server",
        cfg.burst
    ));
    let s = match Session::start(command, Some(era), cfg.check_timeout).await {
        Ok(s) => s,
        Err(e) => return Control::NotRun(format!("a fresh server did not start: {e}")),
    };
    let calls: Vec<_> = (0..cfg.burst)
        .map(|_| s.open(s.request("tools/call", slow.params(), true).request))
        .collect();
    tokio::time::sleep(window).await;
    let control = match s.responsive(cfg.check_timeout).await {
        Ok(()) => Control::Survived,
        Err(e) => Control::Died(e),
    };
    for call in calls {
        call.abort();
    }
    s.close().await;
    control
}

/// `cancel.burst-healthy` for a server that stopped answering after the
/// burst (`failed`), judged by the control run.
pub(super) fn judge(failed: Check, control: Control, burst: usize) -> Check {
    let id = failed.id.clone();
    match control {
        Control::Survived => Check::fail(
            &id,
            rules::RACES,
            format!(
                "{}; a fresh server given the same {burst} calls without their cancels still answered: the cancels are what it did not survive",
                failed.detail
            ),
        ),
        Control::Died(why) => Check::skip(
            &id,
            rules::RACES,
            format!(
                "{}; but a fresh server given the same {burst} calls without any cancel stopped answering too ({why}): the load, not the cancels",
                failed.detail
            ),
        ),
        Control::NotRun(why) => Check::fail(
            &id,
            rules::RACES,
            format!("{}; no control run ({why})", failed.detail),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    #[test]
    fn a_crash_the_uncancelled_calls_cause_too_is_not_the_cancels() {
        let failed = Check::fail("cancel.burst-healthy", rules::RACES, "gone");
        let load = judge(failed.clone(), Control::Died("exited".into()), 20);
        assert_eq!(load.outcome, Outcome::Skip);
        assert!(
            load.detail.contains("the load, not the cancels"),
            "{}",
            load.detail
        );
        let cancels = judge(failed, Control::Survived, 20);
        assert_eq!(cancels.outcome, Outcome::Fail);
        assert!(
            cancels.detail.contains("the cancels are what"),
            "{}",
            cancels.detail
        );
    }
}
