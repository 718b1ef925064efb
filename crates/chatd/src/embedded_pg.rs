//! The embedded PostgreSQL: a private cluster under the data directory, run
//! with the PostgreSQL server binaries installed on the machine, for
//! `chatd serve` and `chatd token create` when no `--postgres-url` is given
//! (DESIGN.md, "Decisions already taken"; API.md, "Running a replica").
//!
//! Layout of a data directory `D`:
//!
//! - `D/postgres/`: the cluster (`PGDATA`), created by `initdb` on first use
//!   with superuser `postgres`, UTF-8, the C locale, `trust` on the local
//!   socket and `reject` on TCP. It is also the socket directory, so only its
//!   owner (and root) can connect; the server listens on no TCP address.
//! - `D/postgres.log`: the output of `initdb`, `pg_ctl` and the server.
//! - `D/chatd.lock`: an exclusive `flock` held by the process that owns the
//!   running cluster (see [`DataDirLock`]). Another `chatd` finding it held
//!   connects to the running cluster ([`EmbeddedPostgres::attach`]) instead
//!   of starting a second one.
//!
//! Running as root: PostgreSQL refuses to run as root, so `initdb`, `pg_ctl`
//! and the server run as the `postgres` OS user, and the cluster directory is
//! owned by it. When that user cannot reach `D` (for example under `/root`,
//! mode 0700), the cluster lives in `/var/lib/chatd/<hash of D>/postgres`
//! instead and `D/postgres` is a symbolic link to it; permissions of
//! directories above `D` are never changed.
//!
//! Invariants: a cluster is started only by the holder of the data directory
//! lock; [`EmbeddedPostgres`] stops what it owns exactly once, on
//! [`EmbeddedPostgres::stop`] or, failing that, when dropped (so an error
//! during startup never leaves a server behind); a `postmaster.pid` whose
//! process is gone (or is not this cluster's server) is stale and removed.

use std::fs::{self, File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chatd_store::database;
use nix::unistd::{Gid, Uid, User};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{ConnectOptions as _, Connection as _};

/// Name of the database chatd uses inside the embedded cluster.
pub const DATABASE_NAME: &str = "chatd";

/// The cluster's superuser (initdb `-U`), whatever OS user runs it.
const SUPERUSER: &str = "postgres";

/// Port number of the server. It listens on no TCP address; the number only
/// names the socket file (`.s.PGSQL.5432`) inside the private socket
/// directory, so it never clashes with another server.
const PORT: u16 = 5432;

/// Longest unix socket path the kernel accepts (`sun_path` is 108 bytes).
const MAX_SOCKET_PATH: usize = 107;

/// Where clusters live when the `postgres` user cannot reach the data
/// directory (root only).
const ROOT_FALLBACK_DIR: &str = "/var/lib/chatd";

/// How long `pg_ctl start` and `pg_ctl stop` may wait for the server.
const PG_CTL_TIMEOUT_SECS: u64 = 120;

/// The message every "no PostgreSQL binaries" error ends with.
const INSTALL_HINT: &str = "install the PostgreSQL server package (Debian/Ubuntu: \
    `apt-get install -y postgresql`; see README.md, \"Running the service\"), \
    set CHATD_PG_BINDIR to the directory holding initdb, pg_ctl and postgres, \
    or pass --postgres-url to use an existing server";

/// An exclusive lock on a data directory (`D/chatd.lock`), held for as long
/// as this value lives. The kernel releases it when the process dies, so a
/// crash never leaves it behind.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock of `data_dir` (creating the directory if needed), or
    /// returns `None` when another process holds it.
    ///
    /// # Errors
    /// When the directory or the lock file cannot be created or opened.
    pub fn try_acquire(data_dir: &Path) -> anyhow::Result<Option<Self>> {
        create_private_dir(data_dir)?;
        let path = data_dir.join("chatd.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(err)) => {
                Err(err).with_context(|| format!("locking {}", path.display()))
            }
        }
    }

    /// Takes the lock of `data_dir`, waiting up to `wait` for another process
    /// (say a short-lived `chatd token create`) to release it.
    ///
    /// # Errors
    /// When the lock is still held after `wait` (another `chatd serve` uses
    /// this data directory), or on the errors of [`DataDirLock::try_acquire`].
    pub async fn acquire(data_dir: &Path, wait: Duration) -> anyhow::Result<Self> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(lock) = Self::try_acquire(data_dir)? {
                return Ok(lock);
            }
            if Instant::now() >= deadline {
                bail!(
                    "another chatd process is using the data directory {} (it holds {}); \
                     stop it, choose another --data-dir, or point this replica at a shared \
                     server with --postgres-url",
                    data_dir.display(),
                    data_dir.join("chatd.lock").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A running embedded cluster and how to connect to its `chatd` database.
///
/// When this value owns the server (it was returned by
/// [`EmbeddedPostgres::start`]), [`EmbeddedPostgres::stop`] stops it; so does
/// dropping the value without calling `stop`, synchronously, as a fallback.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    cluster: Cluster,
    socket_dir: PathBuf,
    port: u16,
    /// Whether this value stops the server when done.
    owned: bool,
    stopped: bool,
}

impl EmbeddedPostgres {
    /// Initialises the cluster of `data_dir` if it does not exist yet,
    /// starts it (or adopts a server of this cluster left running by a
    /// process that crashed) and creates the `chatd` database if missing.
    /// The caller must hold `_lock`, the lock of the same directory.
    ///
    /// # Errors
    /// When the PostgreSQL binaries are missing (the message says how to
    /// install them), when run as root without a `postgres` OS user, when
    /// `initdb` or `pg_ctl start` fails (the message quotes the end of
    /// `postgres.log`), or when the `chatd` database cannot be created. The
    /// server is stopped again before such an error is returned.
    pub async fn start(data_dir: &Path, _lock: &DataDirLock) -> anyhow::Result<Self> {
        let cluster = Cluster::prepare(data_dir).await?;
        let (socket_dir, port) = match cluster.running_postmaster()? {
            Some(running) => {
                tracing::info!(
                    pgdata = %cluster.pgdata.display(),
                    pid = running.pid,
                    "adopting the embedded PostgreSQL server left running by an earlier process"
                );
                (running.socket_dir, running.port)
            }
            None => {
                let socket_dir = cluster.socket_dir()?;
                cluster.clear_stale_socket_lock(&socket_dir)?;
                let (starter, dir) = (cluster.clone(), socket_dir.clone());
                tokio::task::spawn_blocking(move || starter.pg_ctl_start(&dir))
                    .await
                    .context("joining the pg_ctl start task")??;
                (socket_dir, PORT)
            }
        };
        // From here on, dropping `this` (an error below) stops the server.
        let this = Self {
            cluster,
            socket_dir,
            port,
            owned: true,
            stopped: false,
        };
        this.wait_until_accepting(Duration::from_secs(60)).await?;
        this.ensure_database().await?;
        tracing::info!(
            pgdata = %this.cluster.pgdata.display(),
            socket_dir = %this.socket_dir.display(),
            log = %this.cluster.log_path.display(),
            "embedded PostgreSQL is running"
        );
        Ok(this)
    }

    /// Connects to the cluster of `data_dir` that another chatd process runs
    /// (the one holding its lock), waiting up to `wait` for it to accept
    /// connections. The returned value never stops that server.
    ///
    /// # Errors
    /// When no server of that cluster comes up within `wait`.
    pub async fn attach(data_dir: &Path, wait: Duration) -> anyhow::Result<Self> {
        let deadline = Instant::now() + wait;
        let pgdata_link = data_dir.join("postgres");
        loop {
            if let Ok(pgdata) = fs::canonicalize(&pgdata_link) {
                let cluster = Cluster::existing(data_dir, pgdata)?;
                // Never removes anything: the lock holder owns the cluster.
                if let Ok(PostmasterState::Running(running)) = cluster.postmaster_state() {
                    let this = Self {
                        cluster,
                        socket_dir: running.socket_dir,
                        port: running.port,
                        owned: false,
                        stopped: false,
                    };
                    let left = deadline.saturating_duration_since(Instant::now());
                    this.wait_until_accepting(left).await?;
                    this.ensure_database().await?;
                    return Ok(this);
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "another chatd process holds the data directory {} but its embedded \
                     PostgreSQL did not come up within {wait:?}",
                    data_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Options connecting to the `chatd` database over the private socket.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options_for(DATABASE_NAME)
    }

    /// Where the socket lives, for logs.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Stops the server if this value owns it (`pg_ctl stop -m fast`, then
    /// `-m immediate` if that fails). Idempotent with the drop fallback.
    ///
    /// # Errors
    /// When neither stop mode succeeds; the message quotes `postgres.log`.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if !self.owned || self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let cluster = self.cluster.clone();
        tokio::task::spawn_blocking(move || cluster.pg_ctl_stop())
            .await
            .context("joining the pg_ctl stop task")?
    }

    fn options_for(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.socket_dir)
            .port(self.port)
            .username(SUPERUSER)
            .database(database)
            .ssl_mode(PgSslMode::Disable)
            .application_name("chatd")
    }

    async fn wait_until_accepting(&self, wait: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + wait;
        loop {
            match self.options_for("postgres").connect().await {
                Ok(conn) => {
                    conn.close().await.ok();
                    return Ok(());
                }
                Err(err) if Instant::now() >= deadline => {
                    return Err(err).with_context(|| {
                        format!(
                            "connecting to the embedded PostgreSQL in {} (see {})",
                            self.socket_dir.display(),
                            self.cluster.log_path.display()
                        )
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn ensure_database(&self) -> anyhow::Result<()> {
        let mut conn = self
            .options_for("postgres")
            .connect()
            .await
            .context("connecting to the embedded PostgreSQL")?;
        if !database::exists(&mut conn, DATABASE_NAME).await? {
            match database::create(&mut conn, DATABASE_NAME).await {
                Ok(()) => tracing::info!("created database {DATABASE_NAME}"),
                // Another process created it between our check and now.
                Err(sqlx::Error::Database(err))
                    if err.code().as_deref() == Some(database::DUPLICATE_DATABASE) => {}
                Err(err) => return Err(err).context("creating the chatd database"),
            }
        }
        conn.close().await.ok();
        Ok(())
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if self.owned && !self.stopped {
            self.stopped = true;
            if let Err(err) = self.cluster.pg_ctl_stop() {
                tracing::error!("stopping the embedded PostgreSQL: {err:#}");
            }
        }
    }
}

/// Which OS user runs the PostgreSQL binaries.
#[derive(Debug, Clone)]
enum RunAs {
    /// Not root: run them as ourselves.
    CurrentUser,
    /// Root: drop to this user (`postgres`).
    User { uid: Uid, gid: Gid },
}

impl RunAs {
    fn detect() -> anyhow::Result<Self> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Self::CurrentUser);
        }
        let user = User::from_name("postgres")
            .context("looking up the `postgres` OS user")?
            .with_context(|| {
                format!(
                    "chatd runs as root and PostgreSQL refuses to, but there is no `postgres` \
                     OS user to run it as; {INSTALL_HINT} (the package creates the user), or \
                     run chatd as a regular user"
                )
            })?;
        Ok(Self::User {
            uid: user.uid,
            gid: user.gid,
        })
    }

    fn apply(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt as _;
        if let Self::User { uid, gid, .. } = self {
            // std drops supplementary groups (setgroups) before setuid.
            command.uid(uid.as_raw()).gid(gid.as_raw());
        }
    }

    /// Gives a directory we just created to the user running PostgreSQL.
    fn chown(&self, path: &Path) -> anyhow::Result<()> {
        if let Self::User { uid, gid, .. } = self {
            std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                .with_context(|| format!("giving {} to the postgres user", path.display()))?;
        }
        Ok(())
    }

    /// Whether this user can reach (search) `dir` and every directory above.
    fn can_reach(&self, dir: &Path) -> bool {
        match self {
            Self::CurrentUser => true,
            Self::User { .. } => {
                let mut command = std::process::Command::new("test");
                command
                    .arg("-x")
                    .arg(dir)
                    .current_dir("/")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                self.apply(&mut command);
                command.status().is_ok_and(|status| status.success())
            }
        }
    }
}

/// A located cluster: binaries, paths and the user that runs it.
#[derive(Debug, Clone)]
struct Cluster {
    bindir: PathBuf,
    run_as: RunAs,
    /// Canonical path of `PGDATA`.
    pgdata: PathBuf,
    log_path: PathBuf,
}

/// What `postmaster.pid` says about the cluster's server.
#[derive(Debug)]
enum PostmasterState {
    /// No `postmaster.pid`: no server.
    Absent,
    /// A `postmaster.pid` whose process is gone or is not this cluster's.
    Stale,
    /// The server is alive but has not written its socket directory yet.
    Starting,
    /// The server is alive.
    Running(RunningPostmaster),
}

/// A live server of this cluster, as its `postmaster.pid` describes it.
#[derive(Debug)]
struct RunningPostmaster {
    pid: i32,
    port: u16,
    socket_dir: PathBuf,
}

impl Cluster {
    /// Finds the binaries, creates the directories and runs `initdb` if the
    /// cluster does not exist yet.
    async fn prepare(data_dir: &Path) -> anyhow::Result<Self> {
        let data_dir = data_dir.to_owned();
        tokio::task::spawn_blocking(move || Self::prepare_blocking(&data_dir))
            .await
            .context("joining the embedded PostgreSQL set-up task")?
    }

    fn prepare_blocking(data_dir: &Path) -> anyhow::Result<Self> {
        let bindir = locate_binaries()?;
        let run_as = RunAs::detect()?;
        create_private_dir(data_dir)?;
        if matches!(run_as, RunAs::User { .. }) {
            // Search-only for others, so the postgres user can reach its
            // directory below; nothing here becomes listable or readable.
            let mut permissions = fs::metadata(data_dir)?.permissions();
            if permissions.mode() & 0o001 == 0 {
                permissions.set_mode(permissions.mode() | 0o001);
                fs::set_permissions(data_dir, permissions)
                    .with_context(|| format!("chmod o+x {}", data_dir.display()))?;
            }
        }
        let pgdata = resolve_pgdata(data_dir, &run_as)?;
        let cluster = Self {
            bindir,
            run_as,
            pgdata,
            log_path: data_dir.join("postgres.log"),
        };
        if !cluster.pgdata.join("PG_VERSION").exists() {
            cluster.initdb()?;
        }
        Ok(cluster)
    }

    /// A cluster that another process prepared and runs (for attaching).
    fn existing(data_dir: &Path, pgdata: PathBuf) -> anyhow::Result<Self> {
        Ok(Self {
            bindir: PathBuf::new(),
            run_as: RunAs::detect()?,
            pgdata,
            log_path: data_dir.join("postgres.log"),
        })
    }

    fn initdb(&self) -> anyhow::Result<()> {
        let mut entries = fs::read_dir(&self.pgdata)
            .with_context(|| format!("reading {}", self.pgdata.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is neither empty nor a PostgreSQL cluster (no PG_VERSION); move it away \
                 and start again to create a new cluster",
                self.pgdata.display()
            );
        }
        tracing::info!(pgdata = %self.pgdata.display(), "initialising the embedded PostgreSQL cluster");
        // C.UTF-8 keeps code-point ordering and gives lower()/ILIKE Unicode
        // case mapping (title search must match "École" for "école"); a
        // machine without that locale falls back to plain C (ASCII case
        // mapping only). initdb removes what it wrote when it fails.
        let initdb = |locale: &str| {
            let mut command = self.command("initdb");
            command
                .arg("--pgdata")
                .arg(&self.pgdata)
                .arg("--username")
                .arg(SUPERUSER)
                .args([
                    "--auth-local=trust",
                    "--auth-host=reject",
                    "--encoding=UTF8",
                    locale,
                ]);
            self.run_logged(command, "initdb")
        };
        match initdb("--locale=C.UTF-8") {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::warn!(
                    "initdb with the C.UTF-8 locale failed ({err:#}); using the C locale"
                );
                initdb("--no-locale")
            }
        }
    }

    fn pg_ctl_start(&self, socket_dir: &Path) -> anyhow::Result<()> {
        tracing::info!(pgdata = %self.pgdata.display(), "starting the embedded PostgreSQL");
        // pg_ctl hands -o to `sh -c "exec postgres ..."`, hence the quoting.
        // `-h ''`: no TCP listener at all; `-k`: the private socket directory.
        let options = format!(
            "-h '' -k {} -p {PORT} -c unix_socket_permissions=0700",
            shell_quote(&socket_dir.to_string_lossy())
        );
        let mut command = self.command("pg_ctl");
        command
            .arg("start")
            .arg("--pgdata")
            .arg(&self.pgdata)
            .args(["--wait", "--timeout"])
            .arg(PG_CTL_TIMEOUT_SECS.to_string())
            .arg("-o")
            .arg(options);
        self.run_logged(command, "pg_ctl start")
    }

    fn pg_ctl_stop(&self) -> anyhow::Result<()> {
        tracing::info!(pgdata = %self.pgdata.display(), "stopping the embedded PostgreSQL");
        let mut last_error = None;
        for mode in ["fast", "immediate"] {
            let mut command = self.command("pg_ctl");
            command
                .arg("stop")
                .arg("--pgdata")
                .arg(&self.pgdata)
                .args(["--mode", mode, "--wait", "--timeout"])
                .arg(PG_CTL_TIMEOUT_SECS.to_string());
            match self.run_logged(command, "pg_ctl stop") {
                Ok(()) => return Ok(()),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.expect("two attempts were made"))
    }

    /// What `postmaster.pid` says about this cluster's server.
    fn postmaster_state(&self) -> anyhow::Result<PostmasterState> {
        let pid_file = self.pgdata.join("postmaster.pid");
        let text = match fs::read_to_string(&pid_file) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(PostmasterState::Absent);
            }
            Err(err) => {
                return Err(err).with_context(|| format!("reading {}", pid_file.display()));
            }
        };
        // Lines: pid, data directory, start time, port, first socket
        // directory, listen address, shared memory key, status. The server
        // writes them in steps while it starts.
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let Some(pid) = lines.first().and_then(|l| l.parse::<i32>().ok()) else {
            return Ok(PostmasterState::Stale);
        };
        if !is_server_of(pid, &self.pgdata) {
            return Ok(PostmasterState::Stale);
        }
        let port = lines.get(3).and_then(|l| l.parse::<u16>().ok());
        let socket_dir = lines.get(4).filter(|l| !l.is_empty()).map(PathBuf::from);
        Ok(match (port, socket_dir) {
            (Some(port), Some(socket_dir)) => PostmasterState::Running(RunningPostmaster {
                pid,
                port,
                socket_dir,
            }),
            _ => PostmasterState::Starting,
        })
    }

    /// `Some` when a server of this cluster runs; removes a stale
    /// `postmaster.pid`. Only for the holder of the data directory lock.
    fn running_postmaster(&self) -> anyhow::Result<Option<RunningPostmaster>> {
        match self.postmaster_state()? {
            PostmasterState::Running(running) => Ok(Some(running)),
            PostmasterState::Absent => Ok(None),
            PostmasterState::Starting => bail!(
                "a PostgreSQL server is starting on {} right now, started by something else \
                 than this process; try again in a moment",
                self.pgdata.display()
            ),
            PostmasterState::Stale => {
                let pid_file = self.pgdata.join("postmaster.pid");
                tracing::warn!(
                    file = %pid_file.display(),
                    "removing a stale postmaster.pid (its server is gone: the last run did not \
                     stop cleanly)"
                );
                fs::remove_file(&pid_file)
                    .with_context(|| format!("removing the stale {}", pid_file.display()))?;
                Ok(None)
            }
        }
    }

    /// Removes the socket lock file (and socket) a killed server left in
    /// our private socket directory. The server would refuse to start while
    /// the process named in it still exists, even as a zombie not yet
    /// reaped. Only for the lock holder, once no server of ours runs.
    fn clear_stale_socket_lock(&self, socket_dir: &Path) -> anyhow::Result<()> {
        let socket = socket_dir.join(format!(".s.PGSQL.{PORT}"));
        let lock = socket_dir.join(format!(".s.PGSQL.{PORT}.lock"));
        let Ok(text) = fs::read_to_string(&lock) else {
            return Ok(());
        };
        if let Some(pid) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
            && is_server_of(pid, &self.pgdata)
        {
            bail!(
                "a PostgreSQL server (pid {pid}) of {} still holds its socket; stop it first",
                self.pgdata.display()
            );
        }
        tracing::warn!(file = %lock.display(), "removing a stale socket lock file");
        for path in [&lock, &socket] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    return Err(err).with_context(|| format!("removing {}", path.display()));
                }
            }
        }
        Ok(())
    }

    /// The socket directory: `PGDATA` itself, unless the socket path would
    /// be too long for the kernel, then a private directory under /tmp.
    fn socket_dir(&self) -> anyhow::Result<PathBuf> {
        let socket_name = format!(".s.PGSQL.{PORT}");
        if self.pgdata.as_os_str().len() + 1 + socket_name.len() <= MAX_SOCKET_PATH {
            return Ok(self.pgdata.clone());
        }
        let dir = std::env::temp_dir().join(format!(
            "chatd-pg-{:016x}",
            fnv1a(self.pgdata.as_os_str().as_encoded_bytes())
        ));
        create_private_dir(&dir)?;
        self.run_as.chown(&dir)?;
        Ok(dir)
    }

    fn command(&self, program: &str) -> std::process::Command {
        let mut command = std::process::Command::new(self.bindir.join(program));
        command
            .current_dir("/")
            .stdin(Stdio::null())
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST");
        self.run_as.apply(&mut command);
        command
    }

    /// Runs `command` with its output appended to `postgres.log`; on failure
    /// the error quotes the log's last lines.
    fn run_logged(&self, mut command: std::process::Command, what: &str) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let start_len = log.metadata().map(|m| m.len()).unwrap_or(0);
        command.stdout(log.try_clone()?).stderr(log.try_clone()?);
        let status = command
            .status()
            .with_context(|| format!("running {what} ({})", self.bindir.display()))?;
        if status.success() {
            return Ok(());
        }
        bail!(
            "{what} failed ({status}); the end of {}:\n{}",
            self.log_path.display(),
            log_tail(&self.log_path, start_len, 20)
        )
    }
}

/// Finds `initdb`, `pg_ctl` and `postgres`: `$CHATD_PG_BINDIR`, then
/// `pg_config --bindir`, then the newest `/usr/lib/postgresql/*/bin`, then
/// the directory of `initdb` on `PATH`.
fn locate_binaries() -> anyhow::Result<PathBuf> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|bin| dir.join(bin).is_file())
    };
    let mut tried = Vec::new();
    if let Some(dir) = std::env::var_os("CHATD_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        if has_all(&dir) {
            return Ok(dir);
        }
        bail!(
            "CHATD_PG_BINDIR={} does not hold initdb, pg_ctl and postgres; {INSTALL_HINT}",
            dir.display()
        );
    }
    if let Ok(output) = std::process::Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_all(&dir) {
            return Ok(dir);
        }
        tried.push(format!("{} (from pg_config --bindir)", dir.display()));
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = name.split('.').map(|p| p.parse().ok()).collect();
            Some((version?, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.iter().rev().find(|(_, dir)| has_all(dir)) {
        return Ok(dir.clone());
    }
    tried.push("/usr/lib/postgresql/*/bin".to_owned());
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_all(&dir) {
                return Ok(dir);
            }
        }
    }
    tried.push("PATH".to_owned());
    bail!(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in {}; {INSTALL_HINT}",
        tried.join(", ")
    )
}

/// `D/postgres`, created (owned by the user that runs PostgreSQL) if
/// missing, or `/var/lib/chatd/<hash>/postgres` linked from there when that
/// user cannot reach `D`. Returns the canonical path.
fn resolve_pgdata(data_dir: &Path, run_as: &RunAs) -> anyhow::Result<PathBuf> {
    let link = data_dir.join("postgres");
    if fs::symlink_metadata(&link).is_ok() {
        return fs::canonicalize(&link).with_context(|| {
            format!(
                "{} exists but does not lead to a directory (a dangling link?)",
                link.display()
            )
        });
    }
    if !run_as.can_reach(data_dir) {
        let data_dir = fs::canonicalize(data_dir)?;
        let home = Path::new(ROOT_FALLBACK_DIR).join(format!(
            "{:016x}",
            fnv1a(data_dir.as_os_str().as_encoded_bytes())
        ));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&home)
            .with_context(|| format!("creating {}", home.display()))?;
        let real = home.join("postgres");
        create_private_dir(&real)?;
        run_as.chown(&real)?;
        std::os::unix::fs::symlink(&real, &link)
            .with_context(|| format!("linking {} to {}", link.display(), real.display()))?;
        tracing::warn!(
            cluster = %real.display(),
            link = %link.display(),
            "the postgres user cannot reach the data directory (PostgreSQL refuses to run as \
             root, so it runs as `postgres`); the cluster lives outside it, linked from it"
        );
        return Ok(real);
    }
    create_private_dir(&link)?;
    run_as.chown(&link)?;
    Ok(fs::canonicalize(&link)?)
}

/// Whether `pid` is alive and is a server of the cluster in `pgdata` (a
/// postmaster's working directory is its data directory).
fn is_server_of(pid: i32, pgdata: &Path) -> bool {
    match fs::read_link(format!("/proc/{pid}/cwd")) {
        Ok(cwd) => cwd == pgdata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
        // Alive but not ours to inspect: assume it is the server rather than
        // remove the pid file of a running one.
        Err(_) => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// Creates `dir` (and its parents) with mode 0700 if it does not exist.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// The last `max_lines` lines written to `path` after byte `from`.
fn log_tail(path: &Path, from: u64, max_lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(from));
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

/// Quotes `s` for a POSIX shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// FNV-1a, 64 bits: a hash that is stable across Rust versions, for naming
/// directories after paths.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("/a b/c'd"), r"'/a b/c'\''d'");
    }

    #[test]
    fn fnv1a_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
