//! Opening the database a command works on: the server of `--postgres-url`,
//! or the embedded cluster of `--data-dir` ([`crate::embedded_pg`]).
//!
//! Every session of the pool, and so every session the service opens (the
//! `Idempotency-Key` claim pool and the LISTEN/NOTIFY listener connect with
//! the pool's options), sets `idle_in_transaction_session_timeout` to
//! [`IDLE_IN_TRANSACTION_TIMEOUT`] (API.md "Slow or hostile clients"): a
//! session left idle inside a transaction, by a bug or a stuck task, is
//! ended by PostgreSQL, its locks released; the pool replaces the broken
//! connection when it is next used.

use std::path::Path;
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::DatabaseArgs;
use crate::embedded_pg::{DataDirLock, EmbeddedPostgres};

/// How long to keep trying to reach an explicit `--postgres-url` at startup.
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);

/// `idle_in_transaction_session_timeout` of every session: 60 s. No
/// transaction of chatd waits on anything but the database (request bodies
/// are read before a connection is taken; model calls run outside
/// transactions), so one idle this long is stuck, and would otherwise hold
/// a pool connection and its row locks forever.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// `options` with the session settings of every chatd connection:
/// `idle_in_transaction_session_timeout = idle_in_transaction` (in
/// milliseconds, sent in the startup packet, so it holds from the first
/// statement and survives `DISCARD ALL`).
pub fn session_options(
    options: PgConnectOptions,
    idle_in_transaction: Duration,
) -> PgConnectOptions {
    options.options([(
        "idle_in_transaction_session_timeout",
        format!("{}ms", idle_in_transaction.as_millis().max(1)),
    )])
}

/// Who opens the database, which decides what happens when another chatd
/// process already runs the embedded cluster of the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `chatd serve`: owns the embedded cluster for its lifetime; a data
    /// directory held by another process is an error (after a short wait).
    Server,
    /// A short command (`chatd token create`, `chatd user passwd`):
    /// connects to the cluster of a running server if there is one,
    /// otherwise starts the existing cluster and stops it again when done.
    /// It never creates a cluster: a data directory without one is an
    /// error naming it ([`existing_cluster`]).
    Tool,
}

/// A connection pool, plus the embedded server behind it when there is one.
#[derive(Debug)]
pub struct Database {
    /// The pool (of the `chatd` database when embedded).
    pub pool: PgPool,
    /// A human-readable description of where the database is, for logs.
    pub location: String,
    embedded: Option<(EmbeddedPostgres, Option<DataDirLock>)>,
}

impl Database {
    /// Connects to `--postgres-url`, or starts (or attaches to) the embedded
    /// cluster of the data directory, with a pool of at most
    /// `max_connections`.
    ///
    /// # Errors
    /// When the URL does not parse, the server stays unreachable for 30 s,
    /// or the embedded cluster cannot be started (see
    /// [`EmbeddedPostgres::start`]). An embedded server started here is
    /// stopped again before the error is returned.
    pub async fn open(
        args: &DatabaseArgs,
        role: Role,
        max_connections: u32,
    ) -> anyhow::Result<Self> {
        let pool_options = chatd_store::pool_options(max_connections)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(10));
        if let Some(url) = &args.postgres_url {
            let options = PgConnectOptions::from_str(url)
                .with_context(|| format!("parsing --postgres-url {}", redact(url)))?
                .application_name("chatd");
            let options = session_options(options, IDLE_IN_TRANSACTION_TIMEOUT);
            let pool = connect_patiently(pool_options, options, &redact(url)).await?;
            return Ok(Self {
                pool,
                location: redact(url),
                embedded: None,
            });
        }
        let data_dir = args.data_dir()?;
        let (embedded, lock) = match role {
            Role::Server => {
                let lock = DataDirLock::acquire(&data_dir, Duration::from_secs(5)).await?;
                (EmbeddedPostgres::start(&data_dir, &lock).await?, Some(lock))
            }
            Role::Tool => match tool_lock(&data_dir, args)? {
                Some(lock) => {
                    tracing::info!(
                        data_dir = %data_dir.display(),
                        "no chatd server runs on this data directory: starting its PostgreSQL \
                         for this command and stopping it afterwards"
                    );
                    (EmbeddedPostgres::start(&data_dir, &lock).await?, Some(lock))
                }
                None => {
                    tracing::info!(
                        data_dir = %data_dir.display(),
                        "a chatd server runs on this data directory: using its PostgreSQL"
                    );
                    (
                        EmbeddedPostgres::attach(&data_dir, Duration::from_secs(60)).await?,
                        None,
                    )
                }
            },
        };
        let location = format!(
            "embedded PostgreSQL in {} (socket directory {})",
            data_dir.display(),
            embedded.socket_dir().display()
        );
        // On error `embedded` is dropped here, which stops the server.
        let pool = pool_options
            .connect_with(session_options(
                embedded.connect_options(),
                IDLE_IN_TRANSACTION_TIMEOUT,
            ))
            .await
            .context("connecting to the embedded PostgreSQL")?;
        Ok(Self {
            pool,
            location,
            embedded: Some((embedded, lock)),
        })
    }

    /// Closes the pool, then stops the embedded server if this process owns
    /// it, then releases the data directory lock.
    ///
    /// # Errors
    /// When the embedded server does not stop.
    pub async fn close(self) -> anyhow::Result<()> {
        self.pool.close().await;
        if let Some((embedded, lock)) = self.embedded {
            embedded.stop().await?;
            drop(lock);
        }
        Ok(())
    }
}

/// What a [`Role::Tool`] command gets of `data_dir`: its lock (`Some`: no
/// server runs there; the cluster exists and this process may start it),
/// or `None` when a server holds it (the caller attaches to its cluster,
/// even one still being initialised). Nothing is created when there is
/// neither a cluster nor a server.
///
/// # Errors
/// As [`existing_cluster`], or the lock file cannot be opened.
fn tool_lock(data_dir: &Path, args: &DatabaseArgs) -> anyhow::Result<Option<DataDirLock>> {
    if let Err(missing) = existing_cluster(data_dir, args) {
        // A server starting on a fresh directory holds its lock during
        // initdb; `try_acquire` creates nothing when the lock file exists.
        if !data_dir.join("chatd.lock").is_file() {
            return Err(missing);
        }
        return match DataDirLock::try_acquire(data_dir)? {
            None => Ok(None),
            Some(_free) => Err(missing),
        };
    }
    DataDirLock::try_acquire(data_dir)
}

/// Checks that `data_dir` holds a chatd cluster (`postgres/PG_VERSION`),
/// which a [`Role::Tool`] command may use; it never creates one, so a
/// command run without the server's `--data-dir` cannot quietly make a
/// second database that the server never reads (issue 34, problem 8).
///
/// # Errors
/// No cluster in `data_dir`: the message names the directory, where its
/// name came from, and the ways to name the server's database.
fn existing_cluster(data_dir: &Path, args: &DatabaseArgs) -> anyhow::Result<()> {
    if data_dir.join("postgres").join("PG_VERSION").is_file() {
        return Ok(());
    }
    let source = data_dir_source(args);
    anyhow::bail!(
        "no chatd database in {dir} ({source}): nothing was created.\n  \
         This command works on the database of a chatd server. Start the server first \
         (`scripts/run.sh`, or `chatd serve --data-dir DIR`), or name the database the \
         running server uses: --data-dir DIR or CHATD_DATA_DIR (the server's --data-dir), \
         or --postgres-url URL (CHATD_POSTGRES_URL) for a server run on an external \
         PostgreSQL.",
        dir = data_dir.display(),
    )
}

/// Where the data directory of `args` came from, for [`existing_cluster`]'s
/// message.
fn data_dir_source(args: &DatabaseArgs) -> String {
    if args.data_dir.is_some() {
        let from_env = std::env::var_os("CHATD_DATA_DIR")
            .is_some_and(|v| Some(std::path::PathBuf::from(v)) == args.data_dir);
        return if from_env {
            "from CHATD_DATA_DIR".to_owned()
        } else {
            "from --data-dir".to_owned()
        };
    }
    if std::env::var_os("XDG_DATA_HOME").is_some_and(|v| !v.is_empty()) {
        "the default, under XDG_DATA_HOME; no --data-dir or CHATD_DATA_DIR given".to_owned()
    } else {
        "the default, ~/.local/share/chatd; no --data-dir or CHATD_DATA_DIR given".to_owned()
    }
}

async fn connect_patiently(
    pool_options: PgPoolOptions,
    options: PgConnectOptions,
    shown: &str,
) -> anyhow::Result<PgPool> {
    let deadline = Instant::now() + CONNECT_PATIENCE;
    let mut delay = Duration::from_millis(200);
    loop {
        match pool_options.clone().connect_with(options.clone()).await {
            Ok(pool) => return Ok(pool),
            Err(err) if Instant::now() + delay < deadline => {
                tracing::warn!("connecting to {shown}: {err}; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(err) => return Err(err).with_context(|| format!("connecting to {shown}")),
        }
    }
}

/// Hides a password in a URL for logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;

    /// A session idle inside a transaction past the timeout is ended by
    /// PostgreSQL; the pool serves the next query on a fresh connection.
    #[tokio::test]
    async fn a_session_idle_in_a_transaction_is_ended_and_the_pool_recovers() -> anyhow::Result<()>
    {
        let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?;
        let options = session_options(
            PgConnectOptions::from_str(db.url())?,
            Duration::from_millis(500),
        );
        let shown: String = {
            let mut conn = sqlx::PgConnection::connect_with(&options).await?;
            sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
                .fetch_one(&mut conn)
                .await?
        };
        assert_eq!(shown, "500ms");

        let pool = chatd_store::pool_options(1).connect_with(options).await?;
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT 1").execute(&mut *tx).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let stuck = sqlx::query("SELECT 1").execute(&mut *tx).await;
        assert!(stuck.is_err(), "the session was ended: {stuck:?}");
        drop(tx);
        // The one connection of the pool was broken; the next query gets a
        // fresh one.
        let v: i32 = sqlx::query_scalar("SELECT 7").fetch_one(&pool).await?;
        assert_eq!(v, 7);
        Ok(())
    }
}
