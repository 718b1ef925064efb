//! Running the real `chatd` binary from tests: [`Chatd`] spawns
//! `chatd serve`, collects its log lines and waits for the `listening on`
//! line; dropping it stops the process (SIGTERM, then SIGKILL), so a failing
//! test never leaves a server behind. [`chatd_command`] runs a short
//! subcommand to completion.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// The admin token every test server is started with.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// How long a server may take to log `listening on` (the embedded cluster's
/// `initdb` included).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a graceful shutdown may take.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// The path of the binary under test.
pub fn chatd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_chatd")
}

/// A `chatd` command with a quiet, predictable environment.
pub fn chatd_command() -> Command {
    let mut command = Command::new(chatd_bin());
    command
        .env_remove("CHATD_POSTGRES_URL")
        .env_remove("CHATD_DATA_DIR")
        .env_remove("CHATD_LISTEN")
        .env_remove("CHATD_LOG_FORMAT")
        .env_remove("RUST_LOG")
        .env("CHATD_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// A running `chatd serve`.
pub struct Chatd {
    child: Option<Child>,
    pid: i32,
    log: watch::Receiver<Vec<String>>,
    /// The address from the `listening on` line.
    pub addr: SocketAddr,
}

impl Chatd {
    /// Starts `chatd serve ARGS --listen 127.0.0.1:0` with the admin token
    /// and waits for its `listening on` line.
    pub async fn start(args: &[&str]) -> anyhow::Result<Self> {
        let mut command = chatd_command();
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("CHATD_BOOTSTRAP_ADMIN_TOKEN", ADMIN_TOKEN);
        let mut chatd = Self::spawn(command)?;
        let line = chatd
            .wait_for_line(
                |line| line.contains("listening on http://"),
                STARTUP_TIMEOUT,
            )
            .await?;
        chatd.addr = parse_listening(&line)?;
        Ok(chatd)
    }

    /// Spawns `command` (a `chatd serve`), collecting its standard error.
    pub fn spawn(mut command: Command) -> anyhow::Result<Self> {
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = command.spawn().context("spawning chatd")?;
        let pid = child.id().context("chatd exited at once")? as i32;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let (sender, log) = watch::channel(Vec::new());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                sender.send_modify(|log| log.push(line));
            }
        });
        Ok(Self {
            child: Some(child),
            pid,
            log,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        })
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The base URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// GETs `path` (`/api/v2/...`) with `token` as the bearer token,
    /// asserts `200 OK` and returns the JSON body.
    pub async fn get_json(&self, path: &str, token: &str) -> anyhow::Result<serde_json::Value> {
        let response = http()
            .get(format!("{}{path}", self.url()))
            .bearer_auth(token)
            .send()
            .await?;
        assert_eq!(response.status(), 200, "GET {path}");
        Ok(response.json().await?)
    }

    /// Every log line so far.
    pub fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }

    /// Waits until a log line satisfies `matches`, and returns it.
    pub async fn wait_for_line(
        &mut self,
        matches: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.log.borrow().iter().find(|l| matches(l)) {
                return Ok(line.clone());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                // Let the reader drain what the process wrote last.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Some(line) = self.log.borrow().iter().find(|l| matches(l)) {
                    return Ok(line.clone());
                }
                bail!(
                    "chatd exited ({status}) first; its log:\n{}",
                    self.log().join("\n")
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "timed out after {timeout:?}; chatd's log:\n{}",
                    self.log().join("\n")
                );
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(500)), self.log.changed())
                .await;
        }
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        kill(Pid::from_raw(self.pid), Signal::SIGTERM).context("sending SIGTERM")?;
        self.wait(SHUTDOWN_TIMEOUT).await
    }

    /// Kills the process (SIGKILL), as a crash would, and reaps it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        let child = self.child.as_mut().context("already waited for")?;
        child.kill().await?;
        self.child = None;
        Ok(())
    }

    /// Waits for the process to exit on its own.
    pub async fn wait(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let child = self.child.as_mut().context("already waited for")?;
        let status = tokio::time::timeout(timeout, child.wait())
            .await
            .with_context(|| {
                format!(
                    "chatd did not exit within {timeout:?}; its log:\n{}",
                    self.log().join("\n")
                )
            })??;
        // Give the reader a moment to collect the last lines.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.child = None;
        Ok(status)
    }
}

impl Drop for Chatd {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        // A failed test: stop it like an operator would, so it stops its
        // embedded PostgreSQL too; kill it if that takes too long.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.start_kill();
    }
}

/// Parses `listening on http://ADDR` out of a log line.
pub fn parse_listening(line: &str) -> anyhow::Result<SocketAddr> {
    let rest = line
        .split("listening on http://")
        .nth(1)
        .context("no `listening on` in the line")?;
    let addr = rest
        .split(|c: char| c.is_whitespace() || c == '"')
        .next()
        .unwrap_or_default();
    addr.parse()
        .with_context(|| format!("parsing the address in {line:?}"))
}

/// Runs `chatd ARGS` to completion within `timeout`; returns its status,
/// standard output and standard error.
pub async fn run_chatd(
    args: &[&str],
    timeout: Duration,
) -> anyhow::Result<(ExitStatus, String, String)> {
    let mut command = chatd_command();
    command.args(args);
    let output = tokio::time::timeout(timeout, command.output())
        .await
        .with_context(|| format!("chatd {args:?} did not finish within {timeout:?}"))??;
    Ok((
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// `chatd token create --user USER [--admin] DATABASE_ARGS`: the printed
/// token.
pub async fn create_token(
    user: &str,
    admin: bool,
    database_args: &[&str],
) -> anyhow::Result<String> {
    let mut args = vec!["token", "create", "--user", user];
    if admin {
        args.push("--admin");
    }
    args.extend_from_slice(database_args);
    let (status, stdout, stderr) = run_chatd(&args, Duration::from_secs(120)).await?;
    if !status.success() {
        bail!("chatd token create failed ({status}):\n{stderr}");
    }
    let token = stdout.trim().to_owned();
    if token.is_empty() || token.contains(char::is_whitespace) {
        bail!("chatd token create printed {stdout:?} (stderr: {stderr})");
    }
    Ok(token)
}

/// `SELECT count(*) FROM {from}` on `db`: `from` is a table, optionally
/// followed by a `WHERE` clause.
pub async fn row_count(db: &chatd_testkit::TestDatabase, from: &str) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {from}")))
            .fetch_one(db.pool())
            .await?,
    )
}

/// An HTTP client with a per-request timeout.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("building the HTTP client")
}

/// A temporary directory the `postgres` OS user can reach (tests run as
/// root, and the embedded PostgreSQL then runs as `postgres`).
pub fn reachable_tempdir() -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new().prefix("chatd-it-").tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Stops a PostgreSQL server left running in `pgdata` (immediate shutdown)
/// when dropped: the last line of defence of a failing test.
pub struct PostmasterGuard<'a>(pub &'a Path);

impl Drop for PostmasterGuard<'_> {
    fn drop(&mut self) {
        if let Some(pid) = postmaster_pid(self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
        }
    }
}

/// The pid in `pgdata/postmaster.pid`, if the file exists.
pub fn postmaster_pid(pgdata: &Path) -> Option<i32> {
    std::fs::read_to_string(pgdata.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` is a live (not zombie) process.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Polls `check` until it returns true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
