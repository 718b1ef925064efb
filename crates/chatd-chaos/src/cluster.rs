//! The processes a chaos run drives besides its private PostgreSQL cluster
//! ([`chatd_testkit::pg_cluster::PgCluster`]): the fake LLM and the
//! `chatd serve` replicas, each restartable on the same address.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

pub use chatd_testkit::pg_cluster::{PgCluster, find_pg_bin, free_port};

/// The admin token every replica bootstraps; the clients use it.
pub const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789abcdef";

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
        Self::start_mode(bin, log, "scripted:10:50").await
    }

    /// Writes `dir/chatd.toml`, a config whose default model is this fake
    /// (context limit 1,000,000 tokens), and returns its path.
    pub fn write_config(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let config = dir.join("chatd.toml");
        std::fs::write(
            &config,
            format!(
                "[[providers]]\nname = \"fake\"\nprovider = \"openai-compat\"\nbase_url = \"{}\"\n\n\
                 [[model_configs]]\nname = \"fake-model\"\nprovider = \"fake\"\nmodel = \"fake-model\"\n\
                 context_limit = 1000000\nis_default = true\n",
                self.base_url
            ),
        )?;
        Ok(config)
    }

    /// Starts `bin` with `--mode mode` (see `fake-llm --help`).
    pub async fn start_mode(bin: &Path, log: &Path, mode: &str) -> anyhow::Result<Self> {
        let mut command = Command::new(bin);
        command.args(["--listen", "127.0.0.1:0", "--mode", mode]);
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

    /// Starts the process like [`Replica::start`], trying again every
    /// second for up to `timeout` when it exits before listening (`chatd
    /// serve` exits when its database connection breaks during its start,
    /// as in a failover of the HA cluster: a supervisor starts it again).
    /// Returns the failed attempts, each as the last `ERROR` line of its
    /// log (or the harness's error).
    ///
    /// # Errors
    /// The last attempt's, when none started within `timeout`.
    pub async fn start_retrying(&mut self, timeout: Duration) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut failures = Vec::new();
        loop {
            match self.start().await {
                Ok(()) => return Ok(failures),
                Err(err) if Instant::now() < deadline => {
                    let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                    failures.push(
                        log.lines()
                            .rev()
                            .find(|l| l.contains(" ERROR "))
                            .map_or_else(|| format!("{err:#}"), str::to_owned),
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(err) => return Err(err),
            }
        }
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
