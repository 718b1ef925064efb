//! Tool results of a chat waiting on client-executed tools (API.md "Chat
//! routes": `POST /chats/{chat}/tool-results`; `spec/chatd-architecture.md`
//! "HTTP endpoints"): `CompleteRequiresAction`, one state-machine bundle as
//! in [`crate::messages`]. The tools themselves are the chat's
//! `dynamic_tools` (`DynamicTool`, checked by [`crate::validate`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chatd_core::StateError;
use chatd_store::{CompleteRequiresActionInput, ToolResultInput};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::app::AppState;
use crate::auth::ChatTarget;
use crate::chats::{Chat, begin, commit};
use crate::error::{ApiError, ApiResult, E400, E401, E403, E404, E409, E413, E415};
use crate::extract;
use crate::validate;

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

/// `POST /api/v2/chats/{chat}/tool-results`: `CompleteRequiresAction`:
/// `A0 → R0`, `A1 → R1`. Owner-only. The results must answer exactly the
/// pending calls (`400` naming the `tool_call_id` otherwise).
#[utoipa::path(
    post,
    path = "/api/v2/chats/{chat}/tool-results",
    tag = "messages",
    params(("chat" = Uuid, Path, description = "Chat id")),
    responses((status = 200, description = "Results stored; the chat runs again", body = Chat), E400, E401, E403, E404, E409, E413, E415)
)]
pub async fn submit_tool_results(
    State(state): State<AppState>,
    target: ChatTarget,
    body: extract::Json<ToolResultsRequest>,
) -> ApiResult<Json<Chat>> {
    let req = body.read().await?;
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
    target.require_owner()?;
    let mut tx = begin(&state, target.id(), true).await?;
    let last_model_config_id = tx.chat().await?.last_model_config_id;
    let input = CompleteRequiresActionInput {
        created_by: Some(target.caller.id()),
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
    commit(tx).await
}
