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
    sqlx::query_as!(
        ReplicaRow,
        "SELECT id, advertise_url, started_at, last_seen_at FROM replicas ORDER BY started_at, id",
    )
    .fetch_all(conn)
    .await
}

/// The advertised URL of replica `id`, if it is registered.
pub async fn advertise_url(conn: impl PgExecutor<'_>, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT advertise_url FROM replicas WHERE id = $1", id)
        .fetch_optional(conn)
        .await
}

/// Registers replica `id` at `advertise_url`, or refreshes its row
/// (`last_seen_at = now()`, the URL overwritten).
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

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn list_every_registered_replica_oldest_first() -> anyhow::Result<()> {
        use crate::queries::replicas;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = uuid::Uuid::new_v4();
        replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
        let rows = replicas::list(pool).await?;
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id]);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn advertise_url_the_advertised_url_of_replica_id_if_it_is_registered()
    -> anyhow::Result<()> {
        use crate::queries::replicas;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = uuid::Uuid::new_v4();
        replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
        let url = replicas::advertise_url(pool, id).await?;
        assert_eq!(url.as_deref(), Some("http://10.0.0.1:3000"));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_registers_replica_id_at_advertise_url_or_refreshes_its_row_last()
    -> anyhow::Result<()> {
        use crate::queries::replicas;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = uuid::Uuid::new_v4();
        replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
        // A refresh moves last_seen_at and may change the URL.
        replicas::upsert(pool, id, "http://10.0.0.2:3000").await?;
        let url = replicas::advertise_url(pool, id).await?;
        assert_eq!(url.as_deref(), Some("http://10.0.0.2:3000"));
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deletes_the_row_of_replica_id() -> anyhow::Result<()> {
        use crate::queries::replicas;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = uuid::Uuid::new_v4();
        replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
        replicas::delete(pool, id).await?;
        assert!(replicas::advertise_url(pool, id).await?.is_none());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn prune_deletes_the_rows_other_than_keep_s_whose_last_seen_at_is_older()
    -> anyhow::Result<()> {
        use crate::queries::replicas;
        let db = chatd_testkit::TestDatabase::new(&crate::MIGRATOR).await?;
        let pool = db.pool();
        let id = uuid::Uuid::new_v4();
        replicas::upsert(pool, id, "http://10.0.0.1:3000").await?;
        use std::time::Duration;
        let me = uuid::Uuid::new_v4();
        // Not silent for an hour yet: kept. Silent at all (for no time): pruned.
        assert_eq!(
            replicas::prune(pool, me, Duration::from_secs(3600)).await?,
            0
        );
        assert_eq!(replicas::prune(pool, me, Duration::ZERO).await?, 1);
        // Tested with owned chats by chatd's tests/it/replicas.rs.
        Ok(())
    }
}
