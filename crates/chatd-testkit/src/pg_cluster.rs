//! A PostgreSQL cluster of a test's own: `initdb` in a temporary directory,
//! a server on a free port of 127.0.0.1, and the faults a test inflicts on it
//! (an immediate stop, as a crash, and a restart on the same port). Never the
//! shared server the other tests use (issue 14: "a restart of a PostgreSQL
//! cluster that the harness runs itself on a private port").
//!
//! Used by the chaos harness (`chatd-chaos`) and by `chatd`'s
//! database-restart test. As root, every PostgreSQL program runs as the
//! `postgres` OS user (`runuser`), since PostgreSQL refuses root.
//!
//! # Example
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
//! use chatd_testkit::pg_cluster::{PgCluster, find_pg_bin};
//! let pg = PgCluster::start(find_pg_bin()?).await?;
//! pg.create_database().await?;
//! pg.crash().await?; // connections drop, as on a crash
//! pg.start_server().await?; // same port, same data
//! pg.stop().await;
//! # Ok(()) }
//! ```

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, bail};
use tokio::process::Command;

/// A free TCP port on 127.0.0.1 (bound, then released).
///
/// # Errors
/// When no socket can be bound.
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
    /// `initdb` and start a cluster with the server binaries in `bin`
    /// (see [`find_pg_bin`]).
    ///
    /// # Errors
    /// When `initdb` or the server start fails (the programs' output is in
    /// the error).
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

    /// The server's log file (`pg_ctl -l`); it goes when `self` drops.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
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
        let log = self.log_path();
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
