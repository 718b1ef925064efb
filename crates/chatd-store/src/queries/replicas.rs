//! SQL of the `replicas` table: one row per running replica, `id` = the
//! `worker_id` it writes on the chats it owns, with the `advertise_url` of
//! its parts endpoint (API.md "Workers and replicas"). Times are database
//! time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::rules::runnable_chat_sql;

/// A row of `replicas`.
///
/// Example: [`list`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReplicaRow {
    /// Replica id: the `worker_id` it writes on the chats it owns.
    pub id: Uuid,
    /// Where other replicas reach its parts endpoint.
    pub advertise_url: String,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// Last refresh.
    pub last_seen_at: DateTime<Utc>,
}

/// Every registered replica, oldest first.
///
/// # Example
///
/// ```
/// use chatd_store::queries::replicas;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = uuid::Uuid::new_v4();
/// replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
/// let rows = replicas::list(pool).await?;
/// assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id]);
/// # Ok(()) }
/// ```
pub async fn list(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<ReplicaRow>> {
    sqlx::query_as!(
        ReplicaRow,
        "SELECT id, advertise_url, started_at, last_seen_at FROM replicas ORDER BY started_at, id",
    )
    .fetch_all(conn)
    .await
}

/// The advertised URL of replica `id`, if it is registered.
///
/// # Example
///
/// ```
/// use chatd_store::queries::replicas;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = uuid::Uuid::new_v4();
/// replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
/// let url = replicas::advertise_url(pool, id).await?;
/// assert_eq!(url.as_deref(), Some("http://10.0.0.1:3000"));
/// # Ok(()) }
/// ```
pub async fn advertise_url(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT advertise_url FROM replicas WHERE id = $1", id)
        .fetch_optional(conn)
        .await
}

/// Registers replica `id` at `advertise_url`, or refreshes its row
/// (`last_seen_at = now()`, the URL overwritten).
///
/// # Example
///
/// ```
/// use chatd_store::queries::replicas;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = uuid::Uuid::new_v4();
/// replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
/// // A refresh moves last_seen_at and may change the URL.
/// replicas::upsert(pool, id, "http://10.0.0.2:3000").await?;
/// let url = replicas::advertise_url(pool, id).await?;
/// assert_eq!(url.as_deref(), Some("http://10.0.0.2:3000"));
/// # Ok(()) }
/// ```
pub async fn upsert(conn: impl PgExecutor<'_>, id: Uuid, advertise_url: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO replicas (id, advertise_url) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), advertise_url = EXCLUDED.advertise_url",
        id,
        advertise_url,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the row of replica `id`.
///
/// # Example
///
/// ```
/// use chatd_store::queries::replicas;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = uuid::Uuid::new_v4();
/// replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
/// replicas::delete(pool, id).await?;
/// assert!(replicas::advertise_url(pool, id).await?.is_none());
/// # Ok(()) }
/// ```
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM replicas WHERE id = $1", id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Deletes the rows, other than `keep`'s, whose `last_seen_at` is older than
/// `silent_for` and whose replica owns no runnable chat
/// ([`crate::rules::RUNNABLE_CHAT_SQL`] with its `worker_id`: its lease must
/// expire and another replica take it first, and its parts may still be
/// relayed); returns how many.
///
/// # Example
///
/// ```
/// use chatd_store::queries::replicas;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let id = uuid::Uuid::new_v4();
/// replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
/// use std::time::Duration;
/// let me = uuid::Uuid::new_v4();
/// // Not silent for an hour yet: kept. Silent at all (for no time): pruned.
/// assert_eq!(replicas::prune(pool, me, Duration::from_secs(3600)).await?, 0);
/// assert_eq!(replicas::prune(pool, me, Duration::ZERO).await?, 1);
/// // Tested with owned chats by chatd's tests/it/replicas.rs.
/// # Ok(()) }
/// ```
pub async fn prune(
    conn: impl PgExecutor<'_>,
    keep: Uuid,
    silent_for: Duration,
) -> sqlx::Result<u64> {
    // Run-time checked: the condition is `crate::rules`'s `concat!` fragment.
    Ok(sqlx::query(concat!(
        "DELETE FROM replicas r WHERE r.id <> $1
           AND r.last_seen_at < now() - make_interval(secs => $2)
           AND NOT EXISTS (SELECT 1 FROM chats c WHERE c.worker_id = r.id AND ",
        runnable_chat_sql!("c."),
        ")"
    ))
    .bind(keep)
    .bind(silent_for.as_secs_f64())
    .execute(conn)
    .await?
    .rows_affected())
}
