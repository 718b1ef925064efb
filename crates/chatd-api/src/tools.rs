//! Tool results of a chat waiting on client-executed tools or approvals
//! (API.md "Chat routes": `POST /chats/{chat}/tool-results`, and "Tool
//! approval (human in the loop)"; `spec/chatd-architecture.md` "HTTP
//! endpoints"): `CompleteRequiresAction`, one state-machine bundle as in
//! [`crate::messages`]. The client tools are the chat's `dynamic_tools`
//! (`DynamicTool`, checked by [`crate::validate`]); every other pending
//! call waits for approval (an MCP tool whose server's `require_approval`
//! names it) and is answered with `approved` instead of `output`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chatd_core::{StateError, ToolResultErrorKind};
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

/// The most bytes a denial or approval `reason` may have.
pub const MAX_REASON_BYTES: usize = 4096;

/// One submitted answer: `output` (and `is_error`) for a client-tool call,
/// or `approved` (and `reason`) for a call waiting for approval; exactly
/// one of `output` and `approved`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The pending call it answers (1 to 512 bytes).
    #[schema(schema_with = tool_call_id_schema)]
    pub tool_call_id: String,
    /// A client tool's result: any JSON value, `null` included.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Value>)]
    pub output: Option<Value>,
    /// Whether the client tool failed (default false; only with `output`).
    #[serde(default)]
    pub is_error: Option<bool>,
    /// The decision on a call waiting for approval.
    #[serde(default)]
    pub approved: Option<bool>,
    /// Why (optional, at most [`MAX_REASON_BYTES`] bytes; only with
    /// `approved`). A denial's result carries it.
    #[serde(default)]
    #[schema(schema_with = reason_schema)]
    pub reason: Option<String>,
}

/// The longest `tool_call_id`, in bytes.
pub const MAX_TOOL_CALL_ID_BYTES: usize = 512;

/// `tool_call_id`'s schema: 1 to [`MAX_TOOL_CALL_ID_BYTES`] (the schema
/// counts characters: the same for ASCII ids).
fn tool_call_id_schema() -> utoipa::openapi::schema::Object {
    validate::text_schema(1, MAX_TOOL_CALL_ID_BYTES, false)
}

/// `reason`'s schema: at most [`MAX_REASON_BYTES`] (characters in the
/// schema), `null` the same as absent.
fn reason_schema() -> utoipa::openapi::schema::Object {
    validate::nullable(validate::text_schema(0, MAX_REASON_BYTES, false))
}

/// The two shapes of a [`ToolResult`] that [`ToolResult::to_input`]
/// accepts, as the JSON Schema `oneOf` the OpenAPI document adds to the
/// `ToolResult` component: `output` (any JSON value) with `is_error`, no
/// `approved` or `reason`; or `approved` (a boolean) with `reason`, no
/// `output` or `is_error` (`null` counts as absent, except for `output`).
pub fn tool_result_one_of() -> serde_json::Value {
    serde_json::json!([
        {
            "required": ["output"],
            "properties": {"approved": {"type": "null"}, "reason": {"type": "null"}},
        },
        {
            "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}, "is_error": {"type": "null"}},
            "not": {"required": ["output"]},
        },
    ])
}

/// Deserializes a present field, `null` included, as `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl ToolResult {
    /// The store's input for this answer, or the `400` naming the field of
    /// `results[i]` that is wrong.
    fn to_input(&self, i: usize) -> ApiResult<ToolResultInput> {
        let field = |name: &str| format!("results[{i}].{name}");
        match (&self.output, self.approved) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                field("approved"),
                "give output (a client tool's result) or approved (a decision on a call waiting for approval), not both",
            )),
            (None, None) => Err(ApiError::invalid(
                field("output"),
                "required: output for a client tool call, or approved for a call waiting for approval",
            )),
            (Some(output), None) => {
                if self.reason.is_some() {
                    return Err(ApiError::invalid(field("reason"), "only with approved"));
                }
                Ok(ToolResultInput::output(
                    self.tool_call_id.clone(),
                    output.to_string(),
                    self.is_error.unwrap_or(false),
                ))
            }
            (None, Some(approved)) => {
                if self.is_error.is_some() {
                    return Err(ApiError::invalid(field("is_error"), "only with output"));
                }
                if self
                    .reason
                    .as_ref()
                    .is_some_and(|r| r.len() > MAX_REASON_BYTES)
                {
                    return Err(ApiError::invalid(
                        field("reason"),
                        format!("must be at most {MAX_REASON_BYTES} bytes"),
                    ));
                }
                Ok(ToolResultInput::decision(
                    self.tool_call_id.clone(),
                    approved,
                    self.reason.clone(),
                ))
            }
        }
    }
}

/// `results`' schema: at most [`validate::MAX_TOOL_RESULTS`] answers.
fn results_schema() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(utoipa::openapi::Ref::from_schema_name("ToolResult"))
        .max_items(Some(validate::MAX_TOOL_RESULTS))
        .build()
}

/// Body of `POST /chats/{chat}/tool-results`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultsRequest {
    /// Exactly one answer per pending tool call (at most 250).
    #[schema(schema_with = results_schema)]
    pub results: Vec<ToolResult>,
}

/// `POST /api/v2/chats/{chat}/tool-results`: `CompleteRequiresAction`:
/// `A0 → R0`, `A1 → R1`. Owner-only. The results must answer exactly the
/// pending calls (`400` naming `results[i].tool_call_id` otherwise), each
/// with the answer its kind takes (`400` naming `results[i].approved` for
/// a decision on a client-tool call, `results[i].output` for an output on
/// a call waiting for approval, and either for both or neither). An
/// approved call is run by the worker next; a denied one is answered with
/// `{"error": "Tool call denied by user", "reason": ...}`, `is_error`.
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
    let mut results = Vec::with_capacity(req.results.len());
    for (i, r) in req.results.iter().enumerate() {
        if r.tool_call_id.is_empty() || r.tool_call_id.len() > MAX_TOOL_CALL_ID_BYTES {
            return Err(ApiError::invalid(
                format!("results[{i}].tool_call_id"),
                "must be 1 to 512 bytes",
            ));
        }
        results.push(r.to_input(i)?);
    }
    target.require_owner()?;
    let mut tx = begin(&state, target.id(), true).await?;
    let last_model_config_id = tx.chat().await?.last_model_config_id;
    let input = CompleteRequiresActionInput {
        created_by: Some(target.caller.id()),
        model_config_id: last_model_config_id,
        results,
        suffix_messages: Vec::new(),
    };
    match tx.complete_requires_action(input).await {
        Ok(_) => {}
        Err(chatd_store::StoreError::State(StateError::ToolResult(e))) => {
            let base = ApiError::from(StateError::ToolResult(e.clone()));
            let detail = base.body().detail.clone().unwrap_or_default();
            let name = match e.kind {
                ToolResultErrorKind::ApprovalForClientTool => "approved",
                ToolResultErrorKind::OutputForApproval => "output",
                _ => "tool_call_id",
            };
            let field = req
                .results
                .iter()
                .position(|r| r.tool_call_id == e.tool_call_id)
                .map(|i| format!("results[{i}].{name}"))
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
