//! Message, queue and action routes of one chat (API.md "Chat routes",
//! "Listing and paging", "Details"; `spec/chatd-architecture.md` "HTTP
//! endpoints": `POST .../messages`, `PATCH .../messages/{message}`,
//! `DELETE .../queue/{queuedMessage}`, `POST .../promote`, `POST
//! .../interrupt`, `POST .../tool-results`, and "Invalid states").
//!
//! Every mutation here is one state-machine bundle: `begin` locks the chat
//! row and advances `snapshot_version`, the handler re-checks what must be
//! checked under the lock (archived → `400`, message or queued message not
//! found → `404`), applies exactly one transition (which rejects a state it
//! does not allow with `409` and writes nothing) and commits, which publishes
//! `chat:update`. Returning early drops the bundle: the bump is rolled back
//! and nothing is published.
//!
//! Order of checks (API.md "Details"): `401` → `400` path → `404` chat →
//! `413` → `400` body → `403` owner-only → `400` archived → `404` message or
//! queued message → `409` state.
//!
//! Idempotent sends: a `client_message_id` is remembered per chat in
//! `chat_send_receipts` with a hash of the request and the response body,
//! written in the same transaction as the transition. The chat row lock
//! serialises concurrent sends, so a repeat (even a concurrent one) finds the
//! receipt and returns the stored response unchanged, or `409` when the
//! content differs.

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use chatd_core::{ExecutionState, StateError};
use chatd_store::{
    ChatTx, CompleteRequiresActionInput, EditMessageInput, NewMessage, SendMessageInput,
    ToolResultInput,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::AppState;
use crate::auth::Caller;
use crate::chats::{check_model_config, require_owner, visible_chat};
use crate::error::{ApiError, ApiResult, INVALID_STATE_MESSAGE};
use crate::extract::{PathParams, QueryParams, read_json};
use crate::objects::{
    BusyBehavior, Chat, ChatError, ChatErrorKind, ChatInputPart, ChatMessage, ChatQueuedMessage,
    ReasoningEffort, visible_messages,
};
use crate::openapi::{E400, E401, E403, E404, E409, E413, E429};
use crate::validate;
use chatd_store::queries::messages::{self, Cursor};
use chatd_store::queries::{queue, send_receipts};

/// Query of `GET /chats/{chat}/messages`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListMessagesParams {
    /// Newest `limit` messages with an id below this one.
    before_id: Option<i64>,
    /// Oldest `limit` messages with an id above this one.
    after_id: Option<i64>,
    /// Page size, 1..=200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
}

/// A page of messages.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessagesPage {
    /// Client-visible messages, ascending by id.
    pub messages: Vec<ChatMessage>,
    /// The whole queue, head first.
    pub queued_messages: Vec<ChatQueuedMessage>,
    /// Without a cursor or with `before_id`: whether older messages exist;
    /// with `after_id`: whether newer ones exist.
    pub has_more: bool,
}

/// Body of `POST /chats/{chat}/messages`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageRequest {
    /// The message; non-empty, at most 256 KiB of text.
    pub content: Vec<ChatInputPart>,
    /// What to do when the chat is busy (default `queue`).
    #[serde(default)]
    pub busy_behavior: Option<BusyBehavior>,
    /// An enabled model config for this and later turns.
    #[serde(default)]
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort for this and later turns.
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Client idempotency key (1–256 bytes), scoped to the chat.
    #[serde(default)]
    pub client_message_id: Option<String>,
}

/// Response of `POST /chats/{chat}/messages`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SendMessageResponse {
    /// Whether the sent message was queued (busy chat, or `E1`).
    pub queued: bool,
    /// The sent message, when it entered history directly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<ChatMessage>,
    /// The queued row, when it was queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_message: Option<ChatQueuedMessage>,
    /// Every client-visible row the transition inserted, in id order
    /// (synthetic tool results first; from `E1` the promoted queue head).
    pub messages: Vec<ChatMessage>,
}

/// Body of `PATCH /chats/{chat}/messages/{message}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditMessageRequest {
    /// The replacement content.
    pub content: Vec<ChatInputPart>,
    /// An enabled model config.
    #[serde(default)]
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort.
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
}

/// Response of `PATCH /chats/{chat}/messages/{message}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EditMessageResponse {
    /// The replacement user message.
    pub message: ChatMessage,
    /// Every client-visible row inserted, in id order.
    pub messages: Vec<ChatMessage>,
    /// Ids soft-deleted by the edit (the edited message and everything after
    /// it).
    pub deleted_message_ids: Vec<i64>,
}

/// One submitted tool result.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The pending call it answers.
    pub tool_call_id: String,
    /// Any JSON value.
    #[schema(value_type = Value)]
    pub output: Value,
    /// Whether the tool failed (default false).
    #[serde(default)]
    pub is_error: bool,
}

/// Body of `POST /chats/{chat}/tool-results`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultsRequest {
    /// Exactly one result per pending tool call.
    pub results: Vec<ToolResult>,
}

/// Opens a state-machine bundle on `chat_id`; with `reject_archived`,
/// answers `400` when the chat is archived (read under the lock).
async fn begin(state: &AppState, chat_id: Uuid, reject_archived: bool) -> ApiResult<ChatTx> {
    let mut tx = state.store().machine(chat_id).begin().await?;
    if reject_archived && tx.chat().await?.archived {
        return Err(ApiError::archived());
    }
    Ok(tx)
}

/// `404` when the queue is non-empty and `queued` is not in it. With an empty
/// queue the transition itself answers `409` (no queue operation is allowed
/// from an empty-queue state).
async fn check_queued_exists(tx: &mut ChatTx, queued: i64) -> ApiResult<()> {
    let chat_id = tx.chat_id();
    let conn = tx.conn();
    if queue::len(&mut *conn, chat_id).await? > 0
        && queue::select(&mut *conn, chat_id, queued).await?.is_none()
    {
        return Err(StateError::QueuedMessageNotFound {
            queued_message_id: queued,
        }
        .into());
    }
    Ok(())
}

/// `GET /api/v2/chats/{chat}/messages`: one page of client-visible messages
/// (ascending by id) and the whole queue, read in one snapshot.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/messages",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id"), ListMessagesParams),
    responses((status = 200, description = "A page of messages", body = MessagesPage), E400, E401, E404)
)]
pub async fn list_messages(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<MessagesPage>> {
    let id = params.uuid("chat")?;
    visible_chat(&state, &caller, id).await?;
    let query = QueryParams::parse(query.as_deref())?;
    let limit = query.int_in("limit", 1, 200, 50)?;
    let before = query.id("before_id")?;
    let after = query.id("after_id")?;
    let cursor = match (before, after) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_query(
                "after_id",
                "before_id and after_id are mutually exclusive",
            ));
        }
        (Some(b), None) => Cursor::Before(b),
        (None, Some(a)) => Cursor::After(a),
        (None, None) => Cursor::Latest,
    };
    let mut snapshot = state.store().machine(id).snapshot().await?;
    let (rows, has_more) = messages::page(snapshot.conn(), id, cursor, limit).await?;
    let queue = queue::list(snapshot.conn(), id).await?;
    snapshot.finish().await?;
    Ok(Json(MessagesPage {
        messages: rows.iter().map(ChatMessage::from).collect(),
        queued_messages: queue.iter().map(ChatQueuedMessage::from).collect(),
        has_more,
    }))
}

/// The part of a send that identifies it for `client_message_id`
/// de-duplication: a repeat with the same key must carry the same values.
#[derive(Serialize)]
struct SendFingerprint<'a> {
    content: &'a [ChatInputPart],
    busy_behavior: BusyBehavior,
    model_config_id: Option<Uuid>,
    reasoning_effort: Option<ReasoningEffort>,
}

/// `POST /api/v2/chats/{chat}/messages`: `SendMessage(m, busy_behavior)`.
/// Owner-only. From `W`/`E0` the message enters history (`R0`); from `E1`
/// it is queued and the queue head is promoted (`R1`); busy chats queue it
/// (`queue`) or queue it at the head and interrupt (`interrupt`: `R* → I1`,
/// `I* → I1`, `A* → R1`).
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/messages",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    request_body = SendMessageRequest,
    responses(
        (status = 200, description = "Sent (or the stored response of an earlier send with the same client_message_id)", body = SendMessageResponse),
        E400, E401, E403, E404, E409, E413, E429,
    )
)]
pub async fn send_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<Value>> {
    let id = params.uuid("chat")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req: SendMessageRequest = read_json(body, state.options().body_limit_bytes).await?;
    let content = validate::message_content(&req.content, "content")?;
    if let Some(key) = &req.client_message_id
        && (key.is_empty() || key.len() > validate::MAX_CLIENT_MESSAGE_ID_BYTES)
    {
        return Err(ApiError::invalid(
            "client_message_id",
            format!(
                "must be 1 to {} bytes",
                validate::MAX_CLIENT_MESSAGE_ID_BYTES
            ),
        ));
    }
    check_model_config(&state, req.model_config_id, "model_config_id").await?;
    require_owner(&caller, &chat)?;
    let busy_behavior = req.busy_behavior.unwrap_or_default();
    let fingerprint = Sha256::digest(
        serde_json::to_vec(&SendFingerprint {
            content: &req.content,
            busy_behavior,
            model_config_id: req.model_config_id,
            reasoning_effort: req.reasoning_effort,
        })
        .expect("fingerprint serializes"),
    )
    .to_vec();

    let mut tx = state.store().machine(id).begin().await?;
    if let Some(key) = &req.client_message_id
        && let Some((hash, response)) = send_receipts::select::<Value>(tx.conn(), id, key).await?
    {
        // Dropping `tx` rolls the snapshot bump back: a repeat changes nothing.
        return if hash == fingerprint {
            Ok(Json(response))
        } else {
            Err(ApiError::conflict(
                "client_message_id was already used for a different message.",
            ))
        };
    }
    if tx.chat().await?.archived {
        return Err(ApiError::archived());
    }
    let mut message = NewMessage::user(content).created_by(caller.id());
    message.model_config_id = req.model_config_id;
    message.reasoning_effort = req.reasoning_effort.map(|e| e.as_str().to_owned());
    message.client_message_id = req.client_message_id.clone();
    let result = tx
        .send_message(SendMessageInput {
            message,
            busy_behavior,
            max_queue_size: Some(state.options().max_queued_messages),
        })
        .await?;
    let queued = result.queued_message.is_some();
    let messages = visible_messages(&result.inserted_messages);
    let response = SendMessageResponse {
        queued,
        message: if queued {
            None
        } else {
            result
                .inserted_messages
                .last()
                .filter(|m| m.role == chatd_core::ChatRole::User)
                .map(ChatMessage::from)
        },
        queued_message: result.queued_message.as_ref().map(ChatQueuedMessage::from),
        messages,
    };
    let response = serde_json::to_value(&response).map_err(ApiError::internal)?;
    if let Some(key) = &req.client_message_id {
        send_receipts::insert(tx.conn(), id, key, &fingerprint, &response).await?;
    }
    tx.commit().await?;
    Ok(Json(response))
}

/// `PATCH /api/v2/chats/{chat}/messages/{message}`: `EditMessage(k,
/// replacement)`, landing in `R0` from every non-archived valid state.
/// Owner-only. Only user messages can be edited (`400`).
#[utoipa::path(
    patch,
    path = "/api/v2/chats/{chat}/messages/{message}",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("message" = i64, Path, description = "Message id (positive)", minimum = 1),
    ),
    request_body = EditMessageRequest,
    responses(
        (status = 200, description = "Edited; the chat runs again (R0)", body = EditMessageResponse),
        E400, E401, E403, E404, E409, E413,
    )
)]
pub async fn edit_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<EditMessageResponse>> {
    let id = params.uuid("chat")?;
    let message_id = params.id("message")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req: EditMessageRequest = read_json(body, state.options().body_limit_bytes).await?;
    let content = validate::message_content(&req.content, "content")?;
    check_model_config(&state, req.model_config_id, "model_config_id").await?;
    require_owner(&caller, &chat)?;

    let mut tx = begin(&state, id, true).await?;
    let target = messages::select(tx.conn(), id, message_id).await?;
    match target {
        Some(m) if crate::objects::client_visible(&m) => {
            if m.role != chatd_core::ChatRole::User {
                return Err(StateError::EditedMessageNotUser { message_id }.into());
            }
        }
        _ => return Err(StateError::MessageNotFound { message_id }.into()),
    }
    let mut replacement = NewMessage::user(content).created_by(caller.id());
    replacement.model_config_id = req.model_config_id;
    replacement.reasoning_effort = req.reasoning_effort.map(|e| e.as_str().to_owned());
    let result = tx
        .edit_message(EditMessageInput {
            message_id,
            replacement,
            suffix_messages: Vec::new(),
        })
        .await?;
    tx.commit().await?;
    let inserted = result
        .cancellation_messages
        .iter()
        .chain(std::iter::once(&result.replacement_message))
        .chain(result.suffix_messages.iter());
    Ok(Json(EditMessageResponse {
        message: ChatMessage::from(&result.replacement_message),
        messages: visible_messages(inserted),
        deleted_message_ids: result.deleted_message_ids,
    }))
}

/// `DELETE /api/v2/chats/{chat}/queue/{queued}`: `DeleteQueuedMessage(qid)`
/// from `E1`, `R1`, `I1`, `A1`. An empty queue is `409`; an unknown id on a
/// non-empty queue `404`.
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
    let id = params.uuid("chat")?;
    let queued = params.id("queued")?;
    visible_chat(&state, &caller, id).await?;
    let mut tx = begin(&state, id, true).await?;
    check_queued_exists(&mut tx, queued).await?;
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
    let id = params.uuid("chat")?;
    let queued = params.id("queued")?;
    let chat = visible_chat(&state, &caller, id).await?;
    require_owner(&caller, &chat)?;
    let mut tx = begin(&state, id, true).await?;
    check_queued_exists(&mut tx, queued).await?;
    tx.promote_queued_message(queued).await?;
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}

/// `POST /api/v2/chats/{chat}/interrupt`: `Interrupt(user_cancel)`:
/// `R0 → I0`, `R1 → I1`, `A0 → R0`, `A1 → R1`; anything else `409`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/interrupt",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Interrupt requested", body = Chat), E400, E401, E404, E409)
)]
pub async fn interrupt(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let id = params.uuid("chat")?;
    visible_chat(&state, &caller, id).await?;
    let mut tx = begin(&state, id, true).await?;
    tx.interrupt().await?;
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}

/// `POST /api/v2/chats/{chat}/tool-results`: `CompleteRequiresAction`:
/// `A0 → R0`, `A1 → R1`. Owner-only. The results must answer exactly the
/// pending calls (`400` naming the `tool_call_id` otherwise).
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/tool-results",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    request_body = ToolResultsRequest,
    responses((status = 200, description = "Results stored; the chat runs again", body = Chat), E400, E401, E403, E404, E409, E413)
)]
pub async fn submit_tool_results(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: Body,
) -> ApiResult<Json<Chat>> {
    let id = params.uuid("chat")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req: ToolResultsRequest = read_json(body, state.options().body_limit_bytes).await?;
    if req.results.len() > validate::MAX_TOOL_RESULTS {
        return Err(ApiError::invalid(
            "results",
            format!("at most {} results", validate::MAX_TOOL_RESULTS),
        ));
    }
    for (i, r) in req.results.iter().enumerate() {
        if r.tool_call_id.is_empty() || r.tool_call_id.len() > 512 {
            return Err(ApiError::invalid(
                format!("results[{i}].tool_call_id"),
                "must be 1 to 512 bytes",
            ));
        }
    }
    require_owner(&caller, &chat)?;
    let mut tx = begin(&state, id, true).await?;
    let last_model_config_id = tx.chat().await?.last_model_config_id;
    let input = CompleteRequiresActionInput {
        created_by: Some(caller.id()),
        model_config_id: last_model_config_id,
        results: req
            .results
            .iter()
            .map(|r| ToolResultInput {
                tool_call_id: r.tool_call_id.clone(),
                output: r.output.to_string(),
                is_error: r.is_error,
            })
            .collect(),
        suffix_messages: Vec::new(),
    };
    match tx.complete_requires_action(input).await {
        Ok(_) => {}
        Err(chatd_store::StoreError::State(StateError::ToolResult(e))) => {
            let base = ApiError::from(StateError::ToolResult(e.clone()));
            let detail = base.body().detail.clone().unwrap_or_default();
            let field = req
                .results
                .iter()
                .position(|r| r.tool_call_id == e.tool_call_id)
                .map(|i| format!("results[{i}].tool_call_id"))
                .unwrap_or_else(|| "results".to_owned());
            return Err(
                ApiError::new(StatusCode::BAD_REQUEST, "Invalid tool results.")
                    .with_detail(detail.clone())
                    .with_validation(field, detail),
            );
        }
        Err(e) => return Err(e.into()),
    }
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}

/// `POST /api/v2/chats/{chat}/reconcile-invalid`: `ReconcileInvalidState`,
/// `Invalid → E0/E1` with `last_error = {"message": "Chat is in an invalid
/// state.", "kind": "invalid_state", "retryable": false}`. A chat in a valid
/// state (archived ones included) is `409`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/reconcile-invalid",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Reconciled (E0 or E1)", body = Chat), E400, E401, E404, E409)
)]
pub async fn reconcile_invalid(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let id = params.uuid("chat")?;
    visible_chat(&state, &caller, id).await?;
    let mut tx = begin(&state, id, false).await?;
    let last_error = ChatError::new(ChatErrorKind::InvalidState, INVALID_STATE_MESSAGE, false)
        .with_detail("Send a new message or edit the history to continue.");
    match tx.reconcile_invalid_state(last_error).await {
        Ok(_) => {}
        Err(chatd_store::StoreError::State(StateError::TransitionNotAllowed(e))) => {
            return Err(ApiError::conflict("Chat is not in an invalid state.")
                .with_detail(format!("Its execution state is {}.", e.from)));
        }
        Err(e) => return Err(e.into()),
    }
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}

/// Fewest client-visible messages since the latest compaction boundary that
/// make a compaction worthwhile.
pub const MIN_MESSAGES_TO_COMPACT: i64 = 4;

/// `POST /api/v2/chats/{chat}/compact`: `RequestCompaction` (`W/E0 → R0`,
/// `E1 → R1`). Owner-only. Busy → `409`; archived → `400`; fewer than 4
/// visible messages since the latest compaction boundary → `409` "Nothing
/// to compact."
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/compact",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Compaction requested; the chat runs", body = Chat), E400, E401, E403, E404, E409)
)]
pub async fn compact(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let id = params.uuid("chat")?;
    let chat = visible_chat(&state, &caller, id).await?;
    require_owner(&caller, &chat)?;
    let mut tx = begin(&state, id, true).await?;
    let exec = tx.execution_state().await?;
    if exec.is_runnable() {
        return Err(ApiError::conflict("Chat is busy.").with_detail(format!(
            "Its execution state is {exec}; compact once it is idle."
        )));
    }
    if exec != ExecutionState::Invalid
        && messages::visible_since_boundary(tx.conn(), id).await? < MIN_MESSAGES_TO_COMPACT
    {
        return Err(ApiError::conflict("Nothing to compact.").with_detail(format!(
            "Compaction needs at least {MIN_MESSAGES_TO_COMPACT} messages since the last compaction."
        )));
    }
    tx.request_compaction().await?;
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}
