//! SQL of the chat tables, one function per statement. Transitions in
//! [`crate::transitions`] compose these; nothing else writes execution-state
//! tables.

use chatd_core::{ChatStatus, FinishReason, MessagePart};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::models::{Chat, ChatMessage, NewMessage, QueuedMessage};

/// Locks the chat row `FOR UPDATE` and advances `snapshot_version` by one in
/// the same statement, returning the bumped row; `None` when the chat does not
/// exist. Must be the first write of every transition bundle: the message
/// triggers stamp rows with the already-bumped version.
pub async fn lock_and_bump(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Option<Chat>> {
    sqlx::query_as::<_, Chat>(
        "WITH locked AS (SELECT id FROM chats WHERE id = $1 FOR UPDATE)
         UPDATE chats SET snapshot_version = chats.snapshot_version + 1, updated_at = now()
         FROM locked WHERE chats.id = locked.id
         RETURNING chats.*",
    )
    .bind(chat_id)
    .fetch_optional(conn)
    .await
}

/// Like [`lock_and_bump`] with `SKIP LOCKED`: `None` when the row is locked
/// by another transaction or missing.
pub async fn lock_and_bump_skip_locked(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<Chat>> {
    sqlx::query_as::<_, Chat>(
        "WITH locked AS (SELECT id FROM chats WHERE id = $1 FOR UPDATE SKIP LOCKED)
         UPDATE chats SET snapshot_version = chats.snapshot_version + 1, updated_at = now()
         FROM locked WHERE chats.id = locked.id
         RETURNING chats.*",
    )
    .bind(chat_id)
    .fetch_optional(conn)
    .await
}

/// Whether `(chat_id, runner_id)` has a heartbeat newer than
/// `stale_after_secs` (database time).
pub async fn heartbeat_is_fresh(
    conn: &mut PgConnection,
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

/// The model's view of the history: active (not soft-deleted) system
/// messages, then active messages from the latest compaction boundary (a
/// `compressed` row) onward, in id order. User-only rows are included; the
/// caller filters by visibility.
pub async fn active_history(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Vec<ChatMessage>> {
    sqlx::query_as(
        "SELECT * FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND (role = 'system' OR id >= COALESCE(
             (SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND compressed), 0))
         ORDER BY id",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await
}

/// Reads the chat row with the given row-lock clause (`""`, `"FOR UPDATE"`,
/// `"FOR SHARE"`).
pub async fn select_chat(
    conn: &mut PgConnection,
    chat_id: Uuid,
    lock: &str,
) -> sqlx::Result<Option<Chat>> {
    sqlx::query_as::<_, Chat>(AssertSqlSafe(format!(
        "SELECT * FROM chats WHERE id = $1 {lock}"
    )))
    .bind(chat_id)
    .fetch_optional(conn)
    .await
}

/// A chat row with the length of its queue, read in one statement.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ChatWithQueue {
    /// The row.
    #[sqlx(flatten)]
    pub chat: Chat,
    /// Number of queued messages.
    pub queue_len: i64,
}

/// The chat row and its queue length (no row lock clause: callers hold the
/// lock already or read in a snapshot).
pub async fn select_state(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Option<ChatWithQueue>> {
    sqlx::query_as(
        "SELECT c.*, (SELECT count(*) FROM chat_queued_messages q WHERE q.chat_id = c.id) AS queue_len
         FROM chats c WHERE c.id = $1",
    )
    .bind(chat_id)
    .fetch_optional(conn)
    .await
}

/// Number of queued messages of the chat.
pub async fn queue_len(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1")
        .bind(chat_id)
        .fetch_one(conn)
        .await
}

/// The chat's queue in order (head first).
pub async fn queue(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<QueuedMessage>> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 ORDER BY position, id")
        .bind(chat_id)
        .fetch_all(conn)
        .await
}

/// Inserts one message; the trigger assigns `revision` and advances
/// `history_version`.
pub async fn insert_message(
    conn: &mut PgConnection,
    chat_id: Uuid,
    message: &NewMessage,
    queued_message_id: Option<i64>,
) -> sqlx::Result<ChatMessage> {
    let role = message.role.map(|r| r.as_str()).unwrap_or("");
    let usage = message.usage;
    sqlx::query_as(
        "INSERT INTO chat_messages (chat_id, role, content, visibility, compressed, created_by, model_config_id,
             reasoning_effort, input_tokens, output_tokens, reasoning_tokens, cache_read_tokens,
             cache_creation_tokens, total_tokens, context_limit, total_cost_micros, runtime_ms,
             provider_response_id, queued_message_id, client_message_id, finish_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
         RETURNING *",
    )
    .bind(chat_id)
    .bind(role)
    .bind(Json(&message.content))
    .bind(message.visibility.as_str())
    .bind(message.compressed)
    .bind(message.created_by)
    .bind(message.model_config_id)
    .bind(&message.reasoning_effort)
    .bind(usage.map(|u| u.input_tokens))
    .bind(usage.map(|u| u.output_tokens))
    .bind(usage.map(|u| u.reasoning_tokens))
    .bind(usage.map(|u| u.cache_read_tokens))
    .bind(usage.map(|u| u.cache_creation_tokens))
    .bind(usage.map(|u| u.total_tokens))
    .bind(message.context_limit)
    .bind(message.total_cost_micros)
    .bind(message.runtime_ms)
    .bind(&message.provider_response_id)
    .bind(queued_message_id)
    .bind(&message.client_message_id)
    .bind(message.finish_reason.map(FinishReason::as_str))
    .fetch_one(conn)
    .await
}

/// Where a queued message goes.
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
    let position = match end {
        QueueEnd::Tail => "nextval('chat_queued_message_position_seq')",
        QueueEnd::Head => {
            "(SELECT COALESCE(min(position) - 1, nextval('chat_queued_message_position_seq'))
              FROM chat_queued_messages WHERE chat_id = $1)"
        }
    };
    sqlx::query_as(AssertSqlSafe(format!(
        "INSERT INTO chat_queued_messages (chat_id, position, content, created_by, model_config_id, reasoning_effort, client_message_id)
         VALUES ($1, {position}, $2, $3, $4, $5, $6) RETURNING *"
    )))
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
pub async fn pop_queue_head(
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
pub async fn delete_queued(
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

/// Removes every queued message of the chat, returning their ids in order.
pub async fn clear_queue(conn: &mut PgConnection, chat_id: Uuid) -> sqlx::Result<Vec<i64>> {
    let mut ids: Vec<(i64, i64)> = sqlx::query_as(
        "DELETE FROM chat_queued_messages WHERE chat_id = $1 RETURNING id, position",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await?;
    ids.sort_by_key(|(id, position)| (*position, *id));
    Ok(ids.into_iter().map(|(id, _)| id).collect())
}

/// Moves a queued message to the head of its chat's queue (no-op when it is
/// already there).
pub async fn move_to_queue_head(
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

/// One queued message of the chat.
pub async fn queued_message(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<QueuedMessage>> {
    sqlx::query_as("SELECT * FROM chat_queued_messages WHERE chat_id = $1 AND id = $2")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// One message of the chat (deleted or not).
pub async fn message(
    conn: &mut PgConnection,
    chat_id: Uuid,
    id: i64,
) -> sqlx::Result<Option<ChatMessage>> {
    sqlx::query_as("SELECT * FROM chat_messages WHERE chat_id = $1 AND id = $2")
        .bind(chat_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Contents of the active messages from the latest user message on (the only
/// place an unanswered tool call can be: every transition that inserts a user
/// message answers the calls before it), in id order.
pub async fn tail_contents(
    conn: &mut PgConnection,
    chat_id: Uuid,
) -> sqlx::Result<Vec<Vec<MessagePart>>> {
    let rows: Vec<Json<Vec<MessagePart>>> = sqlx::query_scalar(
        "SELECT content FROM chat_messages
         WHERE chat_id = $1 AND NOT deleted AND id >= COALESCE(
             (SELECT max(id) FROM chat_messages WHERE chat_id = $1 AND NOT deleted AND role = 'user'), 0)
         ORDER BY id",
    )
    .bind(chat_id)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|Json(parts)| parts).collect())
}

/// Soft-deletes the active messages with `id >= from_id`, returning their ids.
pub async fn soft_delete_from(
    conn: &mut PgConnection,
    chat_id: Uuid,
    from_id: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "UPDATE chat_messages SET deleted = true WHERE chat_id = $1 AND id >= $2 AND NOT deleted RETURNING id",
    )
    .bind(chat_id)
    .bind(from_id)
    .fetch_all(conn)
    .await
    .map(|mut ids: Vec<i64>| {
        ids.sort_unstable();
        ids
    })
}

/// Fields of the chat row a transition may set. `None` leaves a column alone.
#[derive(Debug, Default, Clone)]
pub struct ChatChanges {
    /// New status.
    pub status: Option<ChatStatus>,
    /// New archived marker.
    pub archived: Option<bool>,
    /// New `last_error` (`Some(None)` clears it).
    pub last_error: Option<Option<Value>>,
    /// New `retry_state`.
    pub retry_state: Option<Option<Value>>,
    /// New `requires_action_deadline_at`, as `now() + seconds` (`Some(None)` clears it).
    pub deadline_in_secs: Option<Option<f64>>,
    /// New ownership (`Some((None, None))` clears it).
    pub ownership: Option<(Option<Uuid>, Option<Uuid>)>,
    /// Add one to `generation_attempt`.
    pub bump_generation_attempt: bool,
    /// New `last_model_config_id` (only set when `Some`).
    pub last_model_config_id: Option<Uuid>,
    /// New `last_reasoning_effort` (only set when `Some`).
    pub last_reasoning_effort: Option<String>,
    /// `compaction_requested_at`: `Some(true)` sets it to `now()`, `Some(false)` clears it.
    pub compaction_requested: Option<bool>,
    /// Start a fresh history epoch without a message change
    /// (`history_version = snapshot_version`, `generation_attempt = 0`).
    pub fresh_history_epoch: bool,
}

/// Applies `changes` to the chat row and returns the new row.
pub async fn update_chat(
    conn: &mut PgConnection,
    chat_id: Uuid,
    changes: &ChatChanges,
) -> sqlx::Result<Chat> {
    let mut sets: Vec<String> = Vec::new();
    let mut n = 1;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if changes.status.is_some() {
        sets.push(format!("status = {}", next()));
    }
    if changes.archived.is_some() {
        sets.push(format!("archived = {}", next()));
    }
    if changes.last_error.is_some() {
        sets.push(format!("last_error = {}", next()));
    }
    if changes.retry_state.is_some() {
        sets.push(format!("retry_state = {}", next()));
    }
    if let Some(deadline) = changes.deadline_in_secs {
        match deadline {
            Some(_) => sets.push(format!(
                "requires_action_deadline_at = now() + make_interval(secs => {})",
                next()
            )),
            None => sets.push("requires_action_deadline_at = NULL".to_owned()),
        }
    }
    if changes.ownership.is_some() {
        sets.push(format!("worker_id = {}", next()));
        sets.push(format!("runner_id = {}", next()));
    }
    if changes.bump_generation_attempt {
        sets.push("generation_attempt = generation_attempt + 1".to_owned());
    }
    if changes.last_model_config_id.is_some() {
        sets.push(format!("last_model_config_id = {}", next()));
    }
    if changes.last_reasoning_effort.is_some() {
        sets.push(format!("last_reasoning_effort = {}", next()));
    }
    match changes.compaction_requested {
        Some(true) => sets.push("compaction_requested_at = now()".to_owned()),
        Some(false) => sets.push("compaction_requested_at = NULL".to_owned()),
        None => {}
    }
    if changes.fresh_history_epoch {
        sets.push("history_version = snapshot_version".to_owned());
        sets.push("generation_attempt = 0".to_owned());
    }
    if sets.is_empty() {
        return select_chat(conn, chat_id, "")
            .await?
            .ok_or(sqlx::Error::RowNotFound);
    }
    let sql = format!(
        "UPDATE chats SET {} WHERE id = $1 RETURNING *",
        sets.join(", ")
    );
    let mut query = sqlx::query_as::<_, Chat>(AssertSqlSafe(sql)).bind(chat_id);
    if let Some(status) = changes.status {
        query = query.bind(status.as_str());
    }
    if let Some(archived) = changes.archived {
        query = query.bind(archived);
    }
    if let Some(last_error) = &changes.last_error {
        query = query.bind(last_error.clone());
    }
    if let Some(retry_state) = &changes.retry_state {
        query = query.bind(retry_state.clone());
    }
    if let Some(Some(secs)) = changes.deadline_in_secs {
        query = query.bind(secs);
    }
    if let Some((worker, runner)) = changes.ownership {
        query = query.bind(worker).bind(runner);
    }
    if let Some(id) = changes.last_model_config_id {
        query = query.bind(id);
    }
    if let Some(effort) = &changes.last_reasoning_effort {
        query = query.bind(effort.clone());
    }
    query.fetch_one(conn).await
}

/// Inserts or refreshes the heartbeat row of `(chat_id, runner_id)` at
/// database time.
pub async fn upsert_heartbeat(
    conn: &mut PgConnection,
    chat_id: Uuid,
    runner_id: Uuid,
) -> sqlx::Result<()> {
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

/// Deletes the heartbeat row of `(chat_id, runner_id)`.
pub async fn delete_heartbeat(
    conn: &mut PgConnection,
    chat_id: Uuid,
    runner_id: Uuid,
) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2")
        .bind(chat_id)
        .bind(runner_id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Post-transition facts needed for publication: the row, whether the queue
/// is non-empty, and whether the current runner has a heartbeat newer than
/// `stale_after_secs` (database time).
pub async fn publication_facts(
    conn: &mut PgConnection,
    chat_id: Uuid,
    stale_after_secs: f64,
) -> sqlx::Result<(Chat, bool, bool)> {
    #[derive(sqlx::FromRow)]
    struct Facts {
        #[sqlx(flatten)]
        chat: Chat,
        queued: bool,
        fresh: bool,
    }
    let facts: Facts = sqlx::query_as(
        "SELECT c.*,
                EXISTS (SELECT 1 FROM chat_queued_messages q WHERE q.chat_id = c.id) AS queued,
                EXISTS (SELECT 1 FROM chat_heartbeats h WHERE h.chat_id = c.id AND h.runner_id = c.runner_id
                        AND h.heartbeat_at >= now() - make_interval(secs => $2)) AS fresh
         FROM chats c WHERE c.id = $1",
    )
    .bind(chat_id)
    .bind(stale_after_secs)
    .fetch_one(conn)
    .await?;
    Ok((facts.chat, facts.queued, facts.fresh))
}
