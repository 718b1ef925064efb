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
pub async fn list(conn: impl PgExecutor<'_>) -> sqlx::Result<Vec<ReplicaRow>> {
    sqlx::query_as(
        "SELECT id, advertise_url, started_at, last_seen_at FROM replicas ORDER BY started_at, id",
    )
    .fetch_all(conn)
    .await
}

/// The advertised URL of replica `id`, if it is registered.
pub async fn advertise_url(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT advertise_url FROM replicas WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Registers replica `id` at `advertise_url`, or refreshes its row
/// (`last_seen_at = now()`, the URL overwritten).
pub async fn upsert(conn: impl PgExecutor<'_>, id: Uuid, advertise_url: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO replicas (id, advertise_url) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), advertise_url = EXCLUDED.advertise_url",
    )
    .bind(id)
    .bind(advertise_url)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the row of replica `id`.
pub async fn delete(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM replicas WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Deletes the rows, other than `keep`'s, whose `last_seen_at` is older than
/// `silent_for` and whose replica owns no runnable chat
/// ([`crate::rules::RUNNABLE_CHAT_SQL`] with its `worker_id`: its lease must
/// expire and another replica take it first, and its parts may still be
/// relayed); returns how many.
pub async fn prune(
    conn: impl PgExecutor<'_>,
    keep: Uuid,
    silent_for: Duration,
) -> sqlx::Result<u64> {
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
