//! The compatible protocols (API.md "Compatible protocols"; issue 35):
//! clients written for other services work unchanged against chatd.
//!
//! - [`openai`]: OpenAI's Responses and Conversations under `/v1`, as the
//!   official `openai` SDKs call them. A conversation is a chat
//!   (`conv_<chat id>`), a response is one turn of it (`resp_…`, mapped to
//!   the turn's first message in `chat_responses`), items are its messages.
//! - [`ai_sdk`]: the AI SDK's chat transport (`DefaultChatTransport`,
//!   `useChat`) under `/api/v2/ai-sdk/chat`: one request is one turn, its
//!   answer the UI message stream.
//!
//! Both are translations over the same state machine and stream as the
//! native API: every change is a transition of `chatd_store::ChatMachine`
//! (the send, the tool results, the interrupt, the regenerate), so
//! queueing while busy, fencing, idempotency, limits and budgets apply
//! unchanged; every live answer is read from a stream loop
//! ([`crate::stream`]), so it resumes on any replica. Their only state is
//! the mapping of their ids (migration `0021_compatible_protocols`):
//! [`turn`] derives a turn's messages and status from the chat.

pub mod ai_sdk;
pub mod openai;
pub(crate) mod turn;

use axum::Router;
use chatd_core::DynamicTool;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};

/// Client tools of a request checked like the native API's
/// `dynamic_tools` (count, unique names of letters, digits, `_` and `-`,
/// a JSON Schema object), the errors naming `tools`.
pub(crate) fn check_tools(tools: &[DynamicTool]) -> ApiResult<()> {
    crate::validate::dynamic_tools(tools).map_err(|e| match e.body().validations.first() {
        Some(v) => ApiError::invalid(
            v.field.replacen("dynamic_tools", "tools", 1),
            v.detail.clone(),
        ),
        None => e,
    })
}

/// The routes of both surfaces (mounted by [`crate::router`]).
pub fn routes() -> Router<AppState> {
    openai::routes().merge(ai_sdk::routes())
}

/// Sends `message` to chat `chat_id` as the first message of a compat
/// surface's turn (`SendMessage` with `queue`: queued when a turn runs), and
/// records `response` in the same bundle, starting at the user message or,
/// while queued, at the queued message.
///
/// # Errors
/// `400` for an archived chat; the send's refusals (a full queue `429`).
pub(crate) async fn send_turn(
    state: &AppState,
    chat_id: uuid::Uuid,
    message: chatd_store::NewMessage,
    response: &mut chatd_store::responses::NewResponse,
) -> ApiResult<()> {
    use chatd_store::UserSendStart;
    let mut send = match state.store().machine(chat_id).begin_user_send(None).await? {
        UserSendStart::Open(send) => send,
        UserSendStart::Archived => return Err(ApiError::archived()),
        UserSendStart::Repeated(_) | UserSendStart::KeyConflict => {
            unreachable!("no client_message_id")
        }
    };
    let (result, _) = send
        .send_message(chatd_store::SendMessageInput {
            message,
            busy_behavior: chatd_core::BusyBehavior::Queue,
            max_queue_size: Some(state.options().max_queued_messages),
        })
        .await?;
    match (&result.queued_message, result.inserted_messages.last()) {
        (Some(queued), _) => response.queued_message_id = Some(queued.id),
        (None, Some(user)) => response.start_message_id = Some(user.id),
        (None, None) => {
            return Err(ApiError::internal(std::io::Error::other(
                "send inserted nothing",
            )));
        }
    }
    send.record_response(response).await?;
    send.commit(&serde_json::Value::Null).await?;
    Ok(())
}

/// Opens a stream loop on `chat` for `caller` (admitted under the open
/// streams cap, its credential watched), delivering every committed message
/// after `after_id` and then the live events, into the returned channel.
/// The loop ends when the receiver is dropped.
///
/// # Errors
/// `429` at the cap of open streams; `503` when streaming is off.
pub(crate) async fn chat_events(
    state: &AppState,
    caller: &crate::auth::Caller,
    chat_id: uuid::Uuid,
    access: crate::auth::ChatAccess,
    after_id: i64,
) -> ApiResult<tokio::sync::mpsc::Receiver<crate::stream::ChatStreamEvent>> {
    let service = state.stream_service()?.clone();
    let admission = service.admit(
        caller,
        chat_id,
        access,
        state.options().limits.max_open_streams,
    )?;
    let stream_loop = service.open(chat_id, after_id, admission).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        let _ = stream_loop.run(tx).await;
    });
    Ok(rx)
}

/// Starts a compat surface's send that waits in the queue of a chat whose
/// turn failed (`E1`: the chat holds its queue until the user acts).
/// A compat request is that message's own turn and waits for it, so it is
/// promoted (`PromoteQueuedMessage`, `E1` → `R0`/`R1`); a chat in another
/// state, or a message no longer queued, is left as it is.
pub(crate) async fn start_after_error(state: &AppState, chat_id: uuid::Uuid, queued_id: i64) {
    let Ok(mut tx) = crate::chats::begin(state, chat_id, true).await else {
        return;
    };
    match tx.chat().await {
        Ok(chat) if chat.status == chatd_core::ChatStatus::Error => {}
        _ => return,
    }
    if tx.promote_queued_message(queued_id).await.is_ok() {
        let _ = tx.commit().await;
    }
}
