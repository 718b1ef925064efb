//! Chat collection and chat resource routes and the `Chat` object (API.md "Chat routes",
//! "Listing and paging", "Details"; `spec/chatd-architecture.md` "HTTP
//! endpoints": `POST /api/experimental/chats` and
//! `PATCH /api/experimental/chats/{chat}`).
//!
//! Visibility: a member sees only their own chats and those shared with
//! them (read only: `403` on any change); any other chat answers `404`,
//! exactly as a chat that does not exist ([`crate::auth::readable_chat`],
//! [`crate::auth::visible_chat`]). Admins see every chat. The actions on a
//! chat's execution (interrupt, reconcile, compact) are in [`actions`].
//!
//! Execution state changes go through the state machine only: `Create` for a
//! new chat, `SetArchived` (the whole family from its root,
//! [`chatd_store::Store::set_family_archived`]) for archiving. A metadata
//! update (title, labels, pin order, plan mode) is not a transition: it runs
//! under [`chatd_store::ChatMachine::lock`], so it neither advances
//! `snapshot_version` nor publishes, but it does advance `updated_at`.
//! Deleting is a hard delete of the chat and its descendants, allowed only
//! when every one of them is deletable (`W`, `E0`, `E1`, `XW`, `XE0`, `XE1`:
//! [`chatd_core::ExecutionState::is_deletable`], applied by
//! [`chatd_store::chats::delete_family`]).

pub mod actions;

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use chatd_core::{ExecutionState, StateError};
use chatd_store::{ChatTx, CreateChatInput, NewMessage, StoreError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::{Caller, ChatTarget, visible_chat};
use crate::error::{
    ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415, INVALID_STATE_MESSAGE,
};
use crate::extract::{self, QueryParams, double_option};
use crate::objects::{
    ChatContext, ChatError, ChatInputPart, ChatStatus, DynamicTool, PlanMode, ReasoningEffort,
};
use crate::validate;
use chatd_store::LockMode;
use chatd_store::chats::{self, NotDeletable};
use chatd_store::{mcp_servers, model_configs, shares};

/// `Chat`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Chat {
    /// Chat id.
    pub id: Uuid,
    /// Owner.
    pub owner_id: Uuid,
    /// Parent chat of a sub-chat.
    pub parent_chat_id: Option<Uuid>,
    /// Root of the chat's family (`null` for a root).
    pub root_chat_id: Option<Uuid>,
    /// Title (at most 200 characters).
    pub title: String,
    /// Execution status.
    pub status: ChatStatus,
    /// Archived marker.
    pub archived: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Pin order (0 = not pinned).
    pub pin_order: i32,
    /// Model config of the latest message that chose one (`null` when no
    /// config was ever chosen and there was no default).
    pub last_model_config_id: Option<Uuid>,
    /// Last error.
    pub last_error: Option<ChatError>,
    /// Advanced by every state-machine transaction.
    pub snapshot_version: i64,
    /// Snapshot in which message history last changed.
    pub history_version: i64,
    /// Snapshot in which the queue last changed.
    pub queue_version: i64,
    /// Snapshot in which the retry state last changed.
    pub retry_state_version: i64,
    /// Generation attempts under the current history version.
    pub generation_attempt: i64,
    /// Replica that owns the chat.
    pub worker_id: Option<Uuid>,
    /// Deadline of a pending client tool action.
    pub requires_action_deadline_at: Option<DateTime<Utc>>,
    /// Client-executed tools.
    pub dynamic_tools: Vec<DynamicTool>,
    /// MCP servers offered to the model.
    pub mcp_server_ids: Vec<Uuid>,
    /// Plan mode.
    pub plan_mode: Option<PlanMode>,
    /// The model is offered the built-in agent tools (`spawn_agent`,
    /// `wait_agent`, `message_agent`, `close_agent`; API.md "Sub-agents and
    /// plan mode"). Children spawned by a chat have it too.
    pub subagents: bool,
    /// The chat's committed workspace (API.md "Workspaces and
    /// provider-hosted tools"): `null` without one, and until the first step
    /// that changed it committed.
    pub workspace: Option<WorkspaceSummary>,
    /// Number of client-visible messages (what `GET .../messages` can
    /// return; model-only rows such as compaction summaries and soft-deleted
    /// rows are never counted). Kept as a column, never counted on read
    /// (API.md "Message windows and paging by size").
    pub message_count: i64,
    /// The first 200 characters (Unicode scalar values) of the newest
    /// non-empty `text` part of the newest visible message that has one, or
    /// `null` when no visible message has text. Kept as a column: listing
    /// chats never reads message bodies.
    pub last_message_preview: Option<String>,
    /// The size of the model context against the model's window.
    pub context: ChatContext,
    /// The last message of the active branch (API.md "Branches, regenerate
    /// and fork"; may be a model-only row); `null` for a chat without
    /// messages.
    pub active_leaf_id: Option<i64>,
    /// Where a fork came from (`POST .../fork`); `null` for other chats.
    pub forked_from: Option<ForkedFrom>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change (transitions and metadata updates).
    pub updated_at: DateTime<Utc>,
}

impl From<&chatd_store::Chat> for Chat {
    fn from(c: &chatd_store::Chat) -> Self {
        Chat {
            id: c.id,
            owner_id: c.owner_id,
            parent_chat_id: c.parent_chat_id,
            root_chat_id: c.root_chat_id,
            title: c.title.clone(),
            status: c.status,
            archived: c.archived,
            labels: c.labels.clone(),
            pin_order: c.pin_order,
            last_model_config_id: c.last_model_config_id,
            last_error: c.last_error.clone(),
            snapshot_version: c.snapshot_version,
            history_version: c.history_version,
            queue_version: c.queue_version,
            retry_state_version: c.retry_state_version,
            generation_attempt: c.generation_attempt,
            worker_id: c.worker_id,
            requires_action_deadline_at: c.requires_action_deadline_at,
            dynamic_tools: c.dynamic_tools.clone(),
            mcp_server_ids: c.mcp_server_ids.clone(),
            plan_mode: c.plan_mode.as_deref().map(|_| PlanMode::Plan),
            subagents: c.subagents,
            workspace: c.workspace_summary().map(|w| WorkspaceSummary {
                bytes: w.bytes,
                files: w.files,
                updated_at: w.updated_at,
            }),
            message_count: c.message_count,
            last_message_preview: c.last_message_preview.clone(),
            context: ChatContext::from(c),
            active_leaf_id: c.active_leaf_id,
            forked_from: c.forked_from_chat_id.map(|chat_id| ForkedFrom {
                chat_id,
                message_id: c.forked_from_message_id.unwrap_or_default(),
            }),
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// `Chat.forked_from`: the chat a fork copied and the last message it
/// copied. The source may have been deleted since.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForkedFrom {
    /// The source chat.
    pub chat_id: Uuid,
    /// The last message of the source's active branch the fork copied.
    pub message_id: i64,
}

/// `CreateChatRequest`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateChatRequest {
    /// The first user message; required and non-empty.
    #[schema(schema_with = validate::message_content_schema)]
    pub content: Vec<ChatInputPart>,
    /// Title, at most 200 characters, not blank (default "New Chat").
    #[serde(default)]
    #[schema(schema_with = validate::title_schema)]
    pub title: Option<String>,
    /// An enabled model config; default: the enabled default config.
    #[serde(default)]
    pub model_config_id: Option<Uuid>,
    /// Reasoning effort of the first message (extension: API.md lists it for
    /// sends only).
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// System prompt, at most 10,000 characters; stored as the first
    /// (system) message.
    #[serde(default)]
    #[schema(schema_with = validate::system_prompt_schema)]
    pub system_prompt: Option<String>,
    /// At most 50 labels; keys 1–64 characters without `:`, values at most
    /// 256 characters.
    #[serde(default)]
    #[schema(schema_with = validate::labels_schema)]
    pub labels: Option<BTreeMap<String, String>>,
    /// At most 250 client-executed tools with unique names.
    #[serde(default)]
    #[schema(schema_with = validate::dynamic_tools_schema)]
    pub dynamic_tools: Option<Vec<DynamicTool>>,
    /// Existing MCP servers to offer the model (at most 100).
    #[serde(default)]
    #[schema(schema_with = validate::mcp_server_ids_schema)]
    pub mcp_server_ids: Option<Vec<Uuid>>,
    /// Plan mode.
    #[serde(default)]
    pub plan_mode: Option<PlanMode>,
    /// Parent chat (must be visible to the caller and not archived); the new
    /// chat joins the parent's family.
    #[serde(default)]
    pub parent_chat_id: Option<Uuid>,
    /// Offer the model the built-in agent tools (API.md "Sub-agents and
    /// plan mode"; default `false`). A non-boolean is `400` naming
    /// `subagents`.
    #[serde(default)]
    pub subagents: Option<bool>,
    /// Give the chat a workspace: the model is offered the built-in tools
    /// `shell`, `read_file`, `write_file` and `list_files` on a directory of
    /// the chat's own (API.md "Workspaces and provider-hosted tools";
    /// default `false`). A non-boolean is `400` naming `workspace`.
    #[serde(default)]
    pub workspace: Option<bool>,
}

/// `Chat.workspace`: the committed workspace's size, file count and last
/// change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WorkspaceSummary {
    /// File contents and symlink targets, in bytes.
    pub bytes: i64,
    /// Regular files and symlinks.
    pub files: i32,
    /// When the last step that changed it committed.
    pub updated_at: DateTime<Utc>,
}

/// Body of `PATCH /chats/{chat}`: every field optional.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateChatRequest {
    /// New title (1–200 characters, not blank).
    #[serde(default)]
    #[schema(schema_with = validate::title_schema)]
    pub title: Option<String>,
    /// Archive (root chats only; the whole family) or unarchive.
    #[serde(default)]
    pub archived: Option<bool>,
    /// Replaces every label.
    #[serde(default)]
    #[schema(schema_with = validate::labels_schema)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Pin order, `0..=2147483647` (0 = not pinned).
    #[serde(default)]
    #[schema(schema_with = validate::pin_order_schema)]
    pub pin_order: Option<i32>,
    /// `"plan"`, or `null` to leave plan mode.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<PlanMode>)]
    pub plan_mode: Option<Option<PlanMode>>,
}

/// Query of `GET /chats`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct ListChatsParams {
    /// Absent: unarchived chats only; `true`: archived only; `false`:
    /// unarchived only.
    archived: Option<bool>,
    /// `key:value` (split at the first `:`); may repeat, all must match.
    label: Option<Vec<String>>,
    /// Case-insensitive substring of the title (at most 200 characters).
    q: Option<String>,
    /// Page size, 1..=100 (default 50).
    limit: Option<i64>,
    /// Id of the last chat of the previous page.
    after_id: Option<Uuid>,
    /// List another user's chats (admins only; `403` for members unless it
    /// is their own id).
    owner: Option<Uuid>,
    /// Only the children of this chat (API.md "Sub-agents and plan mode");
    /// absent: only root chats (children are hidden from the default
    /// list). Not a uuid → `400` naming `parent_id`.
    parent_id: Option<Uuid>,
    /// `true`: the chats other users shared with the caller (API.md
    /// "Sign-in, search, sharing and export"), with the same filters; not
    /// with `owner`.
    shared: Option<bool>,
}

/// The page size of `GET /chats`: 1..=100 (the OpenAPI document states it:
/// [`crate::openapi`]).
pub(crate) const LIMIT: validate::IntRange = validate::IntRange::new(1, 100);

/// Schema of the `label` filter: `key:value` strings
/// ([`validate::LABEL_FILTER_PATTERN`]).
pub(crate) fn label_filter_schema() -> utoipa::openapi::schema::Array {
    let mut item = validate::text_schema(0, 0, false);
    item.max_length = None;
    item.pattern = Some(validate::LABEL_FILTER_VALUE_PATTERN.to_owned());
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(item)
        .build()
}

/// Schema of `q`: at most [`validate::MAX_TITLE_CHARS`] characters.
pub(crate) fn q_schema() -> utoipa::openapi::schema::Object {
    validate::text_schema(0, validate::MAX_TITLE_CHARS, false)
}

/// Checks that `id` is an enabled model config.
pub(crate) async fn check_model_config(
    state: &AppState,
    id: Option<Uuid>,
    field: &str,
) -> ApiResult<()> {
    if let Some(id) = id
        && !model_configs::is_enabled(state.store().pool(), id).await?
    {
        return Err(ApiError::invalid(field, "unknown or disabled model config"));
    }
    Ok(())
}

/// Opens a state-machine bundle on `chat_id`; with `reject_archived`,
/// answers `400` when the chat is archived (read under the lock).
pub(crate) async fn begin(
    state: &AppState,
    chat_id: Uuid,
    reject_archived: bool,
) -> ApiResult<ChatTx> {
    let mut tx = state.store().machine(chat_id).begin().await?;
    if reject_archived && tx.chat().await?.archived {
        return Err(ApiError::archived());
    }
    Ok(tx)
}

/// Commits the bundle `tx` (which publishes `chat:update`) and answers
/// with the chat as it committed.
pub(crate) async fn commit(tx: ChatTx) -> ApiResult<Json<Chat>> {
    let chat = tx.commit().await?;
    Ok(Json(Chat::from(&chat)))
}

/// `GET /api/v2/chats`: the caller's chats (or `owner`'s, for admins),
/// newest `updated_at` first, then by id descending.
#[utoipa::path(
    get,
    path = "/api/v2/chats",
    tag = "chats",
    params(ListChatsParams),
    responses(
        (status = 200, description = "A page of chats, newest first", body = Vec<Chat>),
        E400, E401, E403,
    )
)]
pub async fn list_chats(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Vec<Chat>>> {
    let query = QueryParams::parse(query.as_deref())?;
    let archived = query.bool("archived")?.unwrap_or(false);
    let limit = query.int_in("limit", LIMIT.min, LIMIT.max, 50)?;
    let after_id = query.uuid("after_id")?;
    let owner = query.uuid("owner")?;
    let parent_id = query.uuid("parent_id")?;
    let shared = query.bool("shared")?.unwrap_or(false);
    if shared && owner.is_some() {
        return Err(ApiError::invalid_query(
            "shared",
            "cannot be combined with owner",
        ));
    }
    let q = query.get("q").map(str::to_owned);
    if q.as_deref()
        .is_some_and(|q| q.chars().count() > validate::MAX_TITLE_CHARS)
    {
        return Err(ApiError::invalid_query(
            "q",
            "must be at most 200 characters",
        ));
    }
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for label in query.all("label") {
        // `label.contains(validate::LABEL_FILTER_PATTERN)`, the schema's pattern.
        let Some((k, v)) = label.split_once(validate::LABEL_FILTER_PATTERN) else {
            return Err(ApiError::invalid_query("label", "must be key:value"));
        };
        keys.push(k.to_owned());
        values.push(v.to_owned());
    }
    let owner = match owner {
        Some(owner) if owner != caller.id() => {
            caller.require_admin()?;
            owner
        }
        _ => caller.id(),
    };
    let pool = state.store().pool();
    let known_cursor = match after_id {
        None => true,
        Some(after) if shared => shares::can_read(pool, after, owner).await?,
        Some(after) => chats::is_owned_by(pool, after, owner).await?,
    };
    if !known_cursor {
        return Err(ApiError::invalid_query("after_id", "unknown chat"));
    }
    let filter = chats::ChatFilter {
        owner,
        archived,
        q,
        label_keys: keys,
        label_values: values,
        after_id,
        limit,
        parent_id,
    };
    let chats = if shared {
        chats::list_shared(pool, &filter).await?
    } else {
        chats::list(pool, &filter).await?
    };
    Ok(Json(chats.iter().map(Chat::from).collect()))
}

/// `POST /api/v2/chats`: `Create` (`N → R0`). The system prompt, if any,
/// becomes the first message, the content the second.
#[utoipa::path(
    post,
    path = "/api/v2/chats",
    tag = "chats",
    responses(
        (status = 201, description = "Created; status running (R0)", body = Chat),
        E400, E401, E413, E415, crate::error::E429,
    )
)]
pub async fn create_chat(
    State(state): State<AppState>,
    caller: Caller,
    body: extract::Json<CreateChatRequest>,
) -> ApiResult<(StatusCode, Json<Chat>)> {
    let req = body.read().await?;
    let content = validate::message_content(&req.content, "content")?;
    let title = req.title.as_deref().map(validate::title).transpose()?;
    let system_prompt = match req.system_prompt.as_deref() {
        Some(p) if p.chars().count() > validate::MAX_SYSTEM_PROMPT_CHARS => {
            return Err(ApiError::invalid(
                "system_prompt",
                format!(
                    "must be at most {} characters",
                    validate::MAX_SYSTEM_PROMPT_CHARS
                ),
            ));
        }
        Some(p) if !p.trim().is_empty() => Some(p.to_owned()),
        _ => None,
    };
    let labels = req.labels.unwrap_or_default();
    validate::labels(&labels)?;
    let tools = req.dynamic_tools.unwrap_or_default();
    validate::dynamic_tools(&tools)?;
    let mut mcp_server_ids = req.mcp_server_ids.unwrap_or_default();
    if mcp_server_ids.len() > validate::MAX_MCP_SERVERS {
        return Err(ApiError::invalid(
            "mcp_server_ids",
            format!("at most {} servers", validate::MAX_MCP_SERVERS),
        ));
    }
    let known = mcp_servers::existing_ids(state.store().pool(), &mcp_server_ids).await?;
    if let Some(i) = mcp_server_ids.iter().position(|id| !known.contains(id)) {
        return Err(ApiError::invalid(
            format!("mcp_server_ids[{i}]"),
            "unknown MCP server",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    mcp_server_ids.retain(|id| seen.insert(*id));
    check_model_config(&state, req.model_config_id, "model_config_id").await?;
    let model_config_id = match req.model_config_id {
        Some(id) => Some(id),
        None => model_configs::default_id(state.store().pool()).await?,
    };
    if let Some(parent) = req.parent_chat_id {
        let parent = visible_chat(&state, &caller, parent).await.map_err(|e| {
            let detail = if e.status() == StatusCode::FORBIDDEN {
                "the chat is shared with you read only"
            } else {
                "chat not found"
            };
            ApiError::invalid("parent_chat_id", detail)
        })?;
        if parent.archived {
            return Err(ApiError::invalid(
                "parent_chat_id",
                "the parent chat is archived",
            ));
        }
    }
    // API.md "Budgets": over budget, nothing is created.
    crate::usage::refuse_over_budget(&state, &caller.user).await?;

    let mut initial_messages = Vec::with_capacity(2);
    if let Some(prompt) = system_prompt {
        initial_messages.push(NewMessage::system(prompt));
    }
    let mut user = NewMessage::user(content).created_by(caller.id());
    user.model_config_id = model_config_id;
    user.reasoning_effort = req.reasoning_effort.map(|e| e.as_str().to_owned());
    initial_messages.push(user);
    let input = CreateChatInput {
        owner_id: caller.id(),
        parent_chat_id: req.parent_chat_id,
        title: Some(title.unwrap_or_else(|| validate::DEFAULT_TITLE.to_owned())),
        labels,
        last_model_config_id: model_config_id,
        last_reasoning_effort: req.reasoning_effort.map(|e| e.as_str().to_owned()),
        dynamic_tools: tools,
        mcp_server_ids,
        plan_mode: req.plan_mode.map(|p| p.as_str().to_owned()),
        initial_messages,
        max_file_links: state.options().max_files_per_chat,
        subagents: req.subagents.unwrap_or(false),
        workspace: req.workspace.unwrap_or(false),
        ..CreateChatInput::default()
    };
    let created = match state.store().create_chat(input).await {
        Ok(created) => created,
        // The parent was deleted between the check and the insert.
        Err(StoreError::State(StateError::ChatNotFound)) => {
            return Err(ApiError::invalid("parent_chat_id", "chat not found"));
        }
        Err(err) => return Err(validate::file_link_error(err, &req.content, "content")),
    };
    Ok((StatusCode::CREATED, Json(Chat::from(&created.chat))))
}

/// `GET /api/v2/chats/{chat}`.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "The chat", body = Chat), E400, E401, E404)
)]
pub async fn get_chat(target: ChatTarget) -> Json<Chat> {
    Json(Chat::from(&target.chat))
}

/// `PATCH /api/v2/chats/{chat}`: metadata, and `SetArchived` for the
/// `archived` field (spec "PATCH /api/experimental/chats/{chat}").
///
/// `archived: true` on an archived chat is `409`; on a child chat `400`; on
/// a family with a busy member `409`. `archived: false` on a child whose
/// root or parent is archived is `409`. On an archived chat only title, labels and pin
/// order may change (plan mode: `400`). The archive transition is applied
/// before the metadata so that a rejected transition changes nothing.
#[utoipa::path(
    patch,
    path = "/api/v2/chats/{chat}",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "The updated chat", body = Chat), E400, E401, E404, E409, E413, E415)
)]
pub async fn update_chat(
    State(state): State<AppState>,
    ChatTarget { chat, .. }: ChatTarget,
    body: extract::Json<UpdateChatRequest>,
) -> ApiResult<Json<Chat>> {
    let id = chat.id;
    let req = body.read().await?;
    let title = req.title.as_deref().map(validate::title).transpose()?;
    if let Some(labels) = &req.labels {
        validate::labels(labels)?;
    }
    if let Some(p) = req.pin_order
        && !validate::PIN_ORDER.contains(p.into())
    {
        return Err(ApiError::invalid("pin_order", "must not be negative"));
    }
    let stays_archived = req.archived.unwrap_or(chat.archived);
    if stays_archived && req.plan_mode.is_some() {
        return Err(ApiError::archived());
    }

    let store = state.store();
    match req.archived {
        Some(true) if chat.archived => {
            return Err(ApiError::conflict("Chat is already archived."));
        }
        Some(true) => {
            if chat.parent_chat_id.is_some() {
                return Err(StateError::ChatNotRoot.into());
            }
            store.set_family_archived(id, true).await?;
        }
        Some(false) if chat.archived => match chat.root_chat_id.filter(|root| *root != id) {
            Some(root) => {
                let mut guarded = false;
                for ancestor in [Some(root), chat.parent_chat_id].into_iter().flatten() {
                    guarded |= chats::select(store.pool(), ancestor, LockMode::None)
                        .await?
                        .is_some_and(|r| r.archived);
                }
                if guarded {
                    return Err(ApiError::conflict("The chat's root is archived.")
                        .with_detail("Unarchive the root chat; that unarchives its family."));
                }
                store
                    .machine(id)
                    .update(|tx| Box::pin(async move { tx.set_archived(false).await }))
                    .await?;
            }
            None => {
                store.set_family_archived(id, false).await?;
            }
        },
        _ => {}
    }

    let metadata_changes = title.is_some()
        || req.labels.is_some()
        || req.pin_order.is_some()
        || req.plan_mode.is_some();
    if !metadata_changes && req.archived.is_some() {
        let chat = chats::select(store.pool(), id, LockMode::None)
            .await?
            .ok_or_else(ApiError::chat_not_found)?;
        return Ok(Json(Chat::from(&chat)));
    }
    let changes = chats::MetadataChanges {
        title,
        labels: req.labels,
        pin_order: req.pin_order,
        plan_mode: req.plan_mode.map(|p| p.map(|p| p.as_str().to_owned())),
    };
    // Metadata is not execution state: lock the row without a snapshot bump.
    let mut locked = store.machine(id).lock().await?;
    let chat = chats::update_metadata(locked.conn(), id, &changes).await?;
    locked.finish().await?;
    Ok(Json(Chat::from(&chat)))
}

/// `DELETE /api/v2/chats/{chat}`: hard delete of the chat, its rows and its
/// descendants (a root: the whole family). Every deleted chat must be in
/// `W`, `E0`, `E1`, `XW`, `XE0` or `XE1`; otherwise `409` and nothing is
/// deleted.
#[utoipa::path(
    delete,
    path = "/api/v2/chats/{chat}",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 204, description = "Deleted"), E400, E401, E404, E409)
)]
pub async fn delete_chat(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<StatusCode> {
    let mut locked = state.store().machine(target.id()).lock().await?;
    match chats::delete_family(locked.conn(), target.id()).await? {
        Ok(()) => {}
        Err(NotDeletable {
            chat_id: member,
            state: ExecutionState::Invalid,
        }) => {
            return Err(ApiError::conflict(INVALID_STATE_MESSAGE)
                .with_detail(format!("chat {member} is in an invalid state")));
        }
        Err(NotDeletable {
            chat_id: member,
            state: busy,
        }) => {
            return Err(ApiError::conflict("Chat is busy.").with_detail(format!(
                "chat {member} is in execution state {busy}; interrupt it or wait until it is idle"
            )));
        }
    }
    locked.finish().await?;
    Ok(StatusCode::NO_CONTENT)
}
