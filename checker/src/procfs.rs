//! A stdio server's CPU time and memory, from Linux's `/proc`: the evidence
//! that a cancelled request's work stopped, not only its messages. The
//! server's whole process tree counts (a launcher such as `npx` or `uv run`
//! runs the real server as its child). Elsewhere there is no `/proc`, and
//! the checks that need it are skipped.

use std::collections::HashMap;
use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, which
/// Linux fixes at 100 for user space on every architecture it supports.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU time and resident memory of a process tree at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Usage {
    /// User and system CPU time of the tree.
    pub(crate) cpu: Duration,
    /// Resident memory of the tree, in bytes.
    pub(crate) rss: u64,
}

/// The usage of `pid` and its descendants, or `None` without `/proc` or
/// once `pid` is gone: a process that has exited and is not yet reaped (a
/// zombie, whose memory reads as nothing) is gone.
pub(crate) fn usage(pid: u32) -> Option<Usage> {
    let mut parents: HashMap<u32, u32> = HashMap::new();
    let mut ticks: HashMap<u32, u64> = HashMap::new();
    let mut root_alive = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        if let Some((state, ppid, t)) = parse_stat(&stat) {
            if p == pid {
                root_alive = alive(state);
            }
            parents.insert(p, ppid);
            ticks.insert(p, t);
        }
    }
    if !ticks.contains_key(&pid) || !root_alive {
        return None;
    }
    let tree: Vec<u32> = ticks
        .keys()
        .copied()
        .filter(|&p| descends(p, pid, &parents))
        .collect();
    let total: u64 = tree.iter().map(|p| ticks[p]).sum();
    let rss = tree
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| parse_rss(&s))
        .sum();
    Some(Usage {
        cpu: Duration::from_secs_f64(total as f64 / TICKS_PER_SECOND),
        rss,
    })
}

/// Whether `p` is `root` or one of its descendants.
fn descends(mut p: u32, root: u32, parents: &HashMap<u32, u32>) -> bool {
    // A bound on the walk, against a parent map read while processes come and go.
    for _ in 0..64 {
        if p == root {
            return true;
        }
        match parents.get(&p) {
            Some(&parent) if parent != p && parent != 0 => p = parent,
            _ => return false,
        }
    }
    false
}

/// `(ppid, utime + stime)` from a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses: the
/// fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), …, utime (14), stime (15).
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((state, ppid, utime + stime))
}

/// Whether a process in `state` (`/proc/<pid>/stat`'s third field) still
/// runs: not a zombie (`Z`: exited, not yet reaped) nor dead (`X`, `x`).
fn alive(state: char) -> bool {
    !matches!(state, 'Z' | 'X' | 'x')
}

/// `VmRSS` (in bytes) from a `/proc/<pid>/status` text.
fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parens() {
        let stat = "1234 (my (odd) name) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 5 1000 200";
        assert_eq!(parse_stat(stat), Some(('S', 77, 281)));
        assert_eq!(parse_stat("garbage"), None);
        let zombie = "99 (srv) Z 77 99 99 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 5 0 0";
        let (state, _, _) = parse_stat(zombie).unwrap();
        assert!(!alive(state), "an exited, unreaped server is gone");
        assert!(alive('S') && alive('R') && alive('D'));
    }

    #[test]
    fn rss_in_bytes() {
        assert_eq!(
            parse_rss("Name:\tx\nVmRSS:\t   2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(parse_rss("Name:\tx\n"), None);
    }

    #[test]
    fn descendants_only() {
        let parents = HashMap::from([(10, 1), (11, 10), (12, 11), (20, 1)]);
        assert!(descends(12, 10, &parents));
        assert!(descends(10, 10, &parents));
        assert!(!descends(20, 10, &parents));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn own_process_is_seen() {
        let u = usage(std::process::id()).expect("/proc on Linux");
        assert!(u.rss > 0);
    }
}
