//! A real Redis Cluster (`redis-server --cluster-enabled yes`, joined by
//! `redis-cli --cluster create`) and a real Sentinel set-up (a primary, a
//! replica, one `redis-sentinel`), each on free loopback ports in a
//! temporary directory, every wait bounded, every process killed (and the
//! directory removed) on drop.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use super::process::Node;
use super::process::{free_port, temp_dir, tool, tools};

/// How long a set-up may take before the test fails.
const SETUP: Duration = Duration::from_secs(30);

/// Polls `check` (a state of the servers, not a timing) until it holds,
/// within `SETUP`.
pub async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + SETUP;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {SETUP:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Redis Cluster of three primaries, each with `replicas` replicas.
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

impl Cluster {
    pub async fn start(replicas: usize) -> Option<Self> {
        if !tools(&["redis-server", "redis-cli"]) {
            return None;
        }
        let dir = temp_dir("cluster");
        let nodes: Vec<Node> = (0..3 * (1 + replicas))
            .map(|_| {
                let port = free_port();
                let args = [
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &format!("nodes-{port}.conf"),
                    "--cluster-node-timeout",
                    "1000",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ]
                .map(str::to_owned);
                Node::spawn("redis-server", port, &dir, &args)
            })
            .collect();
        let cluster = Self { nodes, dir };
        for node in &cluster.nodes {
            until("a node answers", || async {
                node.command(&redis::cmd("PING")).await.is_ok()
            })
            .await;
        }
        let mut create = Command::new(tool("redis-cli").expect("redis-cli"));
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for node in &cluster.nodes {
            until("the cluster is ok on every node", || async {
                cluster_ok(node).await
            })
            .await;
        }
        if replicas > 0 {
            cluster.replicas_online(replicas).await;
        }
        Some(cluster)
    }

    /// Waits until every primary has `n` replicas in sync.
    pub async fn replicas_online(&self, n: usize) {
        for node in self.nodes.iter().filter(|n| n.alive()) {
            until("every primary's replicas are online", || async {
                let info = node.info("replication").await;
                !info.contains("role:master") || info.matches("state=online").count() >= n
            })
            .await;
        }
    }

    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.alive())
            .map(Node::url)
            .collect()
    }

    /// The node (its index) that serves `key`'s slot as primary now.
    pub async fn primary_of(&self, key: &str) -> usize {
        let any = self.nodes.iter().find(|n| n.alive()).expect("a node");
        let slot: i64 = redis::from_redis_value(
            any.command(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
                .await
                .expect("CLUSTER KEYSLOT"),
        )
        .unwrap();
        let slots = any
            .command(redis::cmd("CLUSTER").arg("SLOTS"))
            .await
            .expect("CLUSTER SLOTS");
        let ranges: Vec<(i64, i64, i64)> = match slots {
            redis::Value::Array(ranges) => ranges
                .into_iter()
                .map(|r| {
                    let r: Vec<redis::Value> = redis::from_redis_value(r).unwrap();
                    let mut it = r.into_iter();
                    let start: i64 = redis::from_redis_value(it.next().unwrap()).unwrap();
                    let end: i64 = redis::from_redis_value(it.next().unwrap()).unwrap();
                    let primary: Vec<redis::Value> =
                        redis::from_redis_value(it.next().unwrap()).unwrap();
                    let port: i64 = redis::from_redis_value(primary[1].clone()).unwrap();
                    (start, end, port)
                })
                .collect(),
            other => panic!("CLUSTER SLOTS: {other:?}"),
        };
        let (_, _, port) = ranges
            .into_iter()
            .find(|(s, e, _)| (*s..=*e).contains(&slot))
            .expect("the slot is served");
        self.nodes
            .iter()
            .position(|n| i64::from(n.port) == port)
            .expect("a node of this cluster")
    }
}

impl Cluster {
    /// Waits until the replicas of the primary at `primary` have every
    /// write it took.
    pub async fn synced(&self, primary: usize) {
        let node = &self.nodes[primary];
        until("the replica has every write", || async {
            let info = node.info("replication").await;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_owned())
            };
            let Some(offset) = field("master_repl_offset:") else {
                return false;
            };
            field("slave0:").is_some_and(|s| s.contains(&format!("offset={offset},")))
        })
        .await;
    }

    /// The replica (its index) of the primary at `primary`.
    pub async fn replica_of(&self, primary: usize) -> usize {
        let port = i64::from(self.nodes[primary].port);
        for (i, node) in self.nodes.iter().enumerate() {
            if i == primary || !node.alive() {
                continue;
            }
            if let Ok(redis::Value::Array(role)) = node.command(&redis::cmd("ROLE")).await {
                let master: Option<i64> = role
                    .get(2)
                    .and_then(|v| redis::from_redis_value(v.clone()).ok());
                if master == Some(port) {
                    return i;
                }
            }
        }
        panic!("no replica of node {primary}");
    }
}

async fn cluster_ok(node: &Node) -> bool {
    node.info("cluster").await.contains("cluster_enabled:1")
        && node
            .command(redis::cmd("CLUSTER").arg("INFO"))
            .await
            .ok()
            .and_then(|v| redis::from_redis_value::<String>(v).ok())
            .is_some_and(|s| s.contains("cluster_state:ok"))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary, its replica and one Sentinel watching them as `mymaster`
/// (quorum 1; down after 500 ms).
pub struct Sentinel {
    pub primary: Node,
    pub replica: Node,
    pub sentinel: Node,
    dir: PathBuf,
}

pub const MASTER: &str = "mymaster";

/// The password of the primary and replica of [`Sentinel::secured`].
pub const PRIMARY_PASSWORD: &str = "primary-secret";
/// The password of the Sentinel of [`Sentinel::secured`] (in its URL).
pub const SENTINEL_PASSWORD: &str = "sentinel-secret";

impl Sentinel {
    pub async fn start() -> Option<Self> {
        Self::start_with(false).await
    }

    /// As [`start`](Self::start), with passwords everywhere: the primary
    /// and the replica ask for [`PRIMARY_PASSWORD`] (`requirepass`, and
    /// `masterauth` to replicate), the Sentinel for [`SENTINEL_PASSWORD`]
    /// and knows the primary's (`sentinel auth-pass`).
    pub async fn secured() -> Option<Self> {
        Self::start_with(true).await
    }

    async fn start_with(secured: bool) -> Option<Self> {
        if !tools(&["redis-server", "redis-sentinel"]) {
            return None;
        }
        let dir = temp_dir("sentinel");
        let auth: Vec<String> = if secured {
            [
                "--requirepass",
                PRIMARY_PASSWORD,
                "--masterauth",
                PRIMARY_PASSWORD,
            ]
            .map(str::to_owned)
            .to_vec()
        } else {
            Vec::new()
        };
        let server = |port: u16, extra: &[String]| {
            let mut args = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .map(str::to_owned)
            .to_vec();
            args.extend_from_slice(&auth);
            args.extend_from_slice(extra);
            let mut node = Node::spawn("redis-server", port, &dir, &args);
            node.password = secured.then(|| PRIMARY_PASSWORD.to_owned());
            node
        };
        let primary = server(free_port(), &[]);
        let p = primary.port.to_string();
        let replica = server(
            free_port(),
            &["--replicaof".into(), "127.0.0.1".into(), p.clone()],
        );
        let secrets = if secured {
            format!(
                "sentinel auth-pass {MASTER} {PRIMARY_PASSWORD}\nrequirepass {SENTINEL_PASSWORD}\n"
            )
        } else {
            String::new()
        };
        let port = free_port();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {p} 1\n\
                 sentinel down-after-milliseconds {MASTER} 500\n\
                 sentinel failover-timeout {MASTER} 5000\n{secrets}",
                dir.display()
            ),
        )
        .expect("sentinel.conf");
        let mut sentinel = Node::spawn("redis-sentinel", port, &dir, &[conf.display().to_string()]);
        sentinel.password = secured.then(|| SENTINEL_PASSWORD.to_owned());
        let set = Self {
            primary,
            replica,
            sentinel,
            dir,
        };
        set.in_sync().await;
        Some(set)
    }

    /// Waits until the Sentinel knows the replica and it is in sync.
    pub async fn in_sync(&self) {
        until("the replica is online and the Sentinel sees it", || async {
            let master = self
                .sentinel
                .command(redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER))
                .await;
            // Known, and not flagged down or disconnected.
            let known = match master {
                Ok(redis::Value::Array(replicas)) => replicas.into_iter().any(|r| {
                    let fields: Vec<String> = redis::from_redis_value(r).unwrap_or_default();
                    fields
                        .chunks(2)
                        .any(|kv| kv[0] == "flags" && kv.get(1).is_some_and(|f| f == "slave"))
                }),
                _ => false,
            };
            let primary = self.serving().await;
            let online = match primary {
                Some(p) => p.info("replication").await.contains("state=online"),
                None => false,
            };
            known && online
        })
        .await;
    }

    /// The port the Sentinel names as the primary now.
    pub async fn named(&self) -> Option<u16> {
        let v = self
            .sentinel
            .command(
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER),
            )
            .await
            .ok()?;
        let addr: Vec<String> = redis::from_redis_value(v).ok()?;
        addr.get(1)?.parse().ok()
    }

    /// The node the Sentinel names as the primary, if alive.
    pub async fn serving(&self) -> Option<&Node> {
        let port = self.named().await?;
        [&self.primary, &self.replica]
            .into_iter()
            .find(|n| n.port == port && n.alive())
    }

    pub fn sentinels(&self) -> Vec<String> {
        vec![self.sentinel.url()]
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.sentinel.kill();
        self.replica.kill();
        self.primary.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
