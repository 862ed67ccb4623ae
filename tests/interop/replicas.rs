//! Replicas behind a real load balancer (issue 26 §3): two replicas of
//! `examples/http_server` behind HAProxy running the shipped
//! `deploy/haproxy/haproxy.cfg` (its three addresses replaced by loopback
//! ports), one deployment per test:
//!
//! * 2025 sessions (the TypeScript SDK v1 client) stick to the replica that
//!   minted them: every request of the session reaches it, so the
//!   `notifications/cancelled` of a timeout or of the user's cancel drops the
//!   handler there (a 2025 request's disconnect is not a cancel, so only the
//!   notification can have dropped it);
//! * 2026 requests are balanced freely: a call goes to the replica with
//!   nothing in flight while another runs, and `mcp_call --timeout --url`
//!   and the TypeScript v2 client's timeout drop the handler on the replica
//!   that runs it (the closed stream travels through HAProxy);
//! * a replica gone: its calls in flight fail; a 2026 client's next call is
//!   served by another replica; a 2025 session's next request gets `404`
//!   from the replica it is redispatched to, and a new session works.
//!
//! HAProxy is Debian's package, installed by `.ci/run`. Without it the
//! tests are skipped with a message, except in CI (`CI=true`), where they
//! fail.

use super::legacy_http::{mcp_call, ts_legacy_client};
use super::*;

use std::process::ChildStdout;

/// The shipped configuration, with the addresses it names.
const CONFIG: &str = include_str!("../../deploy/haproxy/haproxy.cfg");
const CONFIG_FRONTEND: &str = "bind 127.0.0.1:8080";
const CONFIG_REPLICAS: [&str; 2] = [
    "server replica1 127.0.0.1:8081",
    "server replica2 127.0.0.1:8082",
];

/// A guard against hangs, not a synchronisation.
const BOUND: Duration = Duration::from_secs(20);

/// The haproxy binary (on `PATH`, or where Debian puts it); `None` means
/// skip, outside CI only.
fn haproxy() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("haproxy"))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("haproxy is not installed; .ci/run installs it (apt-get install haproxy)");
        }
        eprintln!(
            "SKIPPED: haproxy is not installed (apt-get install haproxy); the replica test did not run"
        );
    }
    found
}

/// One replica: the example server on a port of its own.
struct Replica {
    /// `None` once killed.
    child: Option<Kill>,
    /// Held open: the server printed its address there.
    _stdout: ChildStdout,
    addr: String,
    stderr: PathBuf,
}

impl Replica {
    fn start(tag: &str, n: usize) -> Self {
        let stderr =
            std::env::temp_dir().join(format!("tmc-replicas-{tag}-{n}-{}.stderr", now_ns()));
        let mut child = Command::new(example("http_server"))
            .args(["--listen", "127.0.0.1:0", "--events"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("spawn the HTTP example server");
        // The server prints the address it bound once it listens (or exits:
        // then the line is empty).
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|a| a.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("replica {n}: unexpected first line {line:?}"))
            .to_owned();
        Replica {
            child: Some(Kill(child)),
            _stdout: stdout.into_inner(),
            addr,
            stderr,
        }
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr).unwrap()).into_owned()
    }

    /// `KIND <id> <ns>` events of this replica for `id`, at or after `since`.
    fn events(&self, kind: &str, id: &Value, since: i64) -> Vec<i64> {
        events(&self.log(), kind, id)
            .into_iter()
            .filter(|ns| *ns >= since)
            .collect()
    }

    /// Killed (SIGKILL): the replica is gone, as after a crash.
    fn kill(&mut self) {
        drop(self.child.take());
    }
}

struct Deployment {
    replicas: Vec<Replica>,
    _haproxy: Kill,
    url: String,
    dir: PathBuf,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Two replicas behind HAProxy with the shipped configuration.
fn deploy(haproxy: &Path, tag: &str) -> Deployment {
    install();
    let replicas: Vec<Replica> = (1..=2).map(|n| Replica::start(tag, n)).collect();
    let port = free_port();
    let mut config = CONFIG.to_owned();
    for (from, to) in [(CONFIG_FRONTEND, format!("bind 127.0.0.1:{port}"))]
        .into_iter()
        .chain(
            CONFIG_REPLICAS
                .iter()
                .zip(&replicas)
                .enumerate()
                .map(|(i, (from, r))| (*from, format!("server replica{} {}", i + 1, r.addr))),
        )
    {
        assert_eq!(config.matches(from).count(), 1, "`{from}` in the config");
        config = config.replace(from, &to);
    }
    let dir = std::env::temp_dir().join(format!("tmc-replicas-{tag}-{}", now_ns()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, config).unwrap();
    let mut child = Command::new(haproxy)
        .arg("-db") // foreground, no daemon
        .arg("-f")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("haproxy.log")).unwrap())
        .spawn()
        .expect("spawn haproxy");
    wait_listening(port, &mut child);
    Deployment {
        replicas,
        _haproxy: Kill(child),
        url: format!("http://127.0.0.1:{port}/mcp"),
        dir,
    }
}

impl Deployment {
    /// The replica that has a `kind` event for `id` at or after `since`
    /// (bounded wait); asserts that no other one has.
    fn wait_event(&self, kind: &str, id: &Value, since: i64) -> usize {
        let deadline = Instant::now() + BOUND;
        loop {
            let hits: Vec<usize> = (0..self.replicas.len())
                .filter(|&i| !self.replicas[i].events(kind, id, since).is_empty())
                .collect();
            match hits[..] {
                [i] => return i,
                [] => {}
                _ => panic!("{kind} {id} on more than one replica:\n{}", self.logs()),
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} {id} within {BOUND:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .enumerate()
            .map(|(i, r)| format!("--- replica {}:\n{}", i + 1, r.log()))
            .collect()
    }
}

/// How many requests a replica served (its one log line per request).
fn requests_served(log: &str) -> usize {
    log.lines().filter(|l| l.contains("request ended")).count()
}

// ---------- 2025: sessions stick to their replica ----------

macro_rules! sticky_session_cells {
    ($($name:ident: $scenario:literal;)*) => {$(
        #[test]
        fn $name() {
            let Some(haproxy) = haproxy() else { return };
            let d = deploy(&haproxy, stringify!($name));
            let run = ts_legacy_client("v1", $scenario, &d.url);
            let id = slow_call_id(&run.out);
            let ran = d.wait_event("STARTED", &id, 0);
            let log = d.replicas[ran].log();
            // The session's timeout/cancel reached the replica that runs the
            // call: its handler was dropped there, within the bound.
            check_cancelled(&run, &log, false);
            assert!(log.contains("legacy session opened by initialize"), "{log}");
            // And so did every other request of the session: the other
            // replica served none (HAProxy's health checks are not MCP
            // requests).
            let other = d.replicas[1 - ran].log();
            assert_eq!(requests_served(&other), 0, "the other replica:\n{other}");
            assert!(requests_served(&log) >= 4, "initialize, echo, slow, echo:\n{log}");
        }
    )*};
}

sticky_session_cells! {
    replicas_2025_ts_v1_timeout_drops_on_the_session_replica: "timeout";
    replicas_2025_ts_v1_cancel_drops_on_the_session_replica: "cancel";
}

#[test]
fn replicas_2025_session_replica_gone() {
    let Some(haproxy) = haproxy() else { return };
    let mut d = deploy(&haproxy, "gone2025");
    let mut cmd = ts_legacy_client_command("gone", &d.url);
    cmd.args(["--slow-seconds", "60"]);
    let out = std::thread::spawn(move || run_bounded(cmd, Duration::from_secs(90)));
    // The TS SDK v1 numbers its requests from 0: initialize 0, the warm-up
    // echo 1, the slow call 2.
    let slow = Value::from(2);
    let ran = d.wait_event("STARTED", &slow, 0);
    d.replicas[ran].kill();
    let out = out.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line:\n{stdout}"));
    assert!(out.status.success() && json["ok"] == true, "{json}");
    // When the session's next call left the client (its `tools/call`
    // after the slow one), and when its error came back.
    let sent = json["wire_out"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .nth(2)
        .and_then(|m| m["t_ns"].as_i64())
        .expect("the third tools/call in wire_out");
    let answered = json["t_after_error_ns"].as_i64().unwrap() - sent;
    eprintln!(
        "the call in flight on the killed replica: {}\nthe session's next call, after {:.1} ms: {}",
        json["in_flight_error"],
        answered as f64 / 1e6,
        json["after_error"]
    );
    // The session's next request went to the survivor (HAProxy redispatched
    // it), which does not know the session: 404, the spec's signal to
    // initialize again. The TS SDK v1 surfaces it as the call's error.
    assert_eq!(json["after_error"]["code"], 404, "{json}");
    assert!(
        json["after_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no such session")),
        "{json}"
    );
    // Connecting again opened a new session, on the survivor.
    assert_ne!(json["new_session_id"], json["session_id"]);
    let survivor = d.replicas[1 - ran].log();
    assert!(
        survivor.contains("legacy session opened by initialize"),
        "{survivor}"
    );
}

/// The command line of `ts/legacy_client.mjs` (TS SDK v1) for `scenario`.
fn ts_legacy_client_command(scenario: &str, url: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(interop_dir().join("ts/legacy_client.mjs"))
        .args([scenario, "--sdk", "v1", "--url", url]);
    cmd
}

// ---------- 2026: balanced freely ----------

#[test]
fn replicas_2026_mcp_call_timeout_drops_where_it_runs_and_any_replica_serves() {
    let Some(haproxy) = haproxy() else { return };
    let mut d = deploy(&haproxy, "mcpcall2026");
    let url = d.url.clone();
    // A call that times out after 2 s, in the background.
    let t0 = now_ns();
    let timed_out = {
        let url = url.clone();
        std::thread::spawn(move || {
            mcp_call(
                &["--timeout", "2s", "--url", &url, "slow", "seconds=60"],
                &[],
            )
        })
    };
    // mcp_call's tools/call is its request 2 (after server/discover).
    let call = Value::from(2);
    let ran = d.wait_event("STARTED", &call, t0);
    let started = d.replicas[ran].events("STARTED", &call, t0)[0];

    // Meanwhile another client's call is served by the other replica (the
    // one with nothing in flight): no request is bound to a replica.
    let t1 = now_ns();
    let (code, out, err) = mcp_call(&["--url", &url, "echo", "text=meanwhile"], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(d.wait_event("DONE", &call, t1), 1 - ran, "{}", d.logs());

    // The timeout closes the response stream at HAProxy, which closes its
    // connection to the replica that runs the call: dropped there.
    let (code, out, err) = timed_out.join().unwrap();
    assert_eq!(code, 124, "{out}\n{err}");
    let dropped = d.replicas[ran].events("DROPPED", &call, t0);
    assert_eq!(dropped.len(), 1, "{}", d.logs());
    assert!(d.replicas[ran].events("DONE", &call, t0).is_empty());
    let after = Duration::from_nanos((dropped[0] - started) as u64);
    assert!(
        after < Duration::from_secs(2) + DROP_BOUND,
        "dropped {after:?} after it started, with a 2 s timeout"
    );

    // A replica gone: the call in flight there fails; the next calls are
    // served by the survivor (HAProxy redispatches the refused connection
    // before its health check marks the replica down).
    let t2 = now_ns();
    let in_flight = {
        let url = url.clone();
        std::thread::spawn(move || mcp_call(&["--url", &url, "slow", "seconds=60"], &[]))
    };
    let ran = d.wait_event("STARTED", &call, t2);
    d.replicas[ran].kill();
    let (code, out, err) = in_flight.join().unwrap();
    assert_ne!(code, 0, "{out}\n{err}");
    eprintln!("the call in flight on the killed replica: exit {code}, {err}");
    for text in ["after1", "after2"] {
        let (code, out, err) = mcp_call(&["--url", &url, "echo", &format!("text={text}")], &[]);
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains(text), "{out}");
    }
}

#[test]
fn replicas_2026_ts_timeout_drops_where_it_runs() {
    let Some(haproxy) = haproxy() else { return };
    let d = deploy(&haproxy, "ts2026");
    let run = run_client(Sdk::Ts, "timeout", Some(&d.url), &[]);
    let id = slow_call_id(&run.out);
    let ran = d.wait_event("STARTED", &id, 0);
    check_cancelled(&run, &d.replicas[ran].log(), false);
}
