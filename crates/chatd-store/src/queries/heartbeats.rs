//! SQL of the `chat_heartbeats` table: one row per `(chat, runner)` that a
//! worker refreshes while it drives the chat (spec "Runner manager",
//! "Acquisition loop"). Times are database time.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// Whether `(chat_id, runner_id)` has a heartbeat newer than
/// `stale_after_secs`.
pub async fn is_fresh(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    runner_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2
                          AND heartbeat_at >= now() - make_interval(secs => $3)) AS "fresh!""#,
        chat_id,
        runner_id,
        stale_after_secs,
    )
    .fetch_one(conn)
    .await
}

/// Inserts or refreshes the heartbeat row of `(chat_id, runner_id)`.
pub async fn upsert(conn: &mut PgConnection, chat_id: Uuid, runner_id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at) VALUES ($1, $2, now())
         ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at",
        chat_id,
        runner_id,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Inserts or refreshes the heartbeat rows of every `(chat id, runner id)`
/// of `runners` in one statement (the spec's heartbeat upsert), skipping
/// chats deleted meanwhile. Rows are written in key order, so two upserts
/// that share rows (a replica's old and new runner lists, two replicas
/// during a takeover) wait on each other instead of deadlocking.
pub async fn upsert_many(conn: impl PgExecutor<'_>, runners: &[(Uuid, Uuid)]) -> sqlx::Result<()> {
    let mut sorted = runners.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let (chats, runners): (Vec<Uuid>, Vec<Uuid>) = sorted.into_iter().unzip();
    sqlx::query!(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
         SELECT r.chat_id, r.runner_id, now()
         FROM unnest($1::uuid[], $2::uuid[]) AS r(chat_id, runner_id)
         WHERE EXISTS (SELECT 1 FROM chats c WHERE c.id = r.chat_id)
         ORDER BY r.chat_id, r.runner_id
         ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at",
        &chats,
        &runners,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the heartbeat row of `(chat_id, runner_id)`.
pub async fn delete(conn: &mut PgConnection, chat_id: Uuid, runner_id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2",
        chat_id,
        runner_id,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes every heartbeat row older than `older_than_secs`; returns how
/// many. Rows another statement holds (a runner's upsert refreshing it) are
/// skipped, not waited for: the cleanup never joins a lock cycle, and a row
/// being refreshed is not stale.
pub async fn delete_stale(conn: impl PgExecutor<'_>, older_than_secs: f64) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM chat_heartbeats WHERE (chat_id, runner_id) IN (
             SELECT chat_id, runner_id FROM chat_heartbeats
             WHERE heartbeat_at < now() - make_interval(secs => $1)
             FOR UPDATE SKIP LOCKED)",
        older_than_secs,
    )
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
    async fn is_fresh_whether_chat_id_runner_id_has_a_heartbeat_newer_than_stale()
    -> anyhow::Result<()> {
        use crate::queries::heartbeats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let runner = uuid::Uuid::new_v4();
        assert!(!heartbeats::is_fresh(pool, chat.id, runner, 30.0).await?);
        heartbeats::upsert(&mut *pool.acquire().await?, chat.id, runner).await?;
        assert!(heartbeats::is_fresh(pool, chat.id, runner, 30.0).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn upsert_many_inserts_or_refreshes_the_heartbeat_rows_of_every_chat_id()
    -> anyhow::Result<()> {
        use crate::queries::heartbeats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let runner = uuid::Uuid::new_v4();
        // A runner of a chat that no longer exists is skipped.
        let gone = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        heartbeats::upsert_many(pool, &[(chat.id, runner), gone]).await?;
        assert!(heartbeats::is_fresh(pool, chat.id, runner, 30.0).await?);
        assert!(!heartbeats::is_fresh(pool, gone.0, gone.1, 30.0).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deletes_the_heartbeat_row_of_chat_id_runner_id() -> anyhow::Result<()> {
        use crate::queries::heartbeats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let runner = uuid::Uuid::new_v4();
        let mut conn = pool.acquire().await?;
        heartbeats::upsert(&mut conn, chat.id, runner).await?;
        heartbeats::delete(&mut conn, chat.id, runner).await?;
        assert!(!heartbeats::is_fresh(&mut *conn, chat.id, runner, 30.0).await?);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn delete_stale_deletes_every_heartbeat_row_older_than_older_than_secs()
    -> anyhow::Result<()> {
        use crate::queries::heartbeats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        heartbeats::upsert_many(pool, &[(chat.id, uuid::Uuid::new_v4())]).await?;
        assert_eq!(
            heartbeats::delete_stale(pool, 30.0).await?,
            0,
            "fresh rows stay"
        );
        assert_eq!(heartbeats::delete_stale(pool, -1.0).await?, 1);
        Ok(())
    }
}
