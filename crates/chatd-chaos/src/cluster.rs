//! The processes a chaos run drives: a private PostgreSQL cluster on its own
//! port (never the shared server other tests use), the fake LLM, and the
//! `chatd serve` replicas, each restartable on the same address.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// The admin token every replica bootstraps; the clients use it.
pub const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789abcdef";

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A PostgreSQL cluster of the run's own, in a temporary directory,
/// listening on 127.0.0.1:`port` with trust auth. Run as the `postgres` OS
/// user when the harness runs as root (PostgreSQL refuses root).
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// TCP port of the server.
    pub port: u16,
}

impl PgCluster {
    /// `initdb` and start a cluster with the server binaries in `bin`.
    pub async fn start(bin: PathBuf) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("chatd-chaos-pg-")
            .tempdir_in("/tmp")?;
        if nix::unistd::geteuid().is_root() {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()?;
            anyhow::ensure!(status.success(), "chown of the cluster directory failed");
        }
        let cluster = Self {
            bin,
            dir,
            port: free_port()?,
        };
        let data = cluster.data_dir();
        cluster
            .run(
                "initdb",
                &[
                    "-D",
                    data.to_str().context("path")?,
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ],
            )
            .await?;
        cluster.start_server().await?;
        Ok(cluster)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The URL of database `chatd` (created by [`PgCluster::create_database`]).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/chatd", self.port)
    }

    /// The URL of the maintenance database.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let path = self.bin.join(program);
        let mut command = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir("/tmp")
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {}", path.display()))?;
        if !output.status.success() {
            bail!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Starts the server and waits until it accepts connections.
    pub async fn start_server(&self) -> anyhow::Result<()> {
        let data = self.data_dir();
        let log = self.dir.path().join("postgres.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=300 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().context("path")?,
                "-l",
                log.to_str().context("path")?,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
        .await
    }

    /// Stops the server the way a crash does (`-m immediate`).
    pub async fn crash(&self) -> anyhow::Result<()> {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().context("path")?,
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        )
        .await
    }

    /// Creates database `chatd`.
    pub async fn create_database(&self) -> anyhow::Result<()> {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&self.admin_url()).await?;
        sqlx::query("CREATE DATABASE chatd")
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// Stops the server (fast), ignoring errors; the directory is removed
    /// when `self` drops.
    pub async fn stop(&self) {
        let data = self.data_dir();
        let _ = self
            .run(
                "pg_ctl",
                &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"],
            )
            .await;
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`.
pub fn find_pg_bin() -> anyhow::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql (give --pg-bin)")?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .context("no PostgreSQL server binaries under /usr/lib/postgresql (give --pg-bin)")
}

/// A child process whose output is drained into a log file.
struct Process {
    child: Child,
}

impl Process {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().map_or(0, |id| id as i32))
    }
}

/// Spawns `command`, appending its output to `log`, and returns it with the
/// first line matching `ready` (for example `listening on`).
async fn spawn_logged(
    mut command: Command,
    log: &Path,
    ready: &str,
    timeout: Duration,
) -> anyhow::Result<(Process, String)> {
    use tokio::io::AsyncWriteExt as _;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("spawning")?;
    let stdout = child.stdout.take().context("stdout")?;
    let stderr = child.stderr.take().context("stderr")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .await?;
    let file = std::sync::Arc::new(tokio::sync::Mutex::new(file));
    for stream in [
        Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(stderr),
    ] {
        let tx = tx.clone();
        let file = file.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = file
                    .lock()
                    .await
                    .write_all(format!("{line}\n").as_bytes())
                    .await;
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(line)) if line.contains(ready) => {
                // Keep draining in the background.
                tokio::spawn(async move { while rx.recv().await.is_some() {} });
                return Ok((Process { child }, line));
            }
            Ok(Some(_)) => {}
            Ok(None) => bail!(
                "the process exited before printing {ready:?} (log: {})",
                log.display()
            ),
            Err(_) => bail!("no {ready:?} within {timeout:?} (log: {})", log.display()),
        }
    }
}

/// The fake LLM process (`fake-llm --mode scripted`).
pub struct FakeLlm {
    _process: Process,
    /// Its base URL, `http://ADDR/v1`.
    pub base_url: String,
}

impl FakeLlm {
    /// Starts `bin` in scripted mode (slow answers in 10 parts 50 ms apart).
    pub async fn start(bin: &Path, log: &Path) -> anyhow::Result<Self> {
        let mut command = Command::new(bin);
        command.args(["--listen", "127.0.0.1:0", "--mode", "scripted:10:50"]);
        let (process, line) = spawn_logged(command, log, "listening on", Duration::from_secs(30))
            .await
            .context("starting the fake LLM")?;
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| c.is_whitespace() || c == '"').next())
            .context("fake LLM address")?
            .to_owned();
        Ok(Self {
            _process: process,
            base_url: format!("{addr}/v1"),
        })
    }
}

/// One `chatd serve` replica, restartable on the same port.
pub struct Replica {
    /// Index, for logs.
    pub index: usize,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    args: Vec<String>,
    bin: PathBuf,
    log: PathBuf,
    process: Option<Process>,
    /// Whether it is stopped with SIGSTOP.
    pub stopped: bool,
}

impl Replica {
    /// A replica of `bin` with `args` (everything but `--listen`), logging
    /// to `log`; not started yet.
    pub fn new(
        index: usize,
        bin: PathBuf,
        args: Vec<String>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let port = free_port()?;
        Ok(Self {
            index,
            url: format!("http://127.0.0.1:{port}"),
            port,
            args,
            bin,
            log,
            process: None,
            stopped: false,
        })
    }

    /// Whether the process runs (and is not stopped).
    pub fn up(&self) -> bool {
        self.process.is_some() && !self.stopped
    }

    /// Starts the process and waits until it listens.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let mut command = Command::new(&self.bin);
        command
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(&self.args)
            .env("CHATD_BOOTSTRAP_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "info");
        let (process, _) =
            spawn_logged(command, &self.log, "listening on", Duration::from_secs(60))
                .await
                .with_context(|| format!("starting replica {}", self.index))?;
        self.process = Some(process);
        self.stopped = false;
        Ok(())
    }

    /// SIGKILL, then reaps the process.
    pub async fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = kill(p.pid(), Signal::SIGKILL);
            let _ = p.child.wait().await;
        }
        self.stopped = false;
    }

    /// SIGSTOP.
    pub fn pause(&mut self) {
        if let Some(p) = &self.process {
            let _ = kill(p.pid(), Signal::SIGSTOP);
            self.stopped = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self) {
        if let Some(p) = &self.process {
            let _ = kill(p.pid(), Signal::SIGCONT);
        }
        self.stopped = false;
    }

    /// SIGTERM and a wait of up to 20 s, then SIGKILL.
    pub async fn stop(&mut self) {
        self.resume();
        if let Some(mut p) = self.process.take() {
            let _ = kill(p.pid(), Signal::SIGTERM);
            if tokio::time::timeout(Duration::from_secs(20), p.child.wait())
                .await
                .is_err()
            {
                let _ = kill(p.pid(), Signal::SIGKILL);
                let _ = p.child.wait().await;
            }
        }
    }
}
