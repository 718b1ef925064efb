//! The queue of one chat (API.md "Chat routes": `DELETE
//! /chats/{chat}/queue/{queued}`, `POST .../promote`; "Busy behaviours and
//! the queue": `PATCH /chats/{chat}/queue/{queued}`, `POST .../move`;
//! `spec/chatd-architecture.md` "HTTP endpoints"). Each mutation is one state-machine bundle
//! (see [`crate::messages`]); a queued message that is not on the chat is
//! `404` in every state (API.md: `404` before `409`), so `409` is left for a
//! state that does not allow the operation on a queued message it holds.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chatd_core::StateError;
use chatd_store::{ChatTx, EditQueuedMessageInput};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{Caller, require_owner, visible_chat};
use crate::chats::{Chat, begin, check_model_config, commit};
use crate::error::{ApiResult, E400, E401, E403, E404, E409, E413, E415, E429};
use crate::extract::{self, PathParams, double_option};
use crate::objects::{ChatInputPart, ChatQueuedMessage};
use crate::validate;
use chatd_store::queue;

/// Body of `PATCH /chats/{chat}/queue/{queued}`; an absent field is kept.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditQueuedMessageRequest {
    /// The new content (non-empty, at most 256 KiB of text).
    #[serde(default)]
    #[schema(schema_with = validate::nullable_message_content_schema)]
    pub content: Option<Vec<ChatInputPart>>,
    /// An enabled model config, or `null` to clear it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Uuid>)]
    pub model_config_id: Option<Option<Uuid>>,
    /// Whether the message steers the running turn.
    #[serde(default)]
    pub steer: Option<bool>,
}

/// Body of `POST /chats/{chat}/queue/{queued}/move`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveQueuedMessageRequest {
    /// The 0-based index in queue order to move to; past the end = last.
    #[schema(schema_with = validate::queue_position_schema)]
    pub position: i64,
}

/// Opens the bundle of a queue operation on `{chat}`'s queued message
/// `{queued}` and returns it with the queued message id. Checks in API.md
/// "Details" order: `400` path, `404` chat, `403` unless `owner_only` is
/// false or the caller owns the chat, `400` archived, then `404` when
/// `queued` is not on the chat's queue, whatever the state (an empty queue
/// holds no id, so every id is not found there), and only then the
/// transition's own `409` (issue 14: an empty queue answered `409` first).
async fn begin_on_queued(
    state: &AppState,
    caller: &Caller,
    params: &PathParams,
    owner_only: bool,
) -> ApiResult<(ChatTx, i64)> {
    let id = params.uuid("chat")?;
    let queued = params.id("queued")?;
    let chat = visible_chat(state, caller, id).await?;
    if owner_only {
        require_owner(caller, &chat)?;
    }
    let mut tx = begin(state, id, true).await?;
    let conn = tx.reader().await?;
    if queue::select(&mut *conn, id, queued).await?.is_none() {
        return Err(StateError::QueuedMessageNotFound {
            queued_message_id: queued,
        }
        .into());
    }
    Ok((tx, queued))
}

/// `DELETE /api/v2/chats/{chat}/queue/{queued}`: `DeleteQueuedMessage(qid)`
/// from `E1`, `R1`, `I1`, `A1`. An id not on the chat's queue is `404` in
/// every state (so an empty queue answers `404`).
#[utoipa::path(
    delete,
    path = "/api/v2/chats/{chat}/queue/{queued}",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("queued" = i64, Path, description = "Queued message id (positive)", minimum = 1),
    ),
    responses((status = 204, description = "Removed from the queue"), E400, E401, E404, E409)
)]
pub async fn delete_queued_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<StatusCode> {
    let (mut tx, queued) = begin_on_queued(&state, &caller, &params, false).await?;
    tx.delete_queued_message(queued).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v2/chats/{chat}/queue/{queued}/promote`:
/// `PromoteQueuedMessage(qid)`. Owner-only. From `E1`/`A1` the message
/// enters history now (`R0`/`R1`); from `R1`/`I1` it moves to the queue head
/// and the chat interrupts (`I1`). An owner over a monthly budget gets
/// `429`, as for a send (API.md "Limits, budgets and the token lifecycle").
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/queue/{queued}/promote",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("queued" = i64, Path, description = "Queued message id (positive)", minimum = 1),
    ),
    responses((status = 200, description = "Promoted", body = Chat), E400, E401, E403, E404, E409, E429)
)]
pub async fn promote_queued_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let (mut tx, queued) = begin_on_queued(&state, &caller, &params, true).await?;
    // A promotion starts a turn (now, or by interrupting the current one):
    // over a budget it is refused like a send, and nothing changes.
    crate::usage::refuse_over_budget(&state, &caller.user).await?;
    tx.promote_queued_message(queued).await?;
    commit(tx).await
}

/// `PATCH /api/v2/chats/{chat}/queue/{queued}`: `EditQueuedMessage(qid)`.
/// Owner-only. Replaces the content, model config or steer flag of a queued
/// message, wherever the queue is non-empty (`E1`, `R1`, `I1`, `A1`);
/// advances `queue_version`. Bad content or an unknown model config →
/// `400` naming the field, nothing changes.
#[utoipa::path(
    patch,
    path = "/api/v2/chats/{chat}/queue/{queued}",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("queued" = i64, Path, description = "Queued message id (positive)", minimum = 1),
    ),
    request_body = EditQueuedMessageRequest,
    responses((status = 200, description = "The edited queued message", body = ChatQueuedMessage), E400, E401, E403, E404, E409, E413, E415)
)]
pub async fn edit_queued_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<EditQueuedMessageRequest>,
) -> ApiResult<Json<ChatQueuedMessage>> {
    let id = params.uuid("chat")?;
    params.id("queued")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req = body.read().await?;
    let content = match &req.content {
        Some(parts) => Some(validate::message_content(parts, "content")?),
        None => None,
    };
    check_model_config(&state, req.model_config_id.flatten(), "model_config_id").await?;
    require_owner(&caller, &chat)?;
    let (mut tx, queued) = begin_on_queued(&state, &caller, &params, true).await?;
    let row = tx
        .edit_queued_message(EditQueuedMessageInput {
            queued_message_id: queued,
            content,
            model_config_id: req.model_config_id,
            steer: req.steer,
        })
        .await?;
    let position = queue::index_of(tx.reader().await?, id, queued)
        .await?
        .unwrap_or_default();
    tx.commit().await?;
    Ok(Json(ChatQueuedMessage::at(position, &row)))
}

/// `POST /api/v2/chats/{chat}/queue/{queued}/move`: `MoveQueuedMessage(qid,
/// position)`. Owner-only. Moves a queued message to the 0-based `position`
/// of the queue (past the end = last), wherever the queue is non-empty;
/// advances `queue_version`; answers the whole queue in its new order. A
/// negative or non-integer `position` → `400`, nothing changes.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/queue/{queued}/move",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("queued" = i64, Path, description = "Queued message id (positive)", minimum = 1),
    ),
    request_body = MoveQueuedMessageRequest,
    responses((status = 200, description = "The whole queue, head first", body = [ChatQueuedMessage]), E400, E401, E403, E404, E409, E413, E415)
)]
pub async fn move_queued_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<MoveQueuedMessageRequest>,
) -> ApiResult<Json<Vec<ChatQueuedMessage>>> {
    let id = params.uuid("chat")?;
    params.id("queued")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req = body.read().await?;
    let position = validate::QUEUE_POSITION
        .check(req.position, "position")
        .map(|p| p.unsigned_abs())?;
    require_owner(&caller, &chat)?;
    let (mut tx, queued) = begin_on_queued(&state, &caller, &params, true).await?;
    let queue = tx.move_queued_message(queued, position).await?;
    tx.commit().await?;
    Ok(Json(ChatQueuedMessage::list(&queue)))
}
