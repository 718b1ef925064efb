//! SQL of the `chat_shares` table: read-only shares of a chat with named
//! users (API.md "Sign-in, search, sharing and export"). A user a chat is
//! shared with reads it (chat, messages, streams, search) and its
//! sub-agents (a share of a root chat covers its family), and mutates
//! nothing; deleting the share ends that.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// One share of a chat, with the user's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRow {
    /// The user the chat is shared with.
    pub user_id: Uuid,
    /// Their user name.
    pub username: String,
    /// When the chat was shared with them.
    pub created_at: DateTime<Utc>,
}

/// Shares chat `chat_id` with `user_id` (idempotent: sharing again keeps
/// the first share) and returns the share. `None` when there is no such
/// user.
pub async fn insert(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    user_id: Uuid,
    created_by: Uuid,
) -> sqlx::Result<Option<ShareRow>> {
    sqlx::query_as!(
        ShareRow,
        "WITH ins AS (
             INSERT INTO chat_shares (chat_id, user_id, created_by)
             SELECT $1, u.id, $3 FROM users u WHERE u.id = $2
             ON CONFLICT (chat_id, user_id) DO UPDATE SET chat_id = EXCLUDED.chat_id
             RETURNING user_id, created_at
         )
         SELECT ins.user_id AS \"user_id!\", u.username AS \"username!\",
                ins.created_at AS \"created_at!\"
         FROM ins JOIN users u ON u.id = ins.user_id",
        chat_id,
        user_id,
        created_by,
    )
    .fetch_optional(conn)
    .await
}

/// The shares of chat `chat_id`, oldest first.
pub async fn list(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<ShareRow>> {
    sqlx::query_as!(
        ShareRow,
        "SELECT s.user_id, u.username, s.created_at
         FROM chat_shares s JOIN users u ON u.id = s.user_id
         WHERE s.chat_id = $1 ORDER BY s.created_at, s.user_id",
        chat_id,
    )
    .fetch_all(conn)
    .await
}

/// Revokes the share of chat `chat_id` with `user_id`; `false` when there
/// was none.
pub async fn delete(conn: impl PgExecutor<'_>, chat_id: Uuid, user_id: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "DELETE FROM chat_shares WHERE chat_id = $1 AND user_id = $2",
        chat_id,
        user_id,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Whether `user_id` may read chat `chat_id` through a share: of the chat
/// itself or of its root (a shared chat's sub-agents are shared with it).
pub async fn can_read(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    user_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        "SELECT EXISTS (
             SELECT 1 FROM chats c JOIN chat_shares s
               ON s.user_id = $2 AND s.chat_id IN (c.id, c.root_chat_id)
             WHERE c.id = $1
         ) AS \"shared!\"",
        chat_id,
        user_id,
    )
    .fetch_one(conn)
    .await
}
