//! SQL of the `chat_queued_messages` table: a chat's queue, head first
//! (lowest `position`, then id). Writes are for [`crate::transitions`] only:
//! the triggers turn them into `queue_version` changes.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::models::{NewMessage, QueuedMessage};

/// Number of queued messages of the chat.
pub async fn len(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1")
        .bind(chat_id)
        .fetch_one(conn)
        .await
}

/// The chat's queue in order (head first).
pub async fn list(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Vec<QueuedMessage>> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id")
        .bind(chat_id)
        .fetch_all(conn)
        .await
}

/// One queued message of the chat.
pub async fn select(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 AND id = $2")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Where [`enqueue`] puts a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueEnd {
    /// After every queued message.
    Tail,
    /// Before every queued message.
    Head,
}

/// Inserts a queued message at `end` of the chat's queue.
pub async fn enqueue(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    end: QueueEnd,
) -> sqlx::Result<QueuedMessage> {
    let sql = match end {
        QueueEnd::Tail => {
            "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id)
             VALUES ($1, nextval('chat_queued_message_position_seq'), $2, $3, $4, $5, $6) RETURNING *"
        }
        QueueEnd::Head => {
            "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id)
             VALUES ($1, (SELECT COALESCE(min(position) - 1, nextval('chat_queued_message_position_seq'))
                          FROM chat_queued_messages WHERE chat_id = $1),
                     $2, $3, $4, $5, $6) RETURNING *"
        }
    };
    sqlx::query_as(sql)
        .bind(chat_id)
        .bind(Json(&message.content))
        .bind(message.created_by)
        .bind(message.model_config_id)
        .bind(&message.reasoning_effort)
        .bind(&message.client_message_id)
        .fetch_one(conn)
        .await
}

/// Removes and returns the head of the chat's queue.
pub async fn pop_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as(
        "DELETE FROM chat_queued_messages WHERE id = (
             SELECT id FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id LIMIT 1)
         RETURNING *",
    )
    .bind(chat_id)
    .fetch_optional(conn)
    .await
}

/// Removes one queued message of the chat.
pub async fn delete(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as("DELETE FROM chat_queued_messages WHERE chat_id = $1 AND id = $2 RETURNING *")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Removes every queued message of the chat, returning their ids in queue
/// order.
pub async fn clear(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<i64>> {
    let mut ids: Vec<(i64, i64)> = sqlx::query_as(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 RETURNING id, position",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await?;
    ids.sort_by_key(|(id, position)| (*position, *id));
    Ok(ids.into_iter().map(|(id, _)| id).collect())
}

/// Moves a queued message to the head of its chat's queue (`None`, and no
/// change, when it is already there or not queued).
pub async fn move_to_head(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as(
        "UPDATE chat_queued_messages q SET position = h.min_position - 1
         FROM (SELECT min(position) AS min_position FROM chat_queued_messages WHERE chat_id = $1) h
         WHERE q.chat_id = $1 AND q.id = $2 AND q.position <> h.min_position
         RETURNING q.*",
    )
    .bind(chat_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}
