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
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2
                        AND heartbeat_at >= now() - make_interval(secs => $3))",
    )
    .bind(chat_id)
    .bind(runner_id)
    .bind(stale_after_secs)
    .fetch_one(conn)
    .await
}

/// Inserts or refreshes the heartbeat row of `(chat_id, runner_id)`.
pub async fn upsert(conn: &mut PgConnection, chat_id: Uuid, runner_id: Uuid) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at) VALUES ($1, $2, now())
         ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at",
    )
    .bind(chat_id)
    .bind(runner_id)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Inserts or refreshes the heartbeat rows of every `(chat id, runner id)`
/// of `runners` in one statement (the spec's heartbeat upsert), skipping
/// chats deleted meanwhile.
pub async fn upsert_many(conn: impl PgExecutor<'_>, runners: &[(Uuid, Uuid)]) -> sqlx::Result<()> {
    let (chats, runners): (Vec<Uuid>, Vec<Uuid>) = runners.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO chat_heartbeats (chat_id, runner_id, heartbeat_at)
         SELECT r.chat_id, r.runner_id, now()
         FROM unnest($1::uuid[], $2::uuid[]) AS r(chat_id, runner_id)
         WHERE EXISTS (SELECT 1 FROM chats c WHERE c.id = r.chat_id)
         ON CONFLICT (chat_id, runner_id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at",
    )
    .bind(&chats)
    .bind(&runners)
    .execute(conn)
    .await
    .map(|_| ())
}

/// Deletes the heartbeat row of `(chat_id, runner_id)`.
pub async fn delete(conn: &mut PgConnection, chat_id: Uuid, runner_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2")
        .bind(chat_id)
        .bind(runner_id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Deletes every heartbeat row older than `older_than_secs`; returns how
/// many.
pub async fn delete_stale(conn: impl PgExecutor<'_>, older_than_secs: f64) -> sqlx::Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM chat_heartbeats WHERE heartbeat_at < now() - make_interval(secs => $1)",
    )
    .bind(older_than_secs)
    .execute(conn)
    .await?
    .rows_affected())
}
