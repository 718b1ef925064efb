//! SQL of the compatible protocols' mappings (API.md "Compatible
//! protocols"; migration `0021_compatible_protocols`): `chat_responses`
//! (an OpenAI `resp_…` id names one turn of a chat, with that turn's
//! request options) and `ai_sdk_chats` (the AI SDK transport's chat ids,
//! per user). Nothing else of those surfaces is stored: a response's
//! status, output and usage are read from its chat.

use chatd_core::DynamicTool;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

/// A response to record, in the bundle of the send (or tool results) that
/// starts its turn ([`crate::ChatTx::record_response`],
/// `CreateChatInput::response`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewResponse {
    /// `resp_` and 32 lowercase hex digits.
    pub id: String,
    /// The chat's owner (the caller).
    pub owner_id: Uuid,
    /// The first message of the turn: the user message sent, or, with
    /// `continuation`, the assistant message whose calls were answered.
    /// `None` while the send waits in the queue (`queued_message_id`).
    pub start_message_id: Option<i64>,
    /// The queued message of a send made while the chat was busy.
    pub queued_message_id: Option<i64>,
    /// The response answers function calls (its turn starts with their
    /// results).
    pub continuation: bool,
    /// `previous_response_id` as the client sent it.
    pub previous_response_id: Option<String>,
    /// `model` as the client sent it.
    pub model: String,
    /// The model config it resolved to.
    pub model_config_id: Option<Uuid>,
    /// System text for this turn's model calls only.
    pub instructions: Option<String>,
    /// This turn's client tools (`None`: the chat's own dynamic tools).
    pub tools: Option<Vec<DynamicTool>>,
    /// Cap on each model call's output tokens in this turn.
    pub max_output_tokens: Option<i32>,
    /// `reasoning.effort` as sent.
    pub reasoning_effort: Option<String>,
    /// Up to 16 string pairs, as sent.
    pub metadata: Value,
    /// Created with `background: true`.
    pub background: bool,
}

/// A stored response; `start_message_id` is resolved through the queue
/// (the promoted user message) when the row has only a queued message.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    /// `resp_…`.
    pub id: String,
    /// Its chat.
    pub chat_id: Uuid,
    /// The chat's owner.
    pub owner_id: Uuid,
    /// The turn's first message; `None` while still queued.
    pub start_message_id: Option<i64>,
    /// The queued message it was sent as, if it was queued.
    pub queued_message_id: Option<i64>,
    /// Answers function calls.
    pub continuation: bool,
    /// As sent.
    pub previous_response_id: Option<String>,
    /// As sent.
    pub model: String,
    /// The resolved model config.
    pub model_config_id: Option<Uuid>,
    /// As sent.
    pub instructions: Option<String>,
    /// As sent (`None`: not sent).
    pub tools: Option<Vec<DynamicTool>>,
    /// As sent.
    pub max_output_tokens: Option<i32>,
    /// As sent.
    pub reasoning_effort: Option<String>,
    /// As sent.
    pub metadata: Value,
    /// As sent.
    pub background: bool,
    /// The id reserved for the turn's first assistant message (`None`
    /// while queued); the answer has it unless a row was inserted into the
    /// chat before it (then it has the next id).
    pub answer_message_id: Option<i64>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// The options a response gives the model calls of its turn (read by the
/// worker before every model call: [`turn_options`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnOptions {
    /// The response.
    pub response_id: String,
    /// System text added to the turn's model calls.
    pub instructions: Option<String>,
    /// The turn's client tools, replacing the chat's dynamic tools.
    pub tools: Option<Vec<DynamicTool>>,
    /// Output cap of each model call.
    pub max_output_tokens: Option<i32>,
}

/// Records `response` for chat `chat_id` (inside the bundle that starts
/// its turn) and, unless it is queued, reserves the id of its answer
/// (`answer_message_id`, returned).
///
/// # Errors
/// Database errors (a repeated id is a unique violation).
pub async fn insert(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    response: &NewResponse,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "INSERT INTO chat_responses (id, chat_id, owner_id, start_message_id, queued_message_id,
             continuation, previous_response_id, model, model_config_id, instructions, tools,
             max_output_tokens, reasoning_effort, metadata, background, answer_message_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                 CASE WHEN $4::bigint IS NULL THEN NULL
                      ELSE nextval('chat_messages_id_seq') END)
         RETURNING answer_message_id",
        response.id,
        chat_id,
        response.owner_id,
        response.start_message_id,
        response.queued_message_id,
        response.continuation,
        response.previous_response_id,
        response.model,
        response.model_config_id,
        response.instructions,
        response
            .tools
            .as_ref()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .unwrap_or(Value::Null),
        response.max_output_tokens,
        response.reasoning_effort,
        response.metadata,
        response.background,
    )
    .fetch_one(conn)
    .await
}

macro_rules! response_select {
    ($rest:tt, $($arg:expr),*) => {
        sqlx::query!(
            r#"SELECT r.id, r.chat_id, r.owner_id,
                      COALESCE(r.start_message_id, m.id) AS "start_message_id?",
                      r.queued_message_id, r.continuation, r.previous_response_id, r.model,
                      r.model_config_id, r.instructions, r.tools AS "tools: Json<Value>",
                      r.max_output_tokens, r.reasoning_effort,
                      r.metadata AS "metadata: Json<Value>", r.background, r.answer_message_id,
                      r.created_at
               FROM chat_responses r
               LEFT JOIN LATERAL (
                   SELECT q.id FROM chat_messages q
                   WHERE r.start_message_id IS NULL AND q.chat_id = r.chat_id
                     AND q.queued_message_id = r.queued_message_id AND q.role = 'user'
                   ORDER BY q.id LIMIT 1
               ) m ON true "# + $rest,
            $($arg),*
        )
    };
}

macro_rules! response_of {
    ($r:expr) => {{
        let r = $r;
        ResponseRow {
            id: r.id,
            chat_id: r.chat_id,
            owner_id: r.owner_id,
            start_message_id: r.start_message_id,
            queued_message_id: r.queued_message_id,
            continuation: r.continuation,
            previous_response_id: r.previous_response_id,
            model: r.model,
            model_config_id: r.model_config_id,
            instructions: r.instructions,
            tools: tools_of(r.tools.0),
            max_output_tokens: r.max_output_tokens,
            reasoning_effort: r.reasoning_effort,
            metadata: r.metadata.0,
            background: r.background,
            answer_message_id: r.answer_message_id,
            created_at: r.created_at,
        }
    }};
}

fn tools_of(value: Value) -> Option<Vec<DynamicTool>> {
    match value {
        Value::Null => None,
        other => serde_json::from_value(other).ok(),
    }
}

/// Response `id`, if it exists.
pub async fn select(conn: impl PgExecutor<'_>, id: &str) -> sqlx::Result<Option<ResponseRow>> {
    let row = response_select!("WHERE r.id = $1", id)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(|r| response_of!(r)))
}

/// The responses of chat `chat_id` whose turn starts after message
/// `after_id` (or is still queued), in the order their turns start.
pub async fn after(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    after_id: i64,
) -> sqlx::Result<Vec<ResponseRow>> {
    let rows = response_select!(
        "WHERE r.chat_id = $1 AND (COALESCE(r.start_message_id, m.id) > $2
                                   OR COALESCE(r.start_message_id, m.id) IS NULL)
         ORDER BY COALESCE(r.start_message_id, m.id) NULLS LAST, r.created_at",
        chat_id,
        after_id
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| response_of!(r)).collect())
}

/// The newest response of chat `chat_id` (by the start of its turn; a
/// queued one last), if any.
pub async fn latest(conn: impl PgExecutor<'_>, chat_id: Uuid) -> sqlx::Result<Option<ResponseRow>> {
    let row = response_select!(
        "WHERE r.chat_id = $1
         ORDER BY COALESCE(r.start_message_id, m.id) DESC NULLS FIRST, r.created_at DESC LIMIT 1",
        chat_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| response_of!(r)))
}

/// The options of the response whose turn is the chat's current one: the
/// turn started at the newest user message of the active branch (promoted
/// from the queue, if it was), and the response starts at it or, answering
/// function calls, after it. `None` when the turn was not started by a
/// response (a native send, the web UI): the chat's own tools apply.
pub async fn turn_options(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Option<TurnOptions>> {
    let row = sqlx::query!(
        r#"WITH u AS (
               SELECT id, queued_message_id FROM chat_messages
               WHERE chat_id = $1 AND NOT deleted AND role = 'user'
               ORDER BY id DESC LIMIT 1
           )
           SELECT r.id, r.instructions, r.tools AS "tools: Json<Value>", r.max_output_tokens
           FROM chat_responses r, u
           WHERE r.chat_id = $1
             AND (r.start_message_id >= u.id
                  OR (r.start_message_id IS NULL AND r.queued_message_id = u.queued_message_id))
           ORDER BY r.start_message_id DESC NULLS LAST LIMIT 1"#,
        chat_id,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| TurnOptions {
        response_id: r.id,
        instructions: r.instructions,
        tools: tools_of(r.tools.0),
        max_output_tokens: r.max_output_tokens,
    }))
}

/// The chat the AI SDK id `client_id` of `owner_id` is mapped to.
pub async fn ai_sdk_chat(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    client_id: &str,
) -> sqlx::Result<Option<Uuid>> {
    sqlx::query_scalar!(
        "SELECT chat_id FROM ai_sdk_chats WHERE owner_id = $1 AND client_id = $2",
        owner_id,
        client_id
    )
    .fetch_optional(conn)
    .await
}

/// Maps the AI SDK id `client_id` of `owner_id` to `chat_id` (inside the
/// chat's creation).
///
/// # Errors
/// A unique violation when the id is already mapped (a concurrent first
/// use: the caller reads the winner's chat).
pub async fn insert_ai_sdk_chat(
    conn: impl PgExecutor<'_>,
    owner_id: Uuid,
    client_id: &str,
    chat_id: Uuid,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO ai_sdk_chats (owner_id, client_id, chat_id) VALUES ($1, $2, $3)",
        owner_id,
        client_id,
        chat_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether id `reserved` can still become chat `chat_id`'s next message:
/// it is greater than every id of the chat.
pub async fn reserved_id_usable(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    reserved: i64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT COALESCE(max(id), 0) < $2 AS "usable!" FROM chat_messages WHERE chat_id = $1"#,
        chat_id,
        reserved
    )
    .fetch_one(conn)
    .await
}
