//! Message routes of one chat (API.md "Chat routes", "Listing and paging",
//! "Details"; `spec/chatd-architecture.md` "HTTP endpoints":
//! `POST .../messages`, `PATCH .../messages/{message}`) and the
//! `ChatMessage` object.
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
use axum::extract::{RawQuery, State};
use chatd_core::StateError;
use chatd_store::{EditMessageInput, NewMessage, SendMessageInput, UserSendStart};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{Caller, ChatTarget, require_owner, visible_chat};
use crate::chats::{begin, check_model_config};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415, E429};
use crate::extract::{self, PathParams, QueryParams};
use crate::objects::{
    BusyBehavior, ChatInputPart, ChatMessage, ChatQueuedMessage, ReasoningEffort, client_visible,
    visible_messages,
};
use crate::paging::{self, MessageWindow};
use crate::validate;
use chatd_store::messages::{self, Cursor};
use chatd_store::queue;

/// Query of `GET /chats/{chat}/messages`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListMessagesParams {
    /// Newest `limit` messages with an id below this one (a positive id;
    /// not with `after_id`).
    before_id: Option<i64>,
    /// Oldest `limit` messages with an id above this one (a positive id;
    /// not with `before_id`).
    after_id: Option<i64>,
    /// Page size, 1..=200 (default 50). Not used with `window=true`.
    limit: Option<i64>,
    /// Page size in bytes, 1..=4194304 (default 524288): the page ends
    /// before the tool-call group that would pass it, and holds at least one
    /// message. A message's size is the length of its JSON as returned.
    /// Not used with `window=true`.
    max_bytes: Option<i64>,
    /// `true`: the first 20 (at most 128 KiB) and the last 100 (at most
    /// 384 KiB) visible messages, with `window` saying what lies between.
    /// Not allowed with `before_id` or `after_id`.
    window: Option<bool>,
}

/// The page size of `GET .../messages`: 1..=200 (the OpenAPI document
/// states it: [`crate::openapi`]).
pub(crate) const LIMIT: validate::IntRange = validate::IntRange::new(1, 200);

/// The page size in bytes of `GET .../messages`:
/// 1..=[`paging::MAX_MAX_BYTES`].
pub(crate) const MAX_BYTES: validate::IntRange = validate::IntRange::new(1, paging::MAX_MAX_BYTES);

/// A page of messages.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessagesPage {
    /// Client-visible messages, ascending by id.
    pub messages: Vec<ChatMessage>,
    /// The whole queue, head first.
    pub queued_messages: Vec<ChatQueuedMessage>,
    /// Without a cursor or with `before_id`: whether older messages exist;
    /// with `after_id`: whether newer ones exist; with `window=true`:
    /// whether the window omits messages (`window.omitted > 0`).
    pub has_more: bool,
    /// Only with `window=true`: where the head ends and the tail starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<MessageWindow>,
}

/// Body of `POST /chats/{chat}/messages`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageRequest {
    /// The message; non-empty, at most 256 KiB of text.
    #[schema(schema_with = validate::message_content_schema)]
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
    #[schema(schema_with = validate::client_message_id_schema)]
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
    #[schema(schema_with = validate::message_content_schema)]
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

/// `GET /api/v2/chats/{chat}/messages`: one page of client-visible messages
/// (ascending by id) and the whole queue, read in one snapshot.
///
/// Cut by `limit` and `max_bytes` between tool-call groups
/// ([`crate::paging`]). `window=true` answers the head and the tail of the
/// history and [`MessageWindow`] instead of one page. Bad `limit`,
/// `max_bytes`, `before_id`, `after_id` or `window` (not `true`/`false`, or
/// `true` with a cursor) → `400` naming the field.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/messages",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id"), ListMessagesParams),
    responses((status = 200, description = "A page of messages (or a window)", body = MessagesPage), E400, E401, E404)
)]
pub async fn list_messages(
    State(state): State<AppState>,
    target: ChatTarget,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<MessagesPage>> {
    let id = target.id();
    let query = QueryParams::parse(query.as_deref())?;
    let limit = query.int_in("limit", LIMIT.min, LIMIT.max, 50)?;
    let max_bytes = query.int_in(
        "max_bytes",
        MAX_BYTES.min,
        MAX_BYTES.max,
        paging::DEFAULT_MAX_BYTES,
    )?;
    let window = query.bool("window")?.unwrap_or(false);
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
    if window && cursor != Cursor::Latest {
        return Err(ApiError::invalid_query(
            "window",
            "window=true takes no before_id or after_id; page the omitted middle with them instead",
        ));
    }
    let mut snapshot = state.store().machine(id).snapshot().await?;
    let conn = snapshot.conn();
    let (messages, has_more, window) = if window {
        let head = page(
            &mut *conn,
            id,
            Cursor::After(0),
            paging::WINDOW_HEAD_MESSAGES,
            paging::WINDOW_HEAD_BYTES,
        )
        .await?
        .0;
        let tail = page(
            &mut *conn,
            id,
            Cursor::Latest,
            paging::WINDOW_TAIL_MESSAGES,
            paging::WINDOW_TAIL_BYTES,
        )
        .await?
        .0;
        let head_last_id = head.last().map(|m| m.id);
        let tail_first_id = tail.first().map(|m| m.id);
        let omitted = match (head_last_id, tail_first_id) {
            (Some(h), Some(t)) if h < t => {
                messages::count_visible_between(&mut *conn, id, h, t).await?
            }
            _ => 0,
        };
        let mut all = head;
        all.extend(tail.into_iter().filter(|m| Some(m.id) > head_last_id));
        let window = MessageWindow {
            head_last_id,
            tail_first_id,
            omitted,
        };
        (all, omitted > 0, Some(window))
    } else {
        let (rows, has_more) = page(&mut *conn, id, cursor, limit, max_bytes).await?;
        (rows, has_more, None)
    };
    let queue = queue::list(snapshot.conn(), id).await?;
    snapshot.finish().await?;
    Ok(Json(MessagesPage {
        messages,
        queued_messages: ChatQueuedMessage::list(&queue),
        has_more,
        window,
    }))
}

/// One page from `cursor` (ascending by id) cut by [`paging::cut`], and
/// whether more messages exist beyond it in the paging direction.
async fn page(
    conn: &mut sqlx::PgConnection,
    chat_id: Uuid,
    cursor: Cursor,
    limit: i64,
    max_bytes: i64,
) -> ApiResult<(Vec<ChatMessage>, bool)> {
    // One row more than the page can hold: it says whether more exist and
    // whether the page's last row ends a tool-call group.
    let rows = messages::scan(conn, chat_id, cursor, limit + 1).await?;
    let mut rows: Vec<ChatMessage> = rows.iter().map(ChatMessage::from).collect();
    let direction = match cursor {
        Cursor::After(_) => paging::Direction::Forward,
        Cursor::Latest | Cursor::Before(_) => paging::Direction::Backward,
    };
    let n = paging::cut(&rows, direction, limit as usize, max_bytes);
    let has_more = rows.len() > n;
    rows.truncate(n);
    if direction == paging::Direction::Backward {
        rows.reverse();
    }
    Ok((rows, has_more))
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
/// (`queue`), queue it at the head and interrupt (`interrupt`: `R* → I1`,
/// `I* → I1`, `A* → R1`), queue it as a steer message that enters history at
/// the running turn's next step boundary (`steer` while running; as `queue`
/// in other states), or refuse it with `409` naming the status (`reject`;
/// API.md "Busy behaviours and the queue").
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/messages",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses(
        (status = 200, description = "Sent (or the stored response of an earlier send with the same client_message_id)", body = SendMessageResponse),
        E400, E401, E403, E404, E409, E413, E415, E429,
    )
)]
pub async fn send_message(
    State(state): State<AppState>,
    target: ChatTarget,
    body: extract::Json<SendMessageRequest>,
) -> ApiResult<Json<Value>> {
    let id = target.id();
    let req = body.read().await?;
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
    target.require_owner()?;
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
    // API.md "Budgets": over budget, nothing changes (a repeat of an
    // earlier send still gets its response).
    if let Some(response) = crate::usage::refuse_send_over_budget(
        &state,
        &target.caller.user,
        &target.chat,
        req.client_message_id.as_deref(),
        &fingerprint,
    )
    .await?
    {
        return Ok(Json(response));
    }

    let receipt = req
        .client_message_id
        .clone()
        .map(|key| (key, fingerprint.clone()));
    let mut send = match state.store().machine(id).begin_user_send(receipt).await? {
        UserSendStart::Open(send) => send,
        UserSendStart::Repeated(response) => return Ok(Json(response)),
        UserSendStart::KeyConflict => {
            return Err(ApiError::conflict(
                "client_message_id was already used for a different message.",
            ));
        }
        UserSendStart::Archived => return Err(ApiError::archived()),
    };
    let mut message = NewMessage::user(content).created_by(target.caller.id());
    send.link_files(&mut message.content, state.options().max_files_per_chat)
        .await
        .map_err(|e| validate::file_link_error(e, &req.content, "content"))?;
    message.model_config_id = req.model_config_id;
    message.reasoning_effort = req.reasoning_effort.map(|e| e.as_str().to_owned());
    message.client_message_id = req.client_message_id.clone();
    let (result, position) = send
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
        queued_message: result
            .queued_message
            .as_ref()
            .map(|q| ChatQueuedMessage::at(position.unwrap_or_default(), q)),
        messages,
    };
    let response = serde_json::to_value(&response).map_err(ApiError::internal)?;
    send.commit(&response).await?;
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
    responses(
        (status = 200, description = "Edited; the chat runs again (R0)", body = EditMessageResponse),
        E400, E401, E403, E404, E409, E413, E415, E429,
    )
)]
pub async fn edit_message(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
    body: extract::Json<EditMessageRequest>,
) -> ApiResult<Json<EditMessageResponse>> {
    let id = params.uuid("chat")?;
    let message_id = params.id("message")?;
    let chat = visible_chat(&state, &caller, id).await?;
    let req = body.read().await?;
    let content = validate::message_content(&req.content, "content")?;
    check_model_config(&state, req.model_config_id, "model_config_id").await?;
    require_owner(&caller, &chat)?;
    // API.md "Budgets": over budget, nothing changes.
    crate::usage::refuse_over_budget(&state, &caller.user).await?;

    let mut tx = begin(&state, id, true).await?;
    let target = messages::select(tx.conn().await?, id, message_id).await?;
    match target {
        Some(m) if client_visible(&m) => {
            if m.role != chatd_core::ChatRole::User {
                return Err(StateError::EditedMessageNotUser { message_id }.into());
            }
        }
        _ => return Err(StateError::MessageNotFound { message_id }.into()),
    }
    let mut replacement = NewMessage::user(content).created_by(caller.id());
    tx.link_files(&mut replacement.content, state.options().max_files_per_chat)
        .await
        .map_err(|e| validate::file_link_error(e, &req.content, "content"))?;
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
