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

/// Whether the database still has its heartbeats: the marker row of
/// `chat_heartbeats_epoch` exists (see [`recover_lost`]). Read inside the
/// transaction that decides a takeover, so that the answer holds until it
/// commits: a promotion or crash recovery that loses them ends it too.
pub async fn intact(conn: impl PgExecutor<'_>) -> sqlx::Result<bool> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM chat_heartbeats_epoch) AS "intact!""#)
        .fetch_one(conn)
        .await
}

/// Gives back the heartbeats that the database lost (issue 36; migration
/// `0022_heartbeat_epoch`): `chat_heartbeats` is UNLOGGED, so crash recovery
/// empties it and a promoted standby never had its rows. Its marker,
/// the one row of the UNLOGGED `chat_heartbeats_epoch`, is lost with it.
/// When the marker is missing, this inserts it again and, in the same
/// statement, a heartbeat as of now for every chat a runner holds
/// (`worker_id` and `runner_id` set) that has none; otherwise it changes
/// nothing (the marker's primary key turns the insert into a no-op). Two
/// replicas that find it missing at once: one inserts, the other waits for
/// its commit and then does nothing.
///
/// The acquisition loop calls it when a claim finds a held chat without a
/// fresh heartbeat and the marker missing ([`intact`]), so a failover costs
/// runners that are alive nothing (they refresh their rows within the
/// heartbeat interval, 9 s, well within the lease, 30 s), and the chats of
/// runners that died with the old primary are taken over one lease after
/// the recovery, as after any crash. Returns how many heartbeats were given
/// back (0 when nothing was lost).
///
/// # Errors
/// Database errors.
pub async fn recover_lost(conn: impl PgExecutor<'_>) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "WITH epoch AS (
             INSERT INTO chat_heartbeats_epoch (id) VALUES (true)
             ON CONFLICT (id) DO NOTHING
             RETURNING started_at
         )
         INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
         SELECT c.id, c.runner_id, e.started_at
           FROM chats c CROSS JOIN epoch e
          WHERE c.worker_id IS NOT NULL AND c.runner_id IS NOT NULL
          ORDER BY c.id, c.runner_id
         ON CONFLICT (chat_id, runner_id) DO NOTHING",
    )
    .execute(conn)
    .await?
    .rows_affected())
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
    async fn recover_lost_gives_back_the_heartbeats_the_database_lost() -> anyhow::Result<()> {
        use crate::queries::heartbeats;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let pool = fx.pool();
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let runner = uuid::Uuid::new_v4();
        sqlx::query("UPDATE chats SET worker_id = $2, runner_id = $3 WHERE id = $1")
            .bind(chat.id)
            .bind(uuid::Uuid::new_v4())
            .bind(runner)
            .execute(pool)
            .await?;
        // Nothing was lost: the marker is there, a missing heartbeat stays missing.
        assert!(heartbeats::intact(pool).await?);
        assert_eq!(heartbeats::recover_lost(pool).await?, 0);
        assert!(!heartbeats::is_fresh(pool, chat.id, runner, 30.0).await?);
        // What crash recovery or a promotion does to the UNLOGGED tables.
        sqlx::query("TRUNCATE chat_heartbeats, chat_heartbeats_epoch")
            .execute(pool)
            .await?;
        assert!(!heartbeats::intact(pool).await?);
        assert_eq!(heartbeats::recover_lost(pool).await?, 1);
        assert!(heartbeats::intact(pool).await?);
        assert!(heartbeats::is_fresh(pool, chat.id, runner, 30.0).await?);
        // Once: the marker is back.
        heartbeats::delete(&mut *pool.acquire().await?, chat.id, runner).await?;
        assert_eq!(heartbeats::recover_lost(pool).await?, 0);
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
