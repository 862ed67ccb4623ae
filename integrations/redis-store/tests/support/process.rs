//! One Redis process (`redis-server` or `redis-sentinel`) on a loopback
//! port: started, restarted, paused, killed as a crash would, and asked
//! commands, every wait bounded; killed on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `None` (with a message) when a tool is missing outside CI; in CI its
/// absence fails.
pub fn tools(names: &[&str]) -> bool {
    for name in names {
        if tool(name).is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{name} is not installed: CI needs it"
            );
            eprintln!("SKIPPED: {name} is not installed");
            return false;
        }
    }
    true
}

/// A free loopback port whose cluster bus port (+10000) is free too.
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

pub fn temp_dir(kind: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mcp-{kind}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// One `redis-server` (or `redis-sentinel`) child.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    binary: String,
    args: Vec<String>,
    dir: PathBuf,
    /// Its `requirepass`, if any (in its URL).
    pub password: Option<String>,
}

impl Node {
    pub fn spawn(binary: &str, port: u16, dir: &Path, args: &[String]) -> Self {
        let mut node = Self {
            port,
            child: None,
            binary: binary.to_owned(),
            args: args.to_vec(),
            dir: dir.to_owned(),
            password: None,
        };
        node.restart();
        node
    }

    /// Starts it (again) as it was first started: a cluster node with its
    /// nodes.conf rejoins as a replica of whoever took its slots.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", self.port)))
            .expect("a log file");
        let child = Command::new(tool(&self.binary).expect("the server's binary"))
            .args(&self.args)
            .current_dir(&self.dir)
            .stdout(Stdio::from(log))
            .stderr(Stdio::null())
            .spawn()
            .expect("the server starts");
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// SIGKILL: it goes away as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: its connections stay open, nothing is answered (nor
    /// replicated) until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("it runs").id();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A command through a plain connection (bounded).
    pub async fn command(&self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(self.url())?;
        let work = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            cmd.query_async(&mut conn).await
        };
        tokio::time::timeout(Duration::from_secs(5), work)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    /// `INFO <section>` as text ("" when it does not answer).
    pub async fn info(&self, section: &str) -> String {
        match self.command(redis::cmd("INFO").arg(section)).await {
            Ok(v) => redis::from_redis_value::<String>(v).unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}
