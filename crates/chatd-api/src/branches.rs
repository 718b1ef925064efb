//! Branches, regenerate and fork (API.md "Branches, regenerate and fork"):
//! `POST /chats/{chat}/messages/{message}/regenerate`, `POST
//! /chats/{chat}/branches/activate`, `POST /chats/{chat}/fork`, and the
//! tree `GET /chats/{chat}/messages/tree` (an extension the CLI's
//! `chatd chat branches` and clients drawing the whole tree read).
//!
//! Regenerate and activate are one state-machine bundle each
//! (`ChatTx::regenerate_message`, `ChatTx::activate_branch`), owner-only,
//! idle chats only (`W`, `E0`; busy or `E1` → `409`, archived → `400`);
//! a fork is one store operation (`Store::fork_chat`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::{Caller, ChatTarget, require_owner, visible_chat};
use crate::chats::{Chat, begin, commit};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415, E429};
use crate::extract::{self, PathParams};
use crate::objects::ChatRole;

/// `POST /api/v2/chats/{chat}/messages/{message}/regenerate`:
/// `RegenerateMessage` (`W/E0 → R0`). `message` must be an assistant
/// answer of the active branch (else `400`; not on it → `404`); the branch
/// is cut back to the user message it answers and the worker answers that
/// again, as a new sibling branch. Nothing is deleted. Owner-only; over a
/// monthly budget → `429`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/messages/{message}/regenerate",
    tag = "messages",
    params(
        ("chat" = Uuid, Path, description = "Chat id"),
        ("message" = i64, Path, description = "An assistant message of the active branch", minimum = 1),
    ),
    responses(
        (status = 200, description = "Regenerating; the chat runs (R0)", body = Chat),
        E400, E401, E403, E404, E409, E429,
    )
)]
pub async fn regenerate(
    State(state): State<AppState>,
    caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Chat>> {
    let id = params.uuid("chat")?;
    let message_id = params.id("message")?;
    let chat = visible_chat(&state, &caller, id).await?;
    require_owner(&caller, &chat)?;
    // API.md "Budgets": over budget, nothing changes.
    crate::usage::refuse_over_budget(&state, &caller.user).await?;
    let mut tx = begin(&state, id, true).await?;
    tx.regenerate_message(message_id).await?;
    commit(tx).await
}

/// `ActivateBranchRequest`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateBranchRequest {
    /// A message of the chat, on any branch: the branch ending at the
    /// newest message under it becomes active. Positive.
    #[schema(minimum = 1)]
    pub message_id: i64,
}

/// `POST /api/v2/chats/{chat}/branches/activate`: `ActivateBranch`
/// (`W/E0 → W`): the branch ending at the newest leaf under `message_id`
/// becomes the active one; the stream sends `history_reset` and the new
/// branch. Owner-only; busy or `E1` → `409`; a message not in the chat →
/// `404`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/branches/activate",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    request_body = ActivateBranchRequest,
    responses(
        (status = 200, description = "The branch is active; the chat waits (W)", body = Chat),
        E400, E401, E403, E404, E409, E413, E415,
    )
)]
pub async fn activate_branch(
    State(state): State<AppState>,
    target: ChatTarget,
    body: extract::Json<ActivateBranchRequest>,
) -> ApiResult<Json<Chat>> {
    target.require_owner()?;
    let req = body.read().await?;
    positive_id(req.message_id)?;
    let mut tx = begin(&state, target.id(), true).await?;
    tx.activate_branch(req.message_id).await?;
    commit(tx).await
}

/// `ForkRequest` (the body is optional).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The last message to copy: a message of the active branch (positive).
    /// Default: all of it.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub message_id: Option<i64>,
}

/// `POST /api/v2/chats/{chat}/fork` → `201 Chat`: a new idle chat of the
/// same owner with a copy of the active branch up to `message_id` (default:
/// all of it; the files its messages name are copied too and count against
/// the owner's storage, `413` over it), the same model config, tools,
/// MCP servers, plan mode and system prompt, titled "Fork of <title>", with
/// `forked_from`. The source does not change and may be in any state,
/// archived included. Owner-only.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/fork",
    tag = "chats",
    params(("chat" = Uuid, Path, description = "Chat id")),
    request_body(content = Option<ForkRequest>, description = "Optional"),
    responses(
        (status = 201, description = "Forked; the new chat waits (W)", body = Chat),
        E400, E401, E403, E404, E413, E415,
    )
)]
pub async fn fork_chat(
    State(state): State<AppState>,
    target: ChatTarget,
    body: extract::Json<ForkRequest>,
) -> ApiResult<(StatusCode, Json<Chat>)> {
    target.require_owner()?;
    let req = body.read_or_default().await?;
    if let Some(id) = req.message_id {
        positive_id(id)?;
    }
    let outcome = state
        .store()
        .fork_chat(chatd_store::ForkInput {
            source_chat_id: target.id(),
            owner_id: target.caller.id(),
            message_id: req.message_id,
            default_quota: state.options().limits.max_storage_bytes,
        })
        .await?;
    match outcome {
        chatd_store::ForkOutcome::Forked(chat) => {
            Ok((StatusCode::CREATED, Json(Chat::from(chat.as_ref()))))
        }
        chatd_store::ForkOutcome::OverQuota(storage, needed) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "The fork's files would exceed your storage quota.",
        )
        .with_detail(format!(
            "Copying its files needs {needed} bytes; {} of {} bytes are used.",
            storage.used, storage.quota
        ))),
    }
}

/// `400` naming `message_id` unless it is positive, as for ids in a path
/// (`PathParams::id`).
fn positive_id(id: i64) -> ApiResult<()> {
    if id < 1 {
        return Err(ApiError::invalid(
            "message_id",
            "must be a positive message id",
        ));
    }
    Ok(())
}

/// One message of `MessageTree`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TreeNode {
    /// Message id.
    pub id: i64,
    /// The nearest client-visible message it follows; `null` for a root.
    pub parent_id: Option<i64>,
    /// Role.
    pub role: ChatRole,
    /// The first 80 characters of its last non-empty text part.
    pub preview: Option<String>,
    /// On the active branch.
    pub active: bool,
    /// Insertion time.
    pub created_at: DateTime<Utc>,
}

/// `MessageTree`: every client-visible message of the chat, on every
/// branch, ascending by id.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageTree {
    /// The messages, parents before children.
    pub nodes: Vec<TreeNode>,
}

/// `GET /api/v2/chats/{chat}/messages/tree` (extension): the whole tree,
/// without message bodies: what `chatd chat branches` draws. Visible to
/// whoever may read the chat's messages.
#[utoipa::path(
    get,
    path = "/api/v2/chats/{chat}/messages/tree",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "The tree", body = MessageTree), E400, E401, E404)
)]
pub async fn message_tree(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<Json<MessageTree>> {
    let nodes = chatd_store::messages::tree(state.store().pool(), target.id())
        .await?
        .into_iter()
        .map(|n| TreeNode {
            id: n.id,
            parent_id: n.parent_id,
            role: n.role,
            preview: n.preview,
            active: n.active,
            created_at: n.created_at,
        })
        .collect();
    Ok(Json(MessageTree { nodes }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_fork_body_means_the_whole_branch() {
        let req: super::ForkRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(req.message_id, None);
        assert!(serde_json::from_str::<super::ForkRequest>(r#"{"message_id":"x"}"#).is_err());
        assert!(serde_json::from_str::<super::ForkRequest>(r#"{"other":1}"#).is_err());
    }
}
