//! Actions on one chat's execution (API.md "Chat routes": `POST
//! /chats/{chat}/interrupt`, `/reconcile-invalid`, `/compact`;
//! `spec/chatd-architecture.md` "HTTP endpoints" and "Invalid states"):
//! `Interrupt`, `ReconcileInvalidState` and `RequestCompaction`, each one
//! state-machine bundle as in [`crate::messages`].

use axum::Json;
use axum::extract::State;
use chatd_core::{ExecutionState, StateError};

use super::{Chat, begin, commit};
use crate::app::AppState;
use crate::auth::ChatTarget;
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, INVALID_STATE_MESSAGE};
use crate::objects::{ChatError, ChatErrorKind};

/// `POST /api/v2/chats/{chat}/interrupt`: `Interrupt(user_cancel)`:
/// `R0 → I0`, `R1 → I1`, `A0 → R0`, `A1 → R1`; anything else `409`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/interrupt",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Interrupt requested", body = Chat), E400, E401, E404, E409)
)]
pub async fn interrupt(State(state): State<AppState>, target: ChatTarget) -> ApiResult<Json<Chat>> {
    let mut tx = begin(&state, target.id(), true).await?;
    tx.interrupt().await?;
    commit(tx).await
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
    target: ChatTarget,
) -> ApiResult<Json<Chat>> {
    let mut tx = begin(&state, target.id(), false).await?;
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
    commit(tx).await
}

/// Fewest messages of the model context (besides system rows and the
/// current summary) that make a compaction worthwhile: half of them are
/// summarized.
pub const MIN_MESSAGES_TO_COMPACT: i64 = 4;

/// `POST /api/v2/chats/{chat}/compact`: `RequestCompaction` (`W/E0 → R0`,
/// `E1 → R1`). Owner-only. Busy → `409`; archived → `400`; fewer than 4
/// messages in the model context besides system rows and the current
/// summary, or a selection no summary could shrink (what it would replace
/// is no larger than [`chatd_core::context::min_summary_tokens`]) → `409`
/// "Nothing to compact.", and nothing changes. The worker then compacts on
/// the same path as automatic compaction (keeping half of them verbatim)
/// and the chat waits again; a summary that came out no smaller is not
/// committed (docs/operations.md "Context management").
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/compact",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Compaction requested; the chat runs", body = Chat), E400, E401, E403, E404, E409)
)]
pub async fn compact(State(state): State<AppState>, target: ChatTarget) -> ApiResult<Json<Chat>> {
    target.require_owner()?;
    let id = target.id();
    let mut tx = begin(&state, id, true).await?;
    let exec = tx.execution_state().await?;
    if exec.is_runnable() {
        return Err(ApiError::conflict("Chat is busy.").with_detail(format!(
            "Its execution state is {exec}; compact once it is idle."
        )));
    }
    if exec != ExecutionState::Invalid && tx.compactable_count().await? < MIN_MESSAGES_TO_COMPACT {
        return Err(ApiError::conflict("Nothing to compact.").with_detail(format!(
            "Compaction needs at least {MIN_MESSAGES_TO_COMPACT} messages since the last compaction."
        )));
    }
    if exec != ExecutionState::Invalid
        && let Some(tokens) = too_small_to_compact(&mut tx).await?
    {
        return Err(
            ApiError::conflict("Nothing to compact.").with_detail(format!(
                "The messages a compaction would summarize take about {tokens} tokens; a summary \
             would not be smaller."
            )),
        );
    }
    tx.request_compaction().await?;
    commit(tx).await
}

/// The window a chat without a model config is measured against: large
/// enough that it never bounds the verbatim tail.
const NO_WINDOW: i64 = i64::MAX / 1_000;

/// What a manual compaction of `tx`'s chat would replace, in estimated
/// tokens, when a summary could not be smaller than that (the worker's
/// selection, [`chatd_core::context::select_compaction`] with the chat's
/// model config, against [`chatd_core::context::min_summary_tokens`]);
/// `None` when it could. A chat without a model config is measured with
/// the default verbatim tail and no window bound.
async fn too_small_to_compact(tx: &mut chatd_store::ChatTx) -> ApiResult<Option<i64>> {
    use chatd_core::context::{CompactionMode, ContextEntry, select_compaction};
    let chat = tx.chat().await?;
    let config =
        chatd_store::model_configs::for_chat(tx.reader().await?, chat.last_model_config_id).await?;
    let (keep, limit) = match config {
        Some(row) => (
            row.def.options.compact_recent_messages(),
            row.def.context_limit,
        ),
        None => (
            chatd_core::ModelOptions::default().compact_recent_messages(),
            NO_WINDOW,
        ),
    };
    let entries = tx.model_context_entries().await?;
    let ctx: Vec<&ContextEntry> = entries.iter().collect();
    let Some(selection) = select_compaction(&ctx, keep, limit, CompactionMode::Manual) else {
        return Ok(Some(0));
    };
    Ok((!selection.can_shrink(&ctx)).then(|| selection.tokens_before(&ctx)))
}

/// `POST /api/v2/chats/{chat}/clear-context`: `ClearContext` (`W/E0 → W`,
/// clearing `last_error`; API.md "Context management"). Owner-only. It
/// inserts a client-visible `system` message `[{type: "context-cleared"}]`
/// that the model never sees, and the model sees nothing before it. Busy
/// or `E1` (messages queued behind an error) → `409`; archived → `400`.
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/clear-context",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Context cleared; the chat waits", body = Chat), E400, E401, E403, E404, E409)
)]
pub async fn clear_context(
    State(state): State<AppState>,
    target: ChatTarget,
) -> ApiResult<Json<Chat>> {
    target.require_owner()?;
    let id = target.id();
    let mut tx = begin(&state, id, true).await?;
    let exec = tx.execution_state().await?;
    if !matches!(exec, ExecutionState::W | ExecutionState::E0) {
        let detail = if exec.is_runnable() {
            format!("Its execution state is {exec}; clear the context once it is idle.")
        } else {
            format!(
                "Its execution state is {exec}; only an idle chat, or one whose error has no queued messages behind it, can be cleared."
            )
        };
        return Err(ApiError::conflict("The context cannot be cleared now.").with_detail(detail));
    }
    let mut boundary = chatd_store::NewMessage::new(
        chatd_core::ChatRole::System,
        vec![chatd_core::MessagePart::ContextCleared],
    )
    .created_by(target.caller.id());
    boundary.visibility = chatd_core::Visibility::User;
    boundary.compressed = true;
    tx.clear_context(vec![boundary]).await?;
    commit(tx).await
}
