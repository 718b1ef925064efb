//! The `mcp-fixture` binary of this crate (a tiny MCP server with `add`,
//! `fail`, `sleep`, `whoami`, `log` and `exit` tools; see its source) for
//! tests of other crates: where to find it, and a handle that runs it in
//! streamable HTTP mode.
//!
//! The binary is looked up next to the running test executable
//! (`target/<profile>/mcp-fixture`); when it is not there (a test run of
//! another package that did not build this crate's binaries) it is built
//! once with `cargo build -p chatd-testkit --bin mcp-fixture`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::AsyncBufReadExt as _;

/// The path of the `mcp-fixture` binary, building it if needed.
///
/// # Errors
/// When it is missing and cannot be built.
pub fn mcp_fixture_bin() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| locate_or_build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn locate_or_build() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("the test executable's path")?;
    // target/<profile>/deps/<test> → target/<profile>/mcp-fixture
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .context("the target directory")?;
    let bin = profile_dir.join("mcp-fixture");
    if bin.is_file() {
        return Ok(bin);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "chatd-testkit",
            "--bin",
            "mcp-fixture",
            "--manifest-path",
        ])
        .arg(&manifest)
        .status()
        .context("running cargo build for mcp-fixture")?;
    if !status.success() || !bin.is_file() {
        bail!(
            "building mcp-fixture failed ({status}); expected it at {}",
            bin.display()
        );
    }
    Ok(bin)
}

/// An `mcp-fixture --http` process. Dropping it kills the process.
pub struct McpHttpFixture {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl McpHttpFixture {
    /// Starts the fixture on `127.0.0.1:0`.
    ///
    /// # Errors
    /// When the binary is missing or does not start within 30 s.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0").await
    }

    /// Starts the fixture on `addr` (to restart one on the same port).
    ///
    /// # Errors
    /// When the binary is missing or does not start within 30 s.
    pub async fn start_on(addr: &str) -> anyhow::Result<Self> {
        let bin = tokio::task::spawn_blocking(mcp_fixture_bin).await??;
        let mut child = tokio::process::Command::new(bin)
            .args(["--http", addr])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning mcp-fixture")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("mcp-fixture did not start within 30 s")??
            .context("mcp-fixture exited before listening")?;
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .with_context(|| format!("unexpected first line {line:?}"))?
            .parse()?;
        Ok(McpHttpFixture { child, addr })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint, `http://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the process (SIGKILL) and waits for it.
    ///
    /// # Errors
    /// When it cannot be killed.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing mcp-fixture")
    }
}
