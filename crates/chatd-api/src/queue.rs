//! The queue of one chat (API.md "Chat routes": `DELETE
//! /chats/{chat}/queue/{queued}`, `POST .../promote`;
//! `spec/chatd-architecture.md` "HTTP endpoints"). Each mutation is one state-machine bundle
//! (see [`crate::messages`]); a queued message that is not on the chat is
//! `404` in every state (API.md: `404` before `409`), so `409` is left for a
//! state that does not allow the operation on a queued message it holds.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chatd_core::StateError;
use chatd_store::ChatTx;

use crate::app::AppState;
use crate::auth::{Caller, require_owner, visible_chat};
use crate::chats::{Chat, begin, commit};
use crate::error::{ApiResult, E400, E401, E403, E404, E409};
use crate::extract::PathParams;
use chatd_store::queries::queue;

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
    let conn = tx.conn();
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
/// and the chat interrupts (`I1`).
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/queue/{queued}/promote",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("queued" = i64, Path, description = "Queued message id (positive)", minimum = 1),
    ),
    responses((status = 200, description = "Promoted", body = Chat), E400, E401, E403, E404, E409)
)]
pub async fn promote_queued_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let (mut tx, queued) = begin_on_queued(&state, &caller, &params, true).await?;
    tx.promote_queued_message(queued).await?;
    commit(tx).await
}
