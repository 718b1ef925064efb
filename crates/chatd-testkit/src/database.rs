//! Fresh databases per test.
//!
//! The server is taken from `CHATD_TEST_DATABASE_URL`, then `DATABASE_URL`,
//! then `postgres://postgres@127.0.0.1:5432/postgres`. A template database
//! named after a hash of the migrations is created once (under an advisory
//! lock, since nextest runs every test in its own process) and each
//! [`TestDatabase`] is a `CREATE DATABASE ... TEMPLATE` copy of it, dropped
//! again when the value is dropped.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use anyhow::Context as _;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgPool};

/// The maintenance database URL tests connect to in order to create their own.
pub fn admin_url() -> String {
    std::env::var("CHATD_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database that exists for the lifetime of this value.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    pool: PgPool,
}

impl TestDatabase {
    /// Creates a new empty database with `migrator`'s migrations applied.
    ///
    /// # Errors
    /// When the server is unreachable or a migration fails.
    pub async fn new(migrator: &Migrator) -> anyhow::Result<Self> {
        let admin: PgConnectOptions = admin_url()
            .parse()
            .context("parsing the test database URL")?;
        let template = ensure_template(&admin, migrator).await?;
        let name = format!("chatd_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = admin
            .connect()
            .await
            .context("connecting to the test PostgreSQL server")?;
        let mut tries = 0;
        loop {
            let sql = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
            match sqlx::query(AssertSqlSafe(sql.clone()))
                .execute(&mut conn)
                .await
            {
                Ok(_) => break,
                // Another process may be creating from the same template at this instant.
                Err(err)
                    if tries < 50
                        && err.to_string().contains("is being accessed by other users") =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(err) => return Err(err).context("creating the test database"),
            }
        }
        conn.close().await.ok();
        let options = admin.clone().database(&name);
        let url = options.to_url_lossy().to_string();
        // As every chatd session (chatd's `database::IDLE_IN_TRANSACTION_TIMEOUT`):
        // in-process test servers use this pool.
        let pool = chatd_store::pool_options(20)
            .connect_with(options.options([("idle_in_transaction_session_timeout", "60s")]))
            .await?;
        Ok(Self { name, url, pool })
    }

    /// A pool of connections to this database (at most 20), whose sessions
    /// set `idle_in_transaction_session_timeout` to 60 s as chatd's do.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database's URL, for processes started by the test.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Dropping happens outside any async context we can rely on, so the
        // cleanup runs on a thread with its own small runtime. It must not
        // wait for the pool: on a current-thread test runtime the tasks that
        // would return its connections cannot run while this thread blocks.
        // `WITH (FORCE)` terminates the pool's connections instead.
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(admin) = admin_url().parse::<PgConnectOptions>() else {
                    return;
                };
                if let Ok(mut conn) = admin.connect().await {
                    let _ = sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            });
        });
        let _ = handle.join();
    }
}

async fn ensure_template(admin: &PgConnectOptions, migrator: &Migrator) -> anyhow::Result<String> {
    let mut hasher = DefaultHasher::new();
    for m in migrator.iter() {
        m.version.hash(&mut hasher);
        m.checksum.hash(&mut hasher);
    }
    let template = format!("chatd_tmpl_{:016x}", hasher.finish());
    let mut conn = admin
        .connect()
        .await
        .context("connecting to the test PostgreSQL server")?;
    sqlx::query("SELECT pg_advisory_lock(770013)")
        .execute(&mut conn)
        .await?;
    let result = async {
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate")
                .bind(&template)
                .fetch_optional(&mut conn)
                .await?;
        if exists.is_none() {
            let building = format!("{template}_build");
            sqlx::query(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await?;
            sqlx::query(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{template}\" WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await?;
            sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{building}\"")))
                .execute(&mut conn)
                .await?;
            {
                let mut db = admin.clone().database(&building).connect().await?;
                migrator
                    .run(&mut db)
                    .await
                    .context("migrating the template database")?;
                db.close().await?;
            }
            sqlx::query(AssertSqlSafe(format!(
                "ALTER DATABASE \"{building}\" RENAME TO \"{template}\""
            )))
            .execute(&mut conn)
            .await?;
            sqlx::query(AssertSqlSafe(format!(
                "ALTER DATABASE \"{template}\" WITH IS_TEMPLATE true"
            )))
            .execute(&mut conn)
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    sqlx::query("SELECT pg_advisory_unlock(770013)")
        .execute(&mut conn)
        .await
        .ok();
    conn.close().await.ok();
    result?;
    Ok(template)
}
