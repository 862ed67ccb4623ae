//! Two replica processes (`examples/replica.rs`) sharing one `redis-server`
//! behind HAProxy running the shipped `deploy/haproxy/haproxy.cfg` (its
//! addresses replaced by loopback ports), which balances 2026 requests
//! without stickiness: tasks created through one replica are read and
//! cancelled through the other, and the work is dropped where it runs; a
//! replica killed mid-task leaves its task `failed` after its lease.
//!
//! HAProxy and Redis are Debian's packages, installed by `.ci/run`; without
//! them the test is skipped with a message, except in CI, where it fails.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::Redis;
use tower::{Service, ServiceExt};
use tower_mcp_cancel::tasks::EXTENSION;
use tower_mcp_cancel::transport::http::HttpClient;
use tower_mcp_cancel::McpRequest;

const CONFIG: &str = include_str!("../../../deploy/haproxy/haproxy.cfg");
const BOUND: Duration = Duration::from_secs(20);

fn haproxy() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("haproxy"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "haproxy is not installed; .ci/run installs it"
        );
        eprintln!("SKIPPED: haproxy is not installed (apt-get install haproxy)");
    }
    found
}

/// The example binary, built by `cargo test` with the tests.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("replica");
    assert!(
        p.exists(),
        "{} not built: cargo build -p tower-mcp-cancel-redis --example replica",
        p.display()
    );
    p
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One replica process and the lines it printed.
struct Replica {
    child: Option<Kill>,
    addr: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    fn start(redis: &Redis) -> Self {
        let mut child = Command::new(example())
            .args(["--listen", "127.0.0.1:0", "--events", "--lease", "1"])
            .args(["--redis", &redis.url()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the replica example");
        // The address on stdout; the `<KIND> <id> <unix-ns>` events on
        // stderr.
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(a) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(a.trim_end_matches("/mcp").to_owned());
                }
            }
        });
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        let addr = rx.recv_timeout(BOUND).expect("the replica listens");
        Self {
            child: Some(Kill(child)),
            addr,
            lines,
        }
    }

    /// Whether it printed the event `kind` for `id`.
    fn printed(&self, kind: &str, id: &str) -> bool {
        let start = format!("{kind} {id} ");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with(&start))
    }

    fn count(&self, prefix: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }
}

fn declared(params: Value) -> Value {
    let mut p = params;
    p["_meta"] =
        json!({"io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}}});
    p
}

async fn call(
    client: &mut HttpClient,
    method: &str,
    params: Value,
) -> Result<Value, tower::BoxError> {
    let req = McpRequest::without_id(method).with_params(declared(params));
    client.ready().await?.call(req).await
}

/// Waits (bounded) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !f() {
        assert!(Instant::now() < deadline, "not within {BOUND:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_haproxy_without_stickiness_replicas_are_one_server_for_tasks() {
    let Some(haproxy) = haproxy() else { return };
    let Some(redis) = Redis::start() else { return };
    let mut replicas = [Replica::start(&redis), Replica::start(&redis)];
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = CONFIG.to_owned();
    for (from, to) in [
        (
            "bind 127.0.0.1:8080".to_owned(),
            format!("bind 127.0.0.1:{port}"),
        ),
        (
            "server replica1 127.0.0.1:8081".to_owned(),
            format!("server replica1 {}", replicas[0].addr),
        ),
        (
            "server replica2 127.0.0.1:8082".to_owned(),
            format!("server replica2 {}", replicas[1].addr),
        ),
    ] {
        assert_eq!(config.matches(&from).count(), 1, "`{from}` in the config");
        config = config.replace(&from, &to);
    }
    let dir = std::env::temp_dir().join(format!("mcp-redis-haproxy-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
    let _haproxy = Kill(
        Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(dir.join("haproxy.cfg"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy"),
    );
    until("haproxy listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let mut client = HttpClient::new(format!("http://127.0.0.1:{port}/mcp").parse().unwrap());

    // Tasks created, read and cancelled through the balancer: the work is
    // dropped where it runs, and some cancels were served by the replica
    // that did not run the task.
    let mut crossed = 0;
    for n in 0..6 {
        let created = call(
            &mut client,
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 600}}),
        )
        .await
        .unwrap();
        let id = created["taskId"].as_str().expect("a task").to_owned();
        for _ in 0..(1 + n % 2) {
            let got = call(&mut client, "tasks/get", json!({"taskId": id}))
                .await
                .unwrap();
            assert_eq!(got["status"], "working", "{got}");
        }
        let dropped: Vec<usize> = replicas.iter().map(|r| r.count("DROPPED")).collect();
        call(&mut client, "tasks/cancel", json!({"taskId": id}))
            .await
            .unwrap();
        until("the work dropped", || {
            replicas
                .iter()
                .zip(&dropped)
                .any(|(r, d)| r.count("DROPPED") > *d)
        })
        .await;
        let ran = (0..2)
            .find(|&i| replicas[i].count("DROPPED") > dropped[i])
            .unwrap();
        let served_on = |i: usize| replicas[i].printed("SERVED_CANCEL", &id);
        until("the cancel's line", || served_on(0) || served_on(1)).await;
        let served = usize::from(!served_on(0));
        if served != ran {
            crossed += 1;
        }
        let got = call(&mut client, "tasks/get", json!({"taskId": id}))
            .await
            .unwrap();
        assert_eq!(got["status"], "cancelled", "{got}");
    }
    assert!(crossed > 0, "no cancel was served by the other replica");

    // A replica killed mid-task: its task reads failed after its lease (1 s).
    let created = call(
        &mut client,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 600}}),
    )
    .await
    .unwrap();
    let id = created["taskId"].as_str().unwrap().to_owned();
    let runs_on = |i: usize| replicas[i].printed("RUNS", &id);
    until("a replica runs it", || runs_on(0) || runs_on(1)).await;
    let ran = usize::from(!runs_on(0));
    replicas[ran].child.take();
    let deadline = Instant::now() + BOUND;
    let got = loop {
        assert!(Instant::now() < deadline, "the task did not end");
        // A request balanced to the dead replica fails; the next is retried.
        match call(&mut client, "tasks/get", json!({"taskId": id})).await {
            Ok(got) if got["status"] != "working" => break got,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert_eq!(got["status"], "failed", "{got}");
    assert!(
        got["error"]["message"]
            .as_str()
            .unwrap()
            .contains("went away"),
        "{got}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example's command line is clap's: `--help` lists the topology
/// flags and exits 0; a typo, no topology, or two of them, exit 2 before
/// anything is connected.
#[test]
fn the_replica_example_refuses_a_typo_with_status_2() {
    let run = |args: &[&str]| {
        Command::new(example())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the example runs")
    };
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--redis ",
        "--redis-cluster",
        "--sentinel ",
        "--sentinel-master",
        "--acknowledged-by",
        "--primary-password-env",
        "--events",
    ] {
        assert!(text.contains(flag), "{flag} in --help:\n{text}");
    }
    for args in [
        &["--redis", "redis://127.0.0.1:1/", "--evnets"][..],
        &["--events"][..],
        &[
            "--redis",
            "redis://127.0.0.1:1/",
            "--redis-cluster",
            "redis://127.0.0.1:2",
        ][..],
        &["--sentinel", "redis://127.0.0.1:1"][..],
        &[
            "--redis",
            "redis://127.0.0.1:1/",
            "--primary-password-env",
            "REDIS_PASSWORD",
        ][..],
        &[
            "--redis",
            "redis://127.0.0.1:1/",
            "--acknowledged-by",
            "two",
        ][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Usage"),
            "{args:?}: {out:?}"
        );
    }
}
